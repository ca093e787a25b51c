"""The plugin hooks. A plugin module implements any of them with ``@hookimpl``.

A third-party package adds algorithms, environments or storages by declaring an
entry point in the ``mqttrl`` group that names its module::

    [project.entry-points.mqttrl]
    my_algo = "my_package.mqttrl_plugin"

and implementing hooks in that module::

    from mqttrl import hookimpl

    @hookimpl
    def mqttrl_register_envs(register):
        register("MyGame-v0", make_my_game, "my game")

Every hook gets one argument, ``register``, and calls it once per thing it
registers; the manager learns from which plugin each registration came. A
function marked ``@hookimpl`` whose name matches no hook below refuses the whole
plugin with an error naming it (see docs/plugins.md). These signatures are
copied verbatim into docs/plugins.md, and a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # annotations only: importing mqttrl must not import gymnasium or numpy
    import gymnasium as gym

    from mqttrl.plugin.algorithm import AlgorithmInfo
    from mqttrl.plugin.storage import Storage

PROJECT = "mqttrl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mqttrl_register_algorithms(register: Callable[[AlgorithmInfo], None]) -> None:
    """Register algorithms: call ``register(info)`` once per algorithm.

    ``register`` accepts exactly one :class:`mqttrl.plugin.algorithm.AlgorithmInfo`
    (anything else raises ``TypeError``); ``info.name`` is the name configs use
    (``algorithm.name``). What is then called on it:

    * ``info.params(**overrides)`` builds the hyperparameters from the config;
    * ``info.sample_spec(params, obs_space, act_space)`` returns the
      :class:`~mqttrl.wire.SampleSpec` every incoming batch is validated against;
    * ``info.make_forward(params, obs_space, act_space, backend, seed=0)`` for
      ``backend`` in ``info.backends`` returns a :class:`~mqttrl.plugin.algorithm.Forward`;
    * ``info.make_actor(params, obs_space, act_space, ctx, forward)`` returns an
      :class:`~mqttrl.plugin.algorithm.Actor` (a :class:`~mqttrl.plugin.algorithm.SyncActor` in mode ``"sync"``);
    * ``info.make_learner(params, obs_space, act_space, device, seed)`` returns an
      :class:`~mqttrl.plugin.algorithm.AsyncLearner` (mode ``"async"``) or a
      :class:`~mqttrl.plugin.algorithm.SyncLearner` (mode ``"sync"``).

    ``mqttrl check-plugin NAME`` runs all of it once (:func:`mqttrl.conformance.check_algorithm`).
    """


@hookspec
def mqttrl_register_envs(register: Callable[[str, Callable[..., gym.Env], str], None]) -> None:
    """Register environments: call ``register(name, factory, description)`` once per env or namespace.

    ``name`` (str) is an exact env id (``"MyGame-v0"``), called as
    ``factory(**kwargs)`` with the config's ``[env] kwargs``; or a namespace
    ending in ``/`` (``"mygame/"``), whose factory is called as
    ``factory(rest_of_id, **kwargs)`` for every id starting with it
    (``"mygame/level-3"`` gives ``rest_of_id == "level-3"``). The factory must
    return a ``gymnasium.Env``. ``description`` (str) is one line for
    ``mqttrl plugins``.
    """


@hookspec
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    """Register telemetry sinks: call ``register(name, factory, description)`` once per storage.

    ``name`` (str) is what ``mqttrl-telemetry --storage NAME`` selects;
    ``factory(settings)`` gets the dict of that storage's ``--storage-opt
    NAME.KEY=VALUE`` options (values are strings; empty when none are given)
    and returns a :class:`mqttrl.plugin.storage.Storage`: the telemetry node calls its
    ``write(points)`` with each batch of :class:`mqttrl.plugin.storage.Point` and
    ``close()`` once at shutdown. ``description`` (str) is one line for ``mqttrl plugins``.
    """


#: the hooks, in the order the manager calls them
HOOKS = ("mqttrl_register_algorithms", "mqttrl_register_envs", "mqttrl_register_storages")
