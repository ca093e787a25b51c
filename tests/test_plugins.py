"""Plugins: the ``mqttrl plugins`` report, MQTTRL_LOAD_PLUGINS, and a third-party
package built and installed on the fly, then used by a real learner and worker."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import numpy as np
import pytest
from helpers.plugin_packages import install_package
from helpers.procs import Proc, node_env, script

CORRIDOR_DIST = "mqttrl-corridor"
CORRIDOR_VERSION = "0.3.1"
CORRIDOR_ENV = "corridor/Corridor-v0"

CORRIDOR_MODULE = '''
"""A third-party mqttrl plugin: a corridor env and a renamed copy of DQN."""

import attrs
import gymnasium as gym
import attrs
import numpy as np

from mqttrl.plugin.hookspecs import hookimpl

MAX_STEPS = 50


class Corridor(gym.Env):
    """Walk right to the end of a corridor; observation is (position, steps left)."""

    def __init__(self, length: int = 6):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0
        self.t = 0

    def _obs(self):
        return np.array([self.pos / self.length, 1.0 - self.t / MAX_STEPS], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.pos = max(0, min(self.length, self.pos + (1 if int(action) == 1 else -1)))
        terminated = self.pos == self.length
        truncated = self.t >= MAX_STEPS and not terminated
        return self._obs(), (1.0 if terminated else -0.01), terminated, truncated, {}


def make_corridor(**kwargs):
    return Corridor(**kwargs)


@hookimpl
def mqttrl_register_envs(register):
    register("corridor/Corridor-v0", make_corridor, "a 1-D corridor, Box(2,) float32 obs, 2 actions, 50 steps")


@hookimpl
def mqttrl_register_algorithms(register):
    # a third-party algorithm: DQN under another name, registered as an AlgorithmInfo
    from mqttrl_plugins import dqn

    infos = []
    dqn.mqttrl_register_algorithms(register=infos.append)
    register(attrs.evolve(infos[0], name="corridor_dqn", description="DQN, renamed by a third-party plugin"))
'''

CORRIDOR_PYPROJECT = f'''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{CORRIDOR_DIST}"
version = "{CORRIDOR_VERSION}"
description = "test plugin for mqttrl"
requires-python = ">=3.11"

[project.entry-points.mqttrl]
corridor = "mqttrl_corridor"

[tool.setuptools]
py-modules = ["mqttrl_corridor"]
'''


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def corridor_site(tmp_path_factory) -> Path:
    """Build and install the corridor plugin package into a private directory (once per module)."""
    site = install_package(
        tmp_path_factory.mktemp("corridor"),
        {"pyproject.toml": CORRIDOR_PYPROJECT, "mqttrl_corridor.py": CORRIDOR_MODULE},
    )
    assert (site / "mqttrl_corridor.py").exists()
    assert list(site.glob("mqttrl_corridor-*.dist-info/entry_points.txt"))
    return site


def plugins_json(**env: str) -> list[dict]:
    r = subprocess.run([script("mqttrl"), "plugins"], capture_output=True, text=True, env=node_env(**env), timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def by_name(report: list[dict]) -> dict[str, dict]:
    return {p["name"]: p for p in report}


@pytest.fixture(scope="module")
def full_report(corridor_site) -> dict[str, dict]:
    """``mqttrl plugins`` with every plugin loaded and the corridor package importable
    (run once: each run imports torch, which is slow on a busy machine)."""
    env = node_env(PYTHONPATH=str(corridor_site))
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    r = subprocess.run([script("mqttrl"), "plugins"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return by_name(json.loads(r.stdout))


def test_plugins_lists_builtins(full_report):
    import mqttrl

    dqn, gym_envs = full_report["dqn"], full_report["gym_envs"]
    assert dqn["module"] == "mqttrl_plugins.dqn"
    assert dqn["algorithms"] == ["dqn"]
    assert "envs" not in dqn
    assert gym_envs["module"] == "mqttrl_plugins.gym_envs"
    assert gym_envs["envs"] == ["gym/"]
    assert "algorithms" not in gym_envs
    builtins = [p for p in full_report.values() if p["module"].startswith("mqttrl_plugins.")]
    assert len(builtins) >= 2
    for p in builtins:  # every built-in comes in through mqttrl's own entry points
        assert p["distribution"] == "mqttrl", p
        assert p["version"] == mqttrl.__version__
        assert "error" not in p, p
        assert any(p.get(k) for k in ("algorithms", "envs", "storages")), p


def test_load_plugins_env_var_limits_loading():
    report = plugins_json(MQTTRL_LOAD_PLUGINS="gym_envs")
    assert [p["name"] for p in report] == ["gym_envs"]  # dqn is installed but not loaded
    assert report[0]["envs"] == ["gym/"]
    assert plugins_json(MQTTRL_LOAD_PLUGINS=" gym_envs , ,") == report  # blanks and spaces are ignored
    assert plugins_json(MQTTRL_LOAD_PLUGINS="") == []


def test_load_plugins_env_var_names_an_unknown_plugin():
    """A name no installed plugin has is a typo, refused in one line (it used to be ignored)."""
    r = subprocess.run(
        [script("mqttrl"), "plugins"],
        capture_output=True,
        text=True,
        env=node_env(MQTTRL_LOAD_PLUGINS=" gym_envs , nonexistent,"),
        timeout=60,
    )
    assert r.returncode == 5 and "Traceback" not in r.stderr, r.stderr
    assert "MQTTRL_LOAD_PLUGINS names 'nonexistent'" in r.stderr.strip().splitlines()[-1]


def test_third_party_plugin_is_listed(full_report):
    assert {"dqn", "gym_envs", "corridor"} <= set(full_report)
    c = full_report["corridor"]
    assert "error" not in c, c
    assert canon(c["distribution"]) == canon(CORRIDOR_DIST)
    assert c["version"] == CORRIDOR_VERSION
    assert c["module"] == "mqttrl_corridor"
    assert c["envs"] == [CORRIDOR_ENV]
    assert c["algorithms"] == ["corridor_dqn"]


@pytest.fixture
def registry_with(corridor_site, monkeypatch):
    """get_registry() in this process, with the corridor site importable and a plugin filter."""
    from mqttrl.plugin.manager import get_registry

    def load(wanted: str | None):
        if wanted is None:
            monkeypatch.delenv("MQTTRL_LOAD_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("MQTTRL_LOAD_PLUGINS", wanted)
        get_registry.cache_clear()
        return get_registry()

    monkeypatch.syspath_prepend(str(corridor_site))
    yield load
    get_registry.cache_clear()
    sys.modules.pop("mqttrl_corridor", None)


def test_third_party_env_and_algorithm_resolve(registry_with):
    from mqttrl.config import load_config
    from mqttrl.envs.make import make_env

    reg = registry_with("corridor")
    assert [p["name"] for p in reg.plugins] == ["corridor"]  # the filter applies to third-party plugins too
    assert set(reg.envs) == {CORRIDOR_ENV} and set(reg.algorithms) == {"corridor_dqn"}
    assert reg.envs[CORRIDOR_ENV].plugin == "corridor"

    env = make_env(CORRIDOR_ENV, {"length": 2}, reg)
    assert env.observation_space.shape == (2,) and env.observation_space.dtype == np.float32
    assert env.action_space.n == 2
    env.reset(seed=0)
    steps, term = 0, False
    while not term:
        _, _, term, trunc, _ = env.step(1)
        steps += 1
        assert not trunc
    assert steps == 2
    env.reset(seed=0)
    results = [env.step(0) for _ in range(50)]  # walking left never ends: capped at 50 steps
    assert [r[3] for r in results] == [False] * 49 + [True]

    algo = reg.algorithm("corridor_dqn")
    assert algo.mode == "async"
    cfg = load_config(None, ["algorithm.name=corridor_dqn", "algorithm.lr=0.01"], lambda n: reg.algorithm(n).params)
    assert cfg.algorithm.name == "corridor_dqn" and cfg.algorithm.params.lr == 0.01
    spec = algo.sample_spec(cfg.algorithm.params, env.observation_space, env.action_space)
    assert spec.fields  # the renamed algorithm works on the plugin's spaces

    # with gym_envs only, neither is known, and the error lists what is installed
    from mqttrl.plugin.manager import UnknownPluginError

    reg = registry_with("gym_envs")
    with pytest.raises(UnknownPluginError, match="gym/"):
        make_env(CORRIDOR_ENV, {}, reg)
    with pytest.raises(UnknownPluginError, match="corridor_dqn"):
        reg.algorithm("corridor_dqn")


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:  # a line being written
            pass
    return lines


@pytest.mark.e2e
@pytest.mark.slow
def test_third_party_env_end_to_end(corridor_site, mosquitto, tmp_path):
    run = "corridor-e2e"
    config = tmp_path / "corridor.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            run = "{run}"

            [env]
            id = "{CORRIDOR_ENV}"
            num_envs = 2

            [algorithm]
            name = "dqn"
            hidden = [16]
            batch_size = 16
            buffer_size = 2000
            learning_starts = 32

            [worker]
            batch_size = 16
            max_batch_delay_s = 0.2

            [learner]
            publish_every = 10
            checkpoint_every = 0
            checkpoint_replay = false
            # accept samples however old: this test is about the plugin, not staleness
            max_staleness_s = 100000
            metrics_interval_s = 0.5
            """
        )
    )
    run_dir = tmp_path / "run"
    env = node_env(PYTHONPATH=str(corridor_site))
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(config),
            "--broker",
            mosquitto.url,
            "--run-dir",
            str(run_dir),
            "--max-seconds",
            "25",
        ],
        tmp_path / "learner.log",
        env=env,
    )
    worker = Proc(
        [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", "w0"],
        tmp_path / "worker.log",
        env=env,
    )
    metrics_path = run_dir / "learner_metrics.jsonl"
    seen = None
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            assert learner.p.poll() is None, f"learner exited early:\n{learner.text()}"
            assert worker.p.poll() is None, f"worker exited early:\n{worker.text()}"
            for m in read_metrics(metrics_path):
                w0 = m.get("workers", {}).get("w0")
                if m.get("samples", 0) > 0 and w0 and w0.get("samples", 0) > 0:
                    seen = m
                    break
            if seen:
                break
            time.sleep(0.25)
    finally:
        worker.terminate()
        learner.terminate()
    assert seen is not None, (
        f"no samples from w0 reached the learner\n--- learner\n{learner.text()[-3000:]}\n--- worker\n{worker.text()[-3000:]}"
    )
    assert seen["workers"]["w0"]["samples"] <= seen["samples"]
    lines = read_metrics(metrics_path)
    assert all(m["rejected"] == {} for m in lines), [m["rejected"] for m in lines if m["rejected"]]
    assert lines[-1]["samples"] >= seen["samples"]
    assert "Traceback" not in learner.text() and "Traceback" not in worker.text()
    # the run config the learner published names the plugin env
    resolved = list(run_dir.glob("*.json"))
    assert any(CORRIDOR_ENV in p.read_text() for p in resolved), [p.name for p in resolved]


# ---- broken plugins: refused by name, the others load ---------------------------------------------

BROKEN_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mqttrl-broken-plugins"
version = "0.0.1"
requires-python = ">=3.11"

[project.entry-points.mqttrl]
typo = "mqttrl_typo"
unmarked = "mqttrl_unmarked"
raising = "mqttrl_raising"
badreg = "mqttrl_badreg"
zz_override = "mqttrl_override"

[tool.setuptools]
py-modules = ["mqttrl_typo", "mqttrl_unmarked", "mqttrl_raising", "mqttrl_badreg", "mqttrl_override"]
"""

BROKEN_MODULES = {
    # a misspelled hook (storage, not storages) next to a good one: the whole plugin is refused
    "mqttrl_typo.py": """
        from mqttrl import hookimpl

        @hookimpl
        def mqttrl_register_storage(register):
            register("typo_store", dict, "never registered")

        @hookimpl
        def mqttrl_register_envs(register):
            register("typo/", dict, "never registered either")
        """,
    # a hook's name without @hookimpl: pluggy alone would skip it silently
    "mqttrl_unmarked.py": """
        def mqttrl_register_envs(register):
            register("unmarked/", dict, "never registered")
        """,
    # a hook that registers one thing, then raises: nothing of it stays
    "mqttrl_raising.py": """
        from mqttrl import hookimpl

        @hookimpl
        def mqttrl_register_envs(register):
            register("raising/", dict, "dropped with its plugin")
            raise RuntimeError("boom")
        """,
    # register called with a name and factory for an algorithm
    "mqttrl_badreg.py": """
        from mqttrl import hookimpl

        @hookimpl
        def mqttrl_register_algorithms(register):
            register("badalgo", dict, "not an AlgorithmInfo")
        """,
    # a good plugin that overrides the built-in 'files' storage
    "mqttrl_override.py": """
        from mqttrl import hookimpl

        class Null:
            def __init__(self, settings):
                pass

            def write(self, points):
                pass

            def close(self):
                pass

        @hookimpl
        def mqttrl_register_storages(register):
            register("files", Null, "a null storage under the built-in's name")
        """,
}


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory) -> Path:
    return install_package(tmp_path_factory.mktemp("broken"), {"pyproject.toml": BROKEN_PYPROJECT, **BROKEN_MODULES})


@pytest.fixture
def registry_from(monkeypatch):
    """get_registry() in this process with ``site`` importable (cache cleared before and after)."""
    from mqttrl.plugin.manager import get_registry

    added: list[str] = []

    def load(site: Path, wanted: str | None = None):
        if wanted is None:
            monkeypatch.delenv("MQTTRL_LOAD_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("MQTTRL_LOAD_PLUGINS", wanted)
        monkeypatch.syspath_prepend(str(site))
        added.extend(p.stem for p in site.glob("*.py"))
        get_registry.cache_clear()
        return get_registry()

    yield load
    get_registry.cache_clear()
    for name in added:
        sys.modules.pop(name, None)


def test_misspelled_hook_refuses_the_plugin_by_name(broken_site):
    """Through the real path: entry points of an installed package, ``mqttrl plugins`` in a subprocess."""
    env = node_env(PYTHONPATH=str(broken_site))
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    r = subprocess.run([script("mqttrl"), "plugins"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    report = by_name(json.loads(r.stdout))
    typo = report["typo"]
    assert typo["module"] == "mqttrl_typo"
    assert "'typo'" in typo["error"] and "'mqttrl_register_storage'" in typo["error"], typo
    assert "did you mean 'mqttrl_register_storages'" in typo["error"]
    assert "envs" not in typo and "storages" not in typo  # its good hook is refused with it
    # logged with the plugin's name, and the node's other plugins load
    assert "plugin 'typo' (mqttrl_typo) implements unknown hook 'mqttrl_register_storage'" in r.stderr
    for name in ("dqn", "ppo", "gym_envs", "files", "influxdb"):
        assert "error" not in report[name], report[name]
    assert report["dqn"]["algorithms"] == ["dqn"] and report["influxdb"]["storages"] == ["influxdb"]


def test_broken_plugins_are_refused_and_the_rest_load(broken_site, registry_from, caplog):
    caplog.set_level("WARNING", logger="mqttrl.plugins")
    reg = registry_from(broken_site)
    report = by_name(reg.plugins)
    assert "without @hookimpl" in report["unmarked"]["error"] and "mqttrl_register_envs" in report["unmarked"]["error"]
    assert "RuntimeError: boom" in report["raising"]["error"] and "envs" not in report["raising"]
    assert "AlgorithmInfo" in report["badreg"]["error"] and "'badreg'" in report["badreg"]["error"]
    for name in ("typo", "unmarked", "raising", "badreg"):
        assert any(rec.levelname == "ERROR" and f"'{name}'" in rec.getMessage() for rec in caplog.records), name
    # nothing a refused plugin registered is in the registry
    assert not {"typo/", "unmarked/", "raising/"} & set(reg.envs)
    assert "typo_store" not in reg.storages and "badalgo" not in reg.algorithms
    assert set(reg.algorithms) == {"dqn", "ppo", "sac", "crossq"} and reg.envs["gym/"].plugin == "gym_envs"
    # a good plugin overriding a built-in: attributed to it, and the warning names both plugins
    assert reg.storages["files"].plugin == "zz_override" and report["zz_override"]["storages"] == ["files"]
    assert "error" not in report["zz_override"]
    assert any(
        "'files' from plugin zz_override overrides the one from plugin files" in rec.getMessage()
        for rec in caplog.records
    )
    assert reg.storages["influxdb"].plugin == "influxdb"
    # MQTTRL_LOAD_PLUGINS still filters, and a refused plugin alone leaves an empty registry
    reg = registry_from(broken_site, "typo")
    assert [p["name"] for p in reg.plugins] == ["typo"] and not reg.envs and not reg.storages


def test_registrations_are_attributed_to_their_plugin(corridor_site, registry_from):
    """pluggy calls each plugin's hooks; every registration names the plugin it came from."""
    reg = registry_from(corridor_site)
    assert {n: r.plugin for n, r in reg.algorithms.items()} == {
        "dqn": "dqn",
        "ppo": "ppo",
        "sac": "sac",
        "crossq": "sac",
        "corridor_dqn": "corridor",
    }
    assert {n: r.plugin for n, r in reg.envs.items()} == {
        "gym/": "gym_envs",
        "atari/": "atari_envs",
        "minatar/": "minatar_envs",
        "screen": "screen_envs",
        CORRIDOR_ENV: "corridor",
    }
    assert {n: r.plugin for n, r in reg.storages.items()} == {
        "files": "files",
        "influxdb": "influxdb",
        "tensorboard": "tensorboard",
        "wandb": "wandb",
    }
    assert reg.algorithms["corridor_dqn"].description == "DQN, renamed by a third-party plugin"
    report = by_name(reg.plugins)
    assert [p["name"] for p in reg.plugins] == sorted(report)
    assert report["corridor"]["envs"] == [CORRIDOR_ENV] and report["corridor"]["algorithms"] == ["corridor_dqn"]


def test_the_manager_lets_pluggy_call_the_hooks(monkeypatch):
    """Every hook call goes through pluggy's hook callers (no getattr on the module)."""
    import pluggy

    from mqttrl.plugin import manager
    from mqttrl.plugin.hookspecs import HOOKS

    calls: list[tuple[str, tuple]] = []
    real = pluggy.PluginManager.subset_hook_caller

    def spy(self, name, remove_plugins):
        caller = real(self, name, remove_plugins)
        calls.append((name, tuple(sorted(i.plugin_name for i in caller.get_hookimpls()))))
        return caller

    monkeypatch.setattr(pluggy.PluginManager, "subset_hook_caller", spy)
    monkeypatch.setenv("MQTTRL_LOAD_PLUGINS", "dqn,files,gym_envs")
    manager.get_registry.cache_clear()
    try:
        reg = manager.get_registry()
    finally:
        manager.get_registry.cache_clear()
    assert set(reg.algorithms) == {"dqn"} and set(reg.storages) == {"files"} and set(reg.envs) == {"gym/"}
    # one caller per plugin and hook, each holding at most that plugin's implementation
    assert len(calls) == 3 * len(HOOKS)
    assert ("mqttrl_register_algorithms", ("dqn",)) in calls
    assert ("mqttrl_register_storages", ("files",)) in calls
    assert ("mqttrl_register_envs", ("gym_envs",)) in calls
    assert all(len(plugins) <= 1 for _, plugins in calls)


# ---- the hooks, one by one, and the conformance checks ---------------------------------------


def test_hook_register_algorithms_takes_algorithm_info():
    from mqttrl.conformance import check_algorithm
    from mqttrl.plugin.algorithm import AlgorithmInfo
    from mqttrl.plugin.manager import get_registry
    from mqttrl_plugins import dqn, ppo

    for module, name in ((dqn, "dqn"), (ppo, "ppo")):
        got: list = []
        module.mqttrl_register_algorithms(register=got.append)
        assert len(got) == 1 and isinstance(got[0], AlgorithmInfo) and got[0].name == name
        assert get_registry().algorithm(name) == got[0]
    assert check_algorithm  # the round trip itself: test_check_algorithm_passes_for_builtins


def test_hook_register_envs_exact_ids_and_namespaces(corridor_site, registry_from):
    from mqttrl.envs.make import make_env

    reg = registry_from(corridor_site)
    env = make_env("gym/CartPole-v1", {}, reg)  # a namespace: factory(rest_of_id, **kwargs)
    assert env.spec.id == "CartPole-v1"
    env = make_env(CORRIDOR_ENV, {"length": 3}, reg)  # an exact id: factory(**kwargs)
    assert env.length == 3


def test_hook_register_storages_factory_gets_settings(tmp_path):
    from mqttrl.nodes.telemetry import make_storages
    from mqttrl.plugin.storage import Storage

    (st,) = make_storages(["files"], {"files": {"dir": str(tmp_path / "t")}})
    assert isinstance(st, Storage) and st.dir == tmp_path / "t"
    st.close()


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_check_algorithm_passes_for_builtins(name):
    from mqttrl.conformance import run_checks

    results = run_checks(name)
    failed = [r for r in results if not r.ok]
    assert not failed, failed
    steps = [r.name for r in results]
    for step in ("forward[numpy]", "protocol[" + ("async" if name == "dqn" else "sync") + "]", "export_weights"):
        assert step in steps
    for step in ("actor.load_weights", "act", "truncate", "take", "wire", "sample_spec.validate", "new weights"):
        assert step in steps
    assert "state_dict" in steps
    assert ("train_step" if name == "dqn" else "train_round") in steps
    if name == "ppo":
        assert "discard" in steps


def _wrapped_dqn(wrap_actor=None, make_learner=None):
    """The built-in DQN with its actor (or learner factory) replaced, to break one step on purpose."""
    from mqttrl.plugin.manager import get_registry

    dqn = get_registry().algorithm("dqn")
    changes: dict = {"name": "broken_dqn"}
    if wrap_actor:
        changes["make_actor"] = lambda *a, **kw: wrap_actor(dqn.make_actor(*a, **kw))
    if make_learner:
        changes["make_learner"] = make_learner
    return attrs.evolve(dqn, **changes)


class _Delegate:
    def __init__(self, inner):
        self.inner = inner

    def load_weights(self, tensors, info):
        self.inner.load_weights(tensors, info)

    def act(self, obs, greedy=False):
        return self.inner.act(obs, greedy)

    def record(self, *args):
        self.inner.record(*args)

    def truncate(self, env_index, final_obs):
        self.inner.truncate(env_index, final_obs)

    def pending(self):
        return self.inner.pending()

    def take(self):
        return self.inner.take()


def test_check_algorithm_names_the_failing_step():
    from mqttrl.conformance import check_algorithm

    class FloatActions(_Delegate):  # the actor sends actions as float64; the spec says int64
        def take(self):
            arrays = dict(self.inner.take())
            arrays["action"] = arrays["action"].astype(np.float64)
            return arrays

    results = check_algorithm(_wrapped_dqn(wrap_actor=FloatActions))
    assert not results[-1].ok and results[-1].name == "sample_spec.validate", results[-1]
    assert "action is float64, expected int64" in results[-1].detail
    assert all(r.ok for r in results[:-1])  # everything before it passed, nothing after it ran

    class OutOfSpace(_Delegate):  # actions outside Discrete(2)
        def act(self, obs, greedy=False):
            actions, extras = self.inner.act(obs, greedy)
            return actions + 5, extras

    results = check_algorithm(_wrapped_dqn(wrap_actor=OutOfSpace))
    assert (results[-1].name, results[-1].ok) == ("act", False) and "not in the action space" in results[-1].detail

    def sync_learner_for_async(params, obs_space, act_space, device="cpu", seed=0):
        from mqttrl_plugins.ppo import make_learner
        from mqttrl_plugins.ppo.common import PPOParams

        return make_learner(PPOParams(), obs_space, act_space, device, seed)

    results = check_algorithm(_wrapped_dqn(make_learner=sync_learner_for_async))
    assert (results[-1].name, results[-1].ok) == ("protocol[async]", False)
    assert "AsyncLearner" in results[-1].detail


def test_check_algorithm_on_a_tiny_algorithm():
    """The checks ask nothing beyond mqttrl/plugin/algorithm.py: a random-policy 'algorithm' written here passes."""
    from mqttrl.conformance import check_algorithm
    from mqttrl.plugin.algorithm import AlgorithmInfo
    from mqttrl.wire import FieldSpec, SampleSpec

    @attrs.define
    class P:
        seed: int = 0

    class Fwd:
        def __init__(self, n_obs, n_act, seed):
            self.w = np.random.default_rng(seed).normal(size=(n_obs, n_act)).astype(np.float32)

        def load_weights(self, tensors, info):
            self.w = np.array(tensors["w"], np.float32)

        def __call__(self, obs):
            return {"logits": obs.astype(np.float32) @ self.w}

        def close(self):
            pass

    class Act:
        def __init__(self, params, obs_space, act_space, ctx, forward):
            self.forward, self.rows = forward, []

        def load_weights(self, tensors, info):
            self.forward.load_weights(tensors, info)

        def act(self, obs, greedy=False):
            return self.forward(obs)["logits"].argmax(1).astype(np.int64), {}

        def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated):
            self.rows.append((obs.astype(np.float32), actions.astype(np.int64), rewards.astype(np.float32)))

        def truncate(self, env_index, final_obs):
            pass  # one-step rows: no episode is ever open

        def pending(self):
            return sum(len(r[0]) for r in self.rows)

        def take(self):
            rows, self.rows = self.rows, []
            return {k: np.concatenate([r[i] for r in rows]) for i, k in enumerate(("obs", "action", "reward"))}

    class Learn:
        def __init__(self, obs_space, act_space, seed):
            self.w = Fwd(obs_space.shape[0], act_space.n, seed).w
            self.updates, self.seen = 0, 0

        def export_weights(self):
            return {"w": self.w.copy()}, {}

        def state_dict(self, include_replay):
            return {"w": self.w.copy()}, {"updates": self.updates}

        def load_state_dict(self, tensors, meta):
            self.w, self.updates = np.array(tensors["w"]), int(meta["updates"])

        def add(self, batch):
            self.seen += batch.count
            return batch.count

        def train_due(self):
            return self.seen >= 8

        def behind(self):
            return False

        def train_step(self):
            self.w = self.w + 0.01
            self.updates += 1
            self.seen = 0
            return {"loss": 0.5}

    def spec(params, obs_space, act_space):
        return SampleSpec(
            {
                "obs": FieldSpec("float32", obs_space.shape),
                "action": FieldSpec("int64", (), 0, 1),
                "reward": FieldSpec("float32"),
            }
        )

    info = AlgorithmInfo(
        name="tiny",
        description="argmax of a random linear map",
        params=P,
        mode="async",
        sample_spec=spec,
        make_actor=Act,
        make_learner=lambda params, o, a, device="cpu", seed=0: Learn(o, a, seed),
        make_forward=lambda params, o, a, backend, seed=0: Fwd(o.shape[0], a.n, seed),
        backends=("numpy",),
    )
    results = check_algorithm(info)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert [r.name for r in results][-3:] == ["new weights", "act after update", "state_dict"]


def test_check_storage_passes_for_files(tmp_path):
    from mqttrl.conformance import check_storage
    from mqttrl.plugin.manager import get_registry

    results = check_storage(get_registry().storage("files"), {"dir": str(tmp_path)})
    assert [r.name for r in results] == ["create", "protocol", "write[0]", "write[1]", "close"]
    assert all(r.ok for r in results), results
    episode = (tmp_path / "episode.csv").read_text().splitlines()
    assert len(episode) == 3 and episode[0].startswith("time,run,worker,return")
    assert '"w 1,x=y"' in episode[2]
    assert "eval.csv" in {p.name for p in tmp_path.iterdir()} and "worker.csv" in {p.name for p in tmp_path.iterdir()}


def test_check_storage_reports_a_raising_write():
    from mqttrl.conformance import check_storage

    class Fragile:
        def __init__(self, settings):
            pass

        def write(self, points):
            raise ConnectionError("server down")

        def close(self):
            pass

    results = check_storage(Fragile, {})
    assert (results[-1].name, results[-1].ok) == ("write[0]", False) and "ConnectionError" in results[-1].detail

    results = check_storage(lambda settings: object(), {})
    assert (results[-1].name, results[-1].ok) == ("protocol", False)


def test_check_storage_fails_when_close_leaves_points_pending():
    from mqttrl.conformance import check_storage

    class Buffering:
        """Holds every point, as a database client whose server never answers would."""

        def __init__(self, settings):
            self.held = []
            self.flush = settings.get("flush") == "yes"

        @property
        def pending(self):
            return len(self.held)

        def write(self, points):
            self.held += points

        def close(self):
            if self.flush:
                self.held.clear()

    results = check_storage(Buffering, {})
    assert (results[-1].name, results[-1].ok) == ("close", False) and "4 points still pending" in results[-1].detail
    assert all(r.ok for r in check_storage(Buffering, {"flush": "yes"}))


def test_check_plugin_cli_passes_storage_options_and_refuses_malformed_ones(tmp_path, capsys):
    from mqttrl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["check-plugin", "files", "--opt", "no-equals-sign"])
    assert e.value.code == 2 and "expected KEY=VALUE" in capsys.readouterr().err
    main(["check-plugin", "files", "--opt", f"dir={tmp_path}", "--opt", "plot_every_s=0"])
    assert "ok    close" in capsys.readouterr().out
    assert {"episode.csv", "worker.csv"} <= {p.name for p in tmp_path.iterdir()}, "it wrote where --opt dir= said"


def test_run_checks_by_plugin_name_and_unknown_names(broken_site, registry_from, monkeypatch, tmp_path):
    from mqttrl.conformance import run_checks
    from mqttrl.plugin.manager import UnknownPluginError

    registry_from(broken_site, "typo,gym_envs,files")
    (load,) = run_checks("typo")
    assert (load.name, load.ok) == ("load", False) and "mqttrl_register_storage" in load.detail
    results = run_checks("gym_envs")
    assert [r.name for r in results] == ["load", "env gym/"] and all(r.ok for r in results)
    monkeypatch.chdir(tmp_path)
    results = run_checks("files")  # a storage name: built in a temporary directory, not here
    assert all(r.ok for r in results) and not list(tmp_path.iterdir())
    with pytest.raises(UnknownPluginError, match="nothere"):
        run_checks("nothere")
