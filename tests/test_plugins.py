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

import numpy as np
import pytest
from conftest import Proc, node_env, script

CORRIDOR_DIST = "mqttrl-corridor"
CORRIDOR_VERSION = "0.3.1"
CORRIDOR_ENV = "corridor/Corridor-v0"

CORRIDOR_MODULE = '''
"""A third-party mqttrl plugin: a corridor env and a renamed copy of DQN."""

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin.spec import hookimpl

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
    root = tmp_path_factory.mktemp("corridor")
    pkg = root / "src"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(CORRIDOR_PYPROJECT)
    (pkg / "mqttrl_corridor.py").write_text(textwrap.dedent(CORRIDOR_MODULE))
    site = root / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(site),
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}"
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
    assert plugins_json(MQTTRL_LOAD_PLUGINS=" gym_envs , nonexistent,") == report
    assert plugins_json(MQTTRL_LOAD_PLUGINS="") == []


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
            # updates are fast here: accept samples however many versions behind
            max_staleness = 100000
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
