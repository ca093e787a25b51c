"""The run's env spec (issue 34): made once where the game is, read by every node that never needs
the game, and a worker whose game differs refused in one line.

The node tests run real console scripts against a real mosquitto; the "learner host" processes get
an environment without the game: no ``DISPLAY`` and the screen extra's modules unimportable (a
``sitecustomize`` that blocks them), or a game module that is only on the worker's ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import paho.mqtt.client as mqtt
import pytest
from helpers.run_files import learner_updates, wait_for

from benchmarks.harness import learner_host
from mqttrl.config import ConfigError, from_dict
from mqttrl.envs.spec import EnvSpec, SpecError, SpecMismatch, check_env_against, spec_of, spec_of_config, with_spec

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
CARTPOLE = str(ROOT / "configs" / "cartpole_dqn.toml")


def cartpole_spec(made_by: str = "test") -> EnvSpec:
    env = gym.make("CartPole-v1")
    try:
        return spec_of(env, "CartPole-v1", made_by)
    finally:
        env.close()


# ---- the record -------------------------------------------------------------------------------------
def test_a_spec_round_trips_through_json_and_the_config():
    spec = cartpole_spec()
    back = EnvSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back.differences(spec) == [] and back.made_by == "test"
    assert np.array_equal(back.observation_space.high, spec.observation_space.high)  # inf bounds included
    config = with_spec(from_dict({}), spec)
    assert spec_of_config(from_dict(config.to_dict())).differences(spec) == []
    assert spec_of_config(from_dict({})) is None


def test_differences_name_the_first_difference_of_each_space():
    spec = cartpole_spec()
    other = EnvSpec(gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Discrete(3), "Other-v0")
    assert spec.differences(other) == [
        "observation shape (4,) here, (5,) in the run's spec",
        "action n 2 here, 3 in the run's spec",
    ]
    pixels = EnvSpec(gym.spaces.Box(0, 255, (2, 32, 32), np.uint8), gym.spaces.Discrete(3), "screen")
    wider = EnvSpec(gym.spaces.Box(0, 255, (2, 32, 32), np.float32), gym.spaces.Discrete(3), "screen")
    assert pixels.differences(wider) == ["observation dtype 'uint8' here, 'float32' in the run's spec"]
    with pytest.raises(SpecMismatch, match=r"does not match the run's env spec \(made by trainer@h\)"):
        check_env_against(spec, EnvSpec(*other.spaces, "Other-v0", "trainer@h"))


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"observation": {"type": "Box"}}, "env.spec: action missing"),
        ({"observation": {"type": "Tuple"}, "action": {"type": "Discrete", "n": 2}}, "unknown space type 'Tuple'"),
        ({"version": 99, "observation": {}, "action": {}}, "version 99 is newer than this mqttrl reads"),
    ],
)
def test_a_bad_spec_in_a_config_is_one_line(spec, says):
    with pytest.raises(ConfigError, match=says):
        from_dict({"env": {"spec": spec}})
    assert issubclass(SpecError, ConfigError)


def test_env_spec_prints_toml_that_the_config_reads_back(tmp_path):
    out = subprocess.run([str(BIN / "mqttrl"), "env-spec", CARTPOLE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    config = tmp_path / "c.toml"
    config.write_text(Path(CARTPOLE).read_text() + "\n" + out.stdout)
    from mqttrl.cli.common import load

    declared = spec_of_config(load(str(config), []))
    assert declared is not None and declared.differences(cartpole_spec()) == []


def test_load_policy_reads_the_spec_and_never_makes_the_env(tmp_path):
    """A run whose env cannot be made here (its module is not installed) still loads: the spec is enough."""
    from helpers.policy_runs import make_run

    from mqttrl import load_policy
    from mqttrl.state.run_dir import write_resolved

    run = make_run(tmp_path / "run", "dqn", "CartPole-v1", hidden=[16, 16])
    config = with_spec(run.config, cartpole_spec())
    config = from_dict({**config.to_dict(), "env": {**config.to_dict()["env"], "id": "not_installed_here:Game-v0"}})
    write_resolved(config, run.root / "config.json")
    policy = load_policy(run.root / "exported" / "weights.safetensors")  # its config: the run's config.json
    assert policy.config.env.id == "not_installed_here:Game-v0"
    assert policy.observation_space.shape == (4,) and policy.action_space.n == 2


# ---- the nodes --------------------------------------------------------------------------------------
def publish_retained(url: str, topic: str, payload: bytes) -> None:
    host, port = url.removeprefix("mqtt://").split(":")
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.connect(host, int(port))
    client.loop_start()
    client.publish(topic, payload, qos=1, retain=True).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def test_a_worker_whose_env_differs_from_the_runs_spec_is_refused_in_one_line(mosquitto, tmp_path):
    """The run's spec (as a learner publishes it in the retained config) says 5 observations; this
    worker's CartPole gives 4: one line naming the difference, exit 2, before it plays."""
    wrong = EnvSpec(gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Discrete(2), "CartPole-v1", "trainer@gpu")
    config = with_spec(from_dict({"run": "spec-mismatch"}), wrong)
    publish_retained(mosquitto.url, "mqttrl/spec-mismatch/config", json.dumps(config.to_dict()).encode())
    argv = [str(BIN / "mqttrl-worker"), "--run", "spec-mismatch", "--broker", mosquitto.url, "--wait-timeout", "30"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr
    assert "does not match the run's env spec (made by trainer@gpu)" in last
    assert "observation shape (4,) here, (5,) in the run's spec" in last


def node_env(**extra: str) -> dict:
    return learner_host.node_env(MQTTRL_TRACEBACK="1", **extra)


class Procs:
    """Console scripts started for one test, each with its log; all stopped (SIGTERM, then kill) at the end."""

    def __init__(self, tmp_path: Path):
        self.tmp_path, self.procs, self.logs = tmp_path, [], {}

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        log = self.tmp_path / f"{name}.log"
        self.logs[name] = log
        proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=self.tmp_path)
        self.procs.append(proc)
        return proc

    def text(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def wait_line(self, name: str, line: str, timeout: float) -> None:
        """Until ``name``'s log holds ``line`` (a failure if it exits first or the time is up)."""
        proc = self.procs[list(self.logs).index(name)]
        wait_for(f"{name}'s line {line!r}", lambda: line in self.text(name), timeout, self.logs.values(), [proc])

    def stop(self) -> list[int | None]:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(60))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
        return codes


#: CartPole as a game package only the game PC has; each env writes its resets and first steps
#: (time.monotonic()) to $MYGAME_STAMPS
STAMPED_CARTPOLE = """
import os, time
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

class StampedCartPole(CartPoleEnv):
    steps = 0

    def _stamp(self, what):
        with open(os.environ["MYGAME_STAMPS"], "a") as f:
            f.write(f"{id(self)} {what} {time.monotonic()}\\n")

    def reset(self, **kwargs):
        self._stamp("reset")
        return super().reset(**kwargs)

    def step(self, action):
        self.steps += 1
        if self.steps <= 2:
            self._stamp("step")
        return super().step(action)

gym.register("MyCartPole-v0", entry_point=StampedCartPole, max_episode_steps=200)
"""


@pytest.mark.e2e
def test_a_learner_without_the_games_module_waits_for_a_workers_spec_and_trains(mosquitto, tmp_path):
    """The learner host has no copy of the game's package (``mygame`` is on the worker's PYTHONPATH
    only): the learner says so once, waits, takes the first worker's spec and trains. The worker
    made its envs before the learner had a model: once the first model is in, each env is reset
    again, so that the first episode is played by the model from a fresh observation, not from one
    that waited (a real game runs on meanwhile)."""
    game = tmp_path / "game"
    game.mkdir()
    stamps = tmp_path / "stamps.txt"
    (game / "mygame.py").write_text(STAMPED_CARTPOLE)
    sets = ["--set", 'env.id="mygame:MyCartPole-v0"', "--set", "algorithm.learning_starts=100"]
    procs = Procs(tmp_path)
    run_dir = tmp_path / "learner-run"
    learner = procs.start(
        "learner",
        [
            str(BIN / "mqttrl-learner"),
            "--config",
            CARTPOLE,
            *sets,
            "--broker",
            mosquitto.url,
            "--run-dir",
            str(run_dir),
        ],
        node_env(),
    )
    try:
        procs.wait_line("learner", "cannot be made on this host", 60)
        assert "No module named 'mygame'" in procs.text("learner")
        worker = procs.start(
            "worker",
            [str(BIN / "mqttrl-worker"), "--run", "cartpole-dqn", "--broker", mosquitto.url, "--name", "gamepc"],
            node_env(
                PYTHONPATH=os.pathsep.join(filter(None, [str(game), os.environ.get("PYTHONPATH", "")])),
                MYGAME_STAMPS=str(stamps),
            ),
        )
        logs = tuple(procs.logs.values())
        wait_for("learner updates", lambda: learner_updates(run_dir) > 0, 120, logs, [learner, worker])
    finally:
        codes = procs.stop()
    assert codes[0] == 0, procs.text("learner")
    spec = json.loads((run_dir / "config.json").read_text())["env"]["spec"]
    assert spec["made_by"].startswith("worker gamepc@") and spec["observation"]["shape"] == [4]
    first: dict[str, list] = {}  # per env: its resets before its first step, and that step's time
    for line in stamps.read_text().split("\n"):
        if line:
            env, what, at = line.split()
            resets, stepped = first.setdefault(env, [[], None])
            if what == "reset" and stepped is None:
                resets.append(float(at))
            elif what == "step" and stepped is None:
                first[env][1] = float(at)
    played = {env: v for env, v in first.items() if v[1] is not None}
    assert len(played) == 4, first  # the config's 4 envs
    for resets, stepped in played.values():
        assert len(resets) == 2 and stepped - resets[-1] < 1.0, (resets, stepped)


@pytest.mark.e2e
@pytest.mark.slow
def test_screen_catch_learner_and_inference_server_run_without_a_display(mosquitto, tmp_path):
    """configs/screen_catch_dqn.toml's learner and an inference server on a "GPU box": no DISPLAY, the
    screen extra's modules unimportable. Both start, wait for the spec, and serve and train once a
    worker on another display (Xvfb, Catch in its window) joins; the worker acts through the server."""
    from benchmarks.harness.xvfb import Game, Xvfb

    x = Xvfb(tmp_path)
    game = Game(x.display, tmp_path, "catch-spec", "--lives", "1", "--ball-speed", "300", "--seed", "2")
    headless = learner_host.headless_env(tmp_path, MQTTRL_TRACEBACK="1")
    config = str(ROOT / "configs" / "screen_catch_dqn.toml")
    sets = [
        "--set",
        'env.kwargs.window="catch-spec"',
        "--set",
        "env.kwargs.step_s=0.03",
        "--set",
        "algorithm.learning_starts=40",
        "--set",
        "algorithm.batch_size=16",
        "--set",
        "algorithm.buffer_size=2000",
        "--set",
        "algorithm.replay_ratio=1.0",
        "--set",
        'worker.inference="remote"',
        "--set",
        "worker.batch_size=16",
        "--set",
        "learner.publish_every=5",
        "--set",
        "learner.metrics_interval_s=0.5",
    ]
    procs = Procs(tmp_path)
    run_dir = tmp_path / "learner-run"
    try:
        game.wait_window()
        learner = procs.start(
            "learner",
            [
                str(BIN / "mqttrl-learner"),
                "--config",
                config,
                *sets,
                "--broker",
                mosquitto.url,
                "--run-dir",
                str(run_dir),
            ],
            headless,
        )
        server = procs.start(
            "inference",
            [str(BIN / "mqttrl"), "inference", "--run", "screen-catch", "--broker", mosquitto.url, "--name", "gpu0"],
            headless,
        )
        procs.wait_line("learner", "cannot be made on this host", 60)
        procs.wait_line("inference", "waiting for the run's env spec", 60)
        worker = procs.start(
            "worker",
            [str(BIN / "mqttrl-worker"), "--run", "screen-catch", "--broker", mosquitto.url, "--name", "gamepc1"],
            node_env(DISPLAY=x.display, SDL_AUDIODRIVER="dummy"),
        )
        logs = tuple(procs.logs.values())
        wait_for("learner updates", lambda: learner_updates(run_dir) > 0, 180, logs, [learner, server, worker])
    finally:
        codes = procs.stop()
        game.stop()
        x.stop()
    assert codes[0] == 0 and codes[1] == 0, (procs.text("learner")[-2000:], procs.text("inference")[-2000:])
    assert "inference server gpu0: " in procs.text("inference")  # the forward was built from the spec
    assert "(inference: remote)" in procs.text("worker")
    spec = json.loads((run_dir / "config.json").read_text())["env"]["spec"]
    assert spec["observation"]["shape"] == [2, 32, 32] and spec["made_by"].startswith("worker gamepc1@")
