"""Everything a plugin author needs, in one package: the seams and the toolkit the built-ins use.

- ``hookspecs.py``: the hooks a plugin module implements with ``@hookimpl``;
- ``algorithm.py``: the algorithm seam (``Forward``, ``Actor``/``SyncActor``,
  ``AsyncLearner``/``SyncLearner``, ``AlgorithmInfo``, ``ActorContext``, ``LearnerContext``);
- ``storage.py``: the telemetry storage seam (``Point``, ``Storage``, ``to_line``), and
  ``BatchingStorage``, a base for a storage that sends to a server (queue, batches, retries);
  ``ScalarStorage`` (``scalar_storage.py``), a base for a storage of named scalars on one step axis
  (the ``tensorboard`` and ``wandb`` storages), with its ``ScalarMapper`` and ``Scalars``;
- ``RealTimeGameEnv``: a base class for a game on its own clock (the real-time protocol, rtgym's
  interface as a model: no-op ``pause``/``resume``/``set_speed`` by default); ``launched_game_pid``:
  the pid of the game the worker launched, while the env for it is being made;
- what a sample batch holds: ``SampleSpec``, ``FieldSpec``, ``SampleBatch``;
- networks shared by torch and numpy: ``NETWORKS``, ``ObsSize``, ``pick_network``,
  ``describe_torso``, ``validate_torso``, ``torso_out_size``, ``torso_weight_shapes``,
  ``initial_torso_weights``, ``orthogonal_matrix``, ``NumpyTorso``, and (torch) ``TorchTorso``, ``orthogonal_init``;
- checkpoints without pickle (torch): ``export_module``, ``load_module``, ``optimizer_state``,
  ``load_optimizer_state``, ``adam_moments``, ``load_adam_moments``; numpy RNG state as JSON:
  ``rng_to_json``, ``rng_from_json``, ``generator_to_json``, ``generator_from_json``;
- settings: ``ConfigError`` (one line for the user) and the validators ``positive``,
  ``non_negative``, ``unit_interval``, ``unit_positive``, ``layer_sizes``;
- the screen kit's readers (``mqttrl_plugins.screen.readers``): ``NumberReader``, ``MatchReader``,
  ``LivesReader``, ``BarReader``, ``StillReader``, ``Reading``, and glyphs: ``Glyph``, ``load_glyphs``,
  ``render_glyphs``, ``cut_glyphs``, ``save_glyphs`` (docs/real-games.md);
- ``obs_dtype`` (the observations' dtype kept from the env to the network), ``Episode`` (a
  demonstration episode), ``UPDATES_KEY`` and ``FLEET_PROGRESS_KEY`` (weights-info keys actors read);
- ``manager.py`` loads plugins (entry points, ``MQTTRL_LOAD_PLUGINS``). The conformance checks of
  ``mqttrl check-plugin`` live in ``mqttrl/conformance.py`` (they make envs, a floor above the
  toolkit); ``check.py`` is a deprecation shim that still serves them.

``from mqttrl.plugin import AlgorithmInfo, SampleSpec, Point`` and so on; every name is imported on
first use, so ``import mqttrl`` pulls in neither numpy nor gymnasium, and the torch helpers import
torch only where they are used. Type checkers, which cannot follow that, read the names from an
``if TYPE_CHECKING:`` block (the package ships ``py.typed``). The built-in plugins (``plugins/``)
import nothing else of mqttrl (``tests/test_plugin_toolkit.py`` holds them to it).
"""

from typing import TYPE_CHECKING

from mqttrl.plugin.hookspecs import hookimpl, hookspec

if TYPE_CHECKING:
    # _CONTRACT's names for type checkers and IDEs, one explicit re-export each (at runtime
    # ``__getattr__`` below imports them when first used); tests/test_plugin_toolkit.py holds the two
    # together. noqa: a renamed import is exported through ``__all__``, which ruff cannot read
    from mqttrl.config import ConfigError as ConfigError
    from mqttrl.config import layer_sizes as layer_sizes
    from mqttrl.config import non_negative as non_negative
    from mqttrl.config import positive as positive
    from mqttrl.config import unit_interval as unit_interval
    from mqttrl.config import unit_positive as unit_positive
    from mqttrl.demos import Episode as Episode
    from mqttrl.envs.launch import launched_game_pid as launched_game_pid
    from mqttrl.envs.rollout import obs_dtype as obs_dtype
    from mqttrl.nets import NETWORKS as NETWORKS
    from mqttrl.nets import NumpyTorso as NumpyTorso
    from mqttrl.nets import ObsSize as ObsSize
    from mqttrl.nets import describe as describe_torso  # noqa: F401
    from mqttrl.nets import initial_weights as initial_torso_weights  # noqa: F401
    from mqttrl.nets import out_size as torso_out_size  # noqa: F401
    from mqttrl.nets import pick_network as pick_network
    from mqttrl.nets import validate as validate_torso  # noqa: F401
    from mqttrl.nets import weight_shapes as torso_weight_shapes  # noqa: F401
    from mqttrl.nets.numpy_torso import orthogonal as orthogonal_matrix  # noqa: F401
    from mqttrl.nets.torch_torso import Torso as TorchTorso  # noqa: F401
    from mqttrl.nets.torch_torso import orthogonal_init as orthogonal_init
    from mqttrl.plugin.algorithm import FLEET_PROGRESS_KEY as FLEET_PROGRESS_KEY
    from mqttrl.plugin.algorithm import INTERVENTION as INTERVENTION
    from mqttrl.plugin.algorithm import UPDATES_KEY as UPDATES_KEY
    from mqttrl.plugin.algorithm import Actor as Actor
    from mqttrl.plugin.algorithm import ActorContext as ActorContext
    from mqttrl.plugin.algorithm import AlgorithmInfo as AlgorithmInfo
    from mqttrl.plugin.algorithm import AsyncLearner as AsyncLearner
    from mqttrl.plugin.algorithm import Forward as Forward
    from mqttrl.plugin.algorithm import LearnerContext as LearnerContext
    from mqttrl.plugin.algorithm import Mode as Mode
    from mqttrl.plugin.algorithm import MovableForward as MovableForward
    from mqttrl.plugin.algorithm import NoisyForward as NoisyForward
    from mqttrl.plugin.algorithm import SyncActor as SyncActor
    from mqttrl.plugin.algorithm import SyncLearner as SyncLearner
    from mqttrl.plugin.algorithm import TakeoverActor as TakeoverActor
    from mqttrl.plugin.algorithm import Tensors as Tensors
    from mqttrl.plugin.batching_storage import BatchingStorage as BatchingStorage
    from mqttrl.plugin.realtime_game import RealTimeGameEnv as RealTimeGameEnv
    from mqttrl.plugin.scalar_storage import STEPS as STEPS
    from mqttrl.plugin.scalar_storage import ScalarMapper as ScalarMapper
    from mqttrl.plugin.scalar_storage import Scalars as Scalars
    from mqttrl.plugin.scalar_storage import ScalarStorage as ScalarStorage
    from mqttrl.plugin.storage import ConfiguredStorage as ConfiguredStorage
    from mqttrl.plugin.storage import PendingStorage as PendingStorage
    from mqttrl.plugin.storage import Point as Point
    from mqttrl.plugin.storage import Storage as Storage
    from mqttrl.plugin.storage import to_line as to_line
    from mqttrl.state.rng import generator_from_json as generator_from_json
    from mqttrl.state.rng import generator_to_json as generator_to_json
    from mqttrl.state.rng import rng_from_json as rng_from_json
    from mqttrl.state.rng import rng_to_json as rng_to_json
    from mqttrl.state.torch_state import adam_moments as adam_moments
    from mqttrl.state.torch_state import export_module as export_module
    from mqttrl.state.torch_state import load_adam_moments as load_adam_moments
    from mqttrl.state.torch_state import load_module as load_module
    from mqttrl.state.torch_state import load_optimizer_state as load_optimizer_state
    from mqttrl.state.torch_state import optimizer_state as optimizer_state
    from mqttrl.wire import FieldSpec as FieldSpec
    from mqttrl.wire import SampleBatch as SampleBatch
    from mqttrl.wire import SampleSpec as SampleSpec
    from mqttrl_plugins.screen.readers import BarReader as BarReader
    from mqttrl_plugins.screen.readers import Glyph as Glyph
    from mqttrl_plugins.screen.readers import LivesReader as LivesReader
    from mqttrl_plugins.screen.readers import MatchReader as MatchReader
    from mqttrl_plugins.screen.readers import NumberReader as NumberReader
    from mqttrl_plugins.screen.readers import Reading as Reading
    from mqttrl_plugins.screen.readers import StillReader as StillReader
    from mqttrl_plugins.screen.readers import cut_glyphs as cut_glyphs
    from mqttrl_plugins.screen.readers import load_glyphs as load_glyphs
    from mqttrl_plugins.screen.readers import render_glyphs as render_glyphs
    from mqttrl_plugins.screen.readers import save_glyphs as save_glyphs

#: public name -> the module that defines it, or "module:name" where the toolkit's name differs
_CONTRACT = {
    "ActorContext": "mqttrl.plugin.algorithm",
    "LearnerContext": "mqttrl.plugin.algorithm",
    "Forward": "mqttrl.plugin.algorithm",
    "MovableForward": "mqttrl.plugin.algorithm",
    "NoisyForward": "mqttrl.plugin.algorithm",
    "Actor": "mqttrl.plugin.algorithm",
    "SyncActor": "mqttrl.plugin.algorithm",
    "TakeoverActor": "mqttrl.plugin.algorithm",
    "INTERVENTION": "mqttrl.plugin.algorithm",
    "AsyncLearner": "mqttrl.plugin.algorithm",
    "SyncLearner": "mqttrl.plugin.algorithm",
    "AlgorithmInfo": "mqttrl.plugin.algorithm",
    "Mode": "mqttrl.plugin.algorithm",
    "Tensors": "mqttrl.plugin.algorithm",
    "UPDATES_KEY": "mqttrl.plugin.algorithm",
    "FLEET_PROGRESS_KEY": "mqttrl.plugin.algorithm",
    "Point": "mqttrl.plugin.storage",
    "Storage": "mqttrl.plugin.storage",
    "PendingStorage": "mqttrl.plugin.storage",
    "ConfiguredStorage": "mqttrl.plugin.storage",
    "to_line": "mqttrl.plugin.storage",
    "BatchingStorage": "mqttrl.plugin.batching_storage",
    "ScalarStorage": "mqttrl.plugin.scalar_storage",
    "ScalarMapper": "mqttrl.plugin.scalar_storage",
    "Scalars": "mqttrl.plugin.scalar_storage",
    "STEPS": "mqttrl.plugin.scalar_storage",
    "RealTimeGameEnv": "mqttrl.plugin.realtime_game",
    "launched_game_pid": "mqttrl.envs.launch",
    "SampleSpec": "mqttrl.wire",
    "FieldSpec": "mqttrl.wire",
    "SampleBatch": "mqttrl.wire",
    # networks
    "NETWORKS": "mqttrl.nets",
    "ObsSize": "mqttrl.nets",
    "NumpyTorso": "mqttrl.nets",
    "pick_network": "mqttrl.nets",
    "describe_torso": "mqttrl.nets:describe",
    "validate_torso": "mqttrl.nets:validate",
    "torso_out_size": "mqttrl.nets:out_size",
    "torso_weight_shapes": "mqttrl.nets:weight_shapes",
    "initial_torso_weights": "mqttrl.nets:initial_weights",
    "orthogonal_matrix": "mqttrl.nets.numpy_torso:orthogonal",
    "TorchTorso": "mqttrl.nets.torch_torso:Torso",
    "orthogonal_init": "mqttrl.nets.torch_torso",
    # checkpoints (torch) and RNG state
    "export_module": "mqttrl.state.torch_state",
    "load_module": "mqttrl.state.torch_state",
    "optimizer_state": "mqttrl.state.torch_state",
    "load_optimizer_state": "mqttrl.state.torch_state",
    "adam_moments": "mqttrl.state.torch_state",
    "load_adam_moments": "mqttrl.state.torch_state",
    "rng_to_json": "mqttrl.state.rng",
    "rng_from_json": "mqttrl.state.rng",
    "generator_to_json": "mqttrl.state.rng",
    "generator_from_json": "mqttrl.state.rng",
    # settings
    "ConfigError": "mqttrl.config",
    "positive": "mqttrl.config",
    "non_negative": "mqttrl.config",
    "unit_interval": "mqttrl.config",
    "unit_positive": "mqttrl.config",
    "layer_sizes": "mqttrl.config",
    # envs and demonstrations
    "obs_dtype": "mqttrl.envs.rollout",
    "Episode": "mqttrl.demos",
    # the screen kit's readers: reward and done from a game's pixels (needs mqttrl[screen])
    "NumberReader": "mqttrl_plugins.screen.readers",
    "MatchReader": "mqttrl_plugins.screen.readers",
    "LivesReader": "mqttrl_plugins.screen.readers",
    "BarReader": "mqttrl_plugins.screen.readers",
    "StillReader": "mqttrl_plugins.screen.readers",
    "Reading": "mqttrl_plugins.screen.readers",
    "Glyph": "mqttrl_plugins.screen.readers",
    "load_glyphs": "mqttrl_plugins.screen.readers",
    "render_glyphs": "mqttrl_plugins.screen.readers",
    "cut_glyphs": "mqttrl_plugins.screen.readers",
    "save_glyphs": "mqttrl_plugins.screen.readers",
}

__all__ = ["hookimpl", "hookspec", *_CONTRACT]


def __getattr__(name: str):
    where = _CONTRACT.get(name)
    if where is None:
        raise AttributeError(f"module 'mqttrl.plugin' has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr or name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_CONTRACT])
