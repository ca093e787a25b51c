"""The plugin toolkit (issue 35): the built-in plugins use what a third-party plugin gets, nothing more.

``mqttrl.plugin`` exports the seams (algorithm, storage, sample spec) and the toolkit the built-ins
need (torch state helpers, RNG state as JSON, networks, setting validators). Every import of mqttrl
under ``plugins/`` goes through it (or is ``from mqttrl import hookimpl``), so a plugin written
against the docs can do what DQN, PPO, SAC and the storages do.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import mqttrl.plugin

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def _mqttrl_imports(path: Path) -> list[tuple[int, str]]:
    """Every import of mqttrl in ``path``: (line, what it imports), anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mqttrl":
            found.append((node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "mqttrl"]
    return found


def _public(statement: str) -> bool:
    if statement == "from mqttrl import hookimpl":
        return True
    module = statement.split()[1]
    return module == "mqttrl.plugin" or module.startswith("mqttrl.plugin.")


def test_the_built_in_plugins_import_only_the_public_plugin_api():
    private = [
        f"{path.relative_to(PLUGINS.parent)}:{line}: {what}"
        for path in sorted(PLUGINS.rglob("*.py"))
        for line, what in _mqttrl_imports(path)
        if not _public(what)
    ]
    assert private == [], "plugins/ imports mqttrl's internals; export it from mqttrl.plugin:\n" + "\n".join(private)


def test_the_scan_sees_a_private_import():
    """The check above can fail: an internal import is found, wherever it is in a file."""
    source = "def f():\n    from mqttrl.state.torch_state import load_module\n"
    tree_imports = [f"from {n.module} import x" for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert tree_imports == ["from mqttrl.state.torch_state import x"] and not _public(tree_imports[0])
    assert _public("from mqttrl.plugin import Tensors") and _public("from mqttrl.plugin.storage import Point")


@pytest.mark.parametrize("name", mqttrl.plugin.__all__)
def test_every_toolkit_name_resolves(name):
    assert getattr(mqttrl.plugin, name) is not None


def test_torch_state_round_trips_through_numpy_without_pickle():
    """The toolkit's checkpoint helpers: a module and Adam's moments out to numpy and back."""
    import numpy as np
    import torch

    from mqttrl.plugin import adam_moments, export_module, load_adam_moments, load_module

    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(4, 3)).sum().backward()
    opt.step()
    tensors = export_module(net, "net.")
    moments, steps = adam_moments(opt, "opt.")
    assert all(isinstance(v, np.ndarray) for v in [*tensors.values(), *moments.values()]) and steps == [1.0, 1.0]
    twin = torch.nn.Linear(3, 2)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=0.1)
    load_module(twin, tensors, "net.")
    load_adam_moments(twin_opt, moments, "opt.", steps)
    assert torch.equal(twin.weight, net.weight)
    for p, q in zip(net.parameters(), twin.parameters()):
        assert torch.equal(opt.state[p]["exp_avg_sq"], twin_opt.state[q]["exp_avg_sq"])
    with pytest.raises(ValueError, match="has 2 parameters, this one 1"):
        load_adam_moments(torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))]), moments, "opt.", steps)


def test_a_generators_state_round_trips_as_json():
    import json

    import numpy as np

    from mqttrl.plugin import generator_from_json, generator_to_json

    rng = np.random.default_rng(7)
    state = json.loads(json.dumps(generator_to_json(rng)))
    expected = rng.random(3)
    again = np.random.default_rng(0)
    generator_from_json(again, state)
    assert np.array_equal(again.random(3), expected)


def test_make_learner_gets_a_context_where_it_takes_one():
    """The learner node passes ``context=`` to a ``make_learner`` that accepts it (the built-ins),
    and calls an older plugin's five-argument one as before: nothing patches a plugin any more."""
    from mqttrl.plugin.algorithm import takes_context
    from mqttrl.plugin.manager import get_registry

    def old(params, obs_space, act_space, device, seed):
        return None

    def keywords(params, obs_space, act_space, device, seed, **kwargs):
        return None

    assert not takes_context(old) and takes_context(keywords)
    for name in ("dqn", "sac"):
        assert takes_context(get_registry().algorithm(name).make_learner), name


@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_the_builtin_learners_time_their_replay_sampling_through_the_context(algorithm):
    import contextlib

    import gymnasium as gym
    import numpy as np

    from mqttrl.plugin import LearnerContext, SampleBatch
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithm(algorithm)
    env = gym.make("CartPole-v1" if algorithm == "dqn" else "Pendulum-v1")
    params = info.params(batch_size=8, learning_starts=8) if algorithm == "dqn" else info.params(batch_size=8)
    blocks = []

    @contextlib.contextmanager
    def timed(block):
        blocks.append(block)
        yield

    learner = info.make_learner(
        params, env.observation_space, env.action_space, "cpu", 0, context=LearnerContext(timed=timed)
    )
    spec = info.sample_spec(params, env.observation_space, env.action_space)
    n = 64
    rng = np.random.default_rng(0)
    arrays = {}
    for name, field in spec.fields.items():
        shape = (n, *field.shape)
        if np.issubdtype(np.dtype(field.dtype), np.integer):
            arrays[name] = rng.integers(0, 2, shape).astype(field.dtype)
        else:
            low = -1.0 if field.low is None else max(-1.0, float(field.low))
            high = 1.0 if getattr(field, "high", None) is None else min(1.0, float(field.high))
            arrays[name] = rng.uniform(low, high, shape).astype(field.dtype)
    learner.add(SampleBatch(run="r", worker="w0", seq=0, model_version=0, count=n, arrays=arrays))
    for _ in range(3):
        learner.train_step()
    assert "sample" in blocks


class Dial:
    """The real-time game of docs/plugins.md ("Real-time games"), taken from the page as written: a
    third-party game on its own clock that uses the toolkit alone."""

    @staticmethod
    def source() -> str:
        text = (PLUGINS.parent / "docs" / "plugins.md").read_text()
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        found = [b for b in blocks if "class Dial(RealTimeGameEnv)" in b]
        assert len(found) == 1, "docs/plugins.md has no (or several) Dial example"
        return found[0]

    @staticmethod
    def make(pausable: bool = False):
        namespace: dict = {}
        exec(compile(Dial.source(), "docs/plugins.md", "exec"), namespace)
        game_class = type("PausableDial", (namespace["Dial"],), {"pausable": True}) if pausable else namespace["Dial"]
        return game_class()


def test_a_real_time_game_from_the_base_class_speaks_the_protocol():
    """The base class's defaults: no-op pause/resume (not pausable unless it says so), set_speed
    that says once it is ignored, and a step that lasts the run's control period."""
    import time

    from mqttrl.conformance import check_realtime_game
    from mqttrl.envs.realtime import can_pause

    results = check_realtime_game(Dial.make, "dial")
    assert results and all(r.ok for r in results), results
    assert {"dial: pause/resume", "dial: set_speed"} <= {r.name for r in results}
    assert not can_pause(Dial.make()) and can_pause(Dial.make(pausable=True))
    game = Dial.make()
    game.reset(seed=0)
    game.set_control_hz(20.0)
    game.step(1)
    t0 = time.monotonic()
    obs, reward, term, trunc, info = game.step(1)
    assert 0.04 <= time.monotonic() - t0 < 0.5 and game.observation_space.contains(obs)


def test_the_base_class_names_what_a_game_must_write():
    import gymnasium as gym

    from mqttrl.plugin import RealTimeGameEnv

    class Unfinished(RealTimeGameEnv):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(NotImplementedError, match=r"Unfinished.send_action\(action\)"):
        Unfinished().step(0)


def test_a_batching_storage_retries_a_failed_batch_and_loses_nothing():
    """The toolkit's BatchingStorage (the influxdb storage's base): a send that fails is retried
    after a backoff, in order, nothing lost; the queue is bounded, its drops counted."""
    from mqttrl.plugin import BatchingStorage, Point

    class Flaky(BatchingStorage):
        def __init__(self, failures: int, **kwargs):
            self.sent, self.failing = [], failures
            super().__init__("flaky", batch_size=3, flush_interval_s=0.01, **kwargs)

        def send(self, batch):
            if self.failing:
                self.failing -= 1
                raise ConnectionError("server down")
            self.sent.extend(batch)

    points = [Point("m", {"run": "r"}, {"v": i}, float(i)) for i in range(7)]
    store = Flaky(2)
    store.write(points)
    assert store.flush(10.0)
    store.close()
    assert [p.fields["v"] for p in store.sent] == list(range(7))
    assert (store.failures, store.dropped, store.pending, store.written) == (2, 0, 0, 7)

    down = Flaky(10**9, max_pending=5)
    down.write(points)
    assert down.dropped == 2 and down.pending == 5
    down.close(timeout=0.2)
    assert down.sent == []


def test_the_checks_old_home_still_serves_them_with_a_deprecation():
    # the checks left the toolkit (they make envs: an import circle); a plugin's tests calling
    # mqttrl.plugin.check.check_algorithm keep working
    import mqttrl.conformance
    import mqttrl.plugin.check as old

    with pytest.warns(DeprecationWarning, match="mqttrl.conformance"):
        assert old.check_algorithm is mqttrl.conformance.check_algorithm
    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        old.no_such_check


def _type_checking_names(module) -> dict[str, str]:
    """What a module's ``if TYPE_CHECKING:`` block imports: the name it binds -> "module:name"."""
    names = {}
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.unparse(imp)
                names.update({a.asname or a.name: f"{imp.module}:{a.name}" for a in imp.names})
    return names


def test_type_checkers_see_every_lazy_name():
    """``mqttrl.plugin`` and ``mqttrl`` import their names when first used (a module ``__getattr__``),
    which type checkers cannot follow: an ``if TYPE_CHECKING:`` block names each one for them, from
    the module the runtime imports it from."""
    import mqttrl

    contract = {name: where if ":" in where else f"{where}:{name}" for name, where in mqttrl.plugin._CONTRACT.items()}
    assert _type_checking_names(mqttrl.plugin) == contract
    assert _type_checking_names(mqttrl) == {name: f"{module}:{name}" for name, module in mqttrl._LAZY.items()}


def test_both_packages_ship_their_types():
    """PEP 561: ``py.typed`` in mqttrl and in the built-in plugins, and in the wheel's package data."""
    import tomllib

    root = PLUGINS.parent
    assert (root / "mqttrl" / "py.typed").is_file() and (PLUGINS / "py.typed").is_file()
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert package_data["mqttrl"] == ["py.typed"] and package_data["mqttrl_plugins"] == ["py.typed"]


def test_optional_members_are_protocols_of_their_own_asked_with_isinstance():
    from mqttrl.plugin import ConfiguredStorage, MovableForward, NoisyForward, PendingStorage
    from mqttrl.plugin.storage import pending_points

    class Plain:
        def write(self, points):
            pass

        def close(self):
            pass

    class Holding(Plain):
        pending = property(lambda self: 3)

    class Configured(Plain):
        def run_config(self, config):
            self.config = config

    assert pending_points([Plain(), Holding(), Holding()]) == 6
    assert isinstance(Holding(), PendingStorage) and not isinstance(Plain(), PendingStorage)
    assert isinstance(Configured(), ConfiguredStorage) and not isinstance(Holding(), ConfiguredStorage)
    # the built-in DQN forwards: numpy and torch both run noiseless, only torch moves to a device
    from mqttrl_plugins.dqn.learner import TorchQForward
    from mqttrl_plugins.dqn.numpy_net import NumpyQForward

    assert issubclass(NumpyQForward, NoisyForward) and issubclass(TorchQForward, NoisyForward)
    assert issubclass(TorchQForward, MovableForward) and not issubclass(NumpyQForward, MovableForward)


def test_the_scalar_storage_base_is_the_toolkit_s_and_its_old_home_still_serves_it():
    import mqttrl_plugins.scalars as old
    from mqttrl.plugin import ScalarMapper, Scalars, ScalarStorage

    assert (old.ScalarStorage, old.ScalarMapper, old.Scalars) == (ScalarStorage, ScalarMapper, Scalars)
    from mqttrl_plugins.tensorboard_storage import TensorBoardStorage

    assert issubclass(TensorBoardStorage, ScalarStorage)


def test_the_screen_kit_stands_on_the_toolkit_s_real_time_base():
    from mqttrl.plugin import RealTimeGameEnv
    from mqttrl_plugins.screen.env import ScreenEnv

    assert issubclass(ScreenEnv, RealTimeGameEnv)
    assert ScreenEnv.pausable is False  # its window's game cannot be paused: a worker lets go of the keys instead
    assert ScreenEnv.step is not RealTimeGameEnv.step  # its own step: the period from the last frame, taps ended
