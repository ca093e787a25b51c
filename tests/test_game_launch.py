"""The worker launches its game and launches it again when it exits, crashes or hangs (issue 34).

A real game process (tests/helpers/tick_game.py: it ticks a counter into a file; its env raises when
the game is gone or has not ticked for ``hang_s``) is started by :class:`GameProcess`; the env set
the worker uses remakes a failed env through the launcher. Killed (SIGKILL), hung (SIGSTOP) and
quitting at "game over" games are each back within a stated time. The end-to-end test runs a real
learner and a real worker with ``[env] launch`` against mosquitto.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.launch_kit import TESTS, tick_settings

from mqttrl.config.settings import ConfigError
from mqttrl.envs.launch import GameKeepsFailing, GameProcess, LaunchSettings, StopWhileLaunching
from mqttrl.envs.rollout import EnvSet

BIN = Path(sys.executable).parent
#: a killed or hung game is playing again within this long (hang_s 1 s + start + first tick, with
#: room for a busy 2-core CI machine)
BACK_WITHIN_S = 8.0


def game_pid(state: Path) -> int:
    return int(state.read_text().split()[0])


@pytest.fixture
def launched(tmp_path):
    """An env set over the tick game as a worker builds it: made through the launcher, remade (and
    the game relaunched) when a step raises."""
    from helpers.tick_game import TickEnv

    state = tmp_path / "state"
    game = GameProcess(tick_settings(state, ready_s=30.0))
    envs = EnvSet(
        lambda: game.make_env(lambda: TickEnv(str(state), hang_s=1.0)),
        1,
        0,
        env_id="tick",
        on_restart=lambda i, e: game.relaunch(f"env {i} failed: {e}"),
    )
    yield state, game, envs
    envs.close()
    game.close()


def step_until_restarted(envs: EnvSet, before: int, limit_s: float) -> float:
    """Step until the env set has remade its env; the seconds that took."""
    started = time.monotonic()
    while envs.env_restarts == before:
        envs.step(np.array([0]))
        assert time.monotonic() - started < limit_s, "the failed game was not relaunched in time"
    return time.monotonic() - started


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_killed_or_hung_game_is_relaunched_and_play_goes_on(launched, fault):
    state, game, envs = launched
    for _ in range(20):
        envs.step(np.array([1]))
    first = game_pid(state)
    os.kill(first, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    took = step_until_restarted(envs, 0, BACK_WITHIN_S)
    for _ in range(20):  # playing again, on a new game
        envs.step(np.array([1]))
    assert game.relaunches == 1 and game.launches == 2 and game_pid(state) != first
    assert took < BACK_WITHIN_S
    if fault == "hung":  # the stopped game was killed, not left behind
        with pytest.raises(ProcessLookupError):
            for _ in range(50):
                os.kill(first, 0)
                time.sleep(0.1)


def test_a_game_that_quits_at_game_over_is_started_again(tmp_path):
    from helpers.tick_game import TickEnv

    state = tmp_path / "state"
    game = GameProcess(tick_settings(state, "--exit-after", "60", ready_s=30.0))
    envs = EnvSet(
        lambda: game.make_env(lambda: TickEnv(str(state), hang_s=1.0)),
        1,
        0,
        on_restart=lambda i, e: game.relaunch(str(e)),
    )
    try:
        deadline = time.monotonic() + 30
        while game.relaunches < 2:
            envs.step(np.array([0]))
            assert time.monotonic() < deadline, (game.launches, game.relaunches)
    finally:
        envs.close()
        game.close()
    assert envs.env_restarts >= 2


def test_starts_are_bounded_per_hour(tmp_path):
    """A game that dies at once is started at most launch_max_per_hour times, then given up in one line."""
    game = GameProcess(
        LaunchSettings((sys.executable, "-c", "pass"), ready_s=5.0, max_per_hour=3), sleep=lambda s: None
    )

    def never_ready():
        raise RuntimeError("no window")

    with pytest.raises(GameKeepsFailing, match=r"started 3 times in the last hour \(env.launch_max_per_hour = 3;"):
        game.make_env(never_ready)
    assert game.launches == 3
    game.close()


def test_a_game_that_never_comes_up_is_one_line(tmp_path):
    game = GameProcess(LaunchSettings((sys.executable, "-c", "import time; time.sleep(30)"), ready_s=1.0))

    def never_ready():
        raise RuntimeError("no window titled 'x'")

    try:
        with pytest.raises(GameKeepsFailing, match=r"did not come up within env.launch_ready_s = 1 s.*no window"):
            game.make_env(never_ready)
    finally:
        game.close()
    assert not game.running()


def test_a_stop_while_the_game_comes_up_ends_the_wait_at_once():
    """A worker asked to stop (Ctrl-C, its supervisor) while its game comes up stops at once, not
    after launch_ready_s: its stop event is the launcher's sleep and ``stopping``."""
    import threading

    stop = threading.Event()
    game = GameProcess(
        LaunchSettings((sys.executable, "-c", "import time; time.sleep(30)"), ready_s=60.0),
        sleep=stop.wait,
        stopping=stop.is_set,
    )

    def not_yet():
        threading.Timer(0.3, stop.set).start()  # the stop comes while the game is still coming up
        raise RuntimeError("no window titled 'x'")

    started = time.monotonic()
    try:
        with pytest.raises(StopWhileLaunching):
            game.make_env(not_yet)
    finally:
        game.close()
    assert time.monotonic() - started < 5.0 and not game.running()


def test_launch_mistakes_are_one_line(tmp_path):
    from mqttrl.config import from_dict

    with pytest.raises(ConfigError, match="env.launch='python game.py': expected a list"):
        from_dict({"env": {"launch": "python game.py"}})
    with pytest.raises(ConfigError, match="set env.num_envs = 1 and start a worker per game"):
        LaunchSettings.of(from_dict({"env": {"launch": ["game"], "num_envs": 4}}).env)
    game = GameProcess(LaunchSettings(("/no/such/game",)))
    with pytest.raises(ConfigError, match="env.launch '/no/such/game' cannot start"):
        game.start()


@pytest.mark.e2e
def test_a_worker_launches_its_game_and_relaunches_it_when_killed(mosquitto, tmp_path):
    """A real learner and worker: the worker starts the game itself (``[env] launch``), a SIGKILL of
    the game is followed by one "relaunching the game" line, and the worker plays on (its heartbeat
    counts the relaunch); the worker's stop stops the game too."""
    state = tmp_path / "state"
    pythonpath = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH", "")]))
    config = tmp_path / "tick.toml"
    config.write_text(
        'run = "tick-launch"\n'
        "[env]\n"
        'id = "helpers.tick_game:Tick-v0"\n'
        "num_envs = 1\n"
        f"launch = {json.dumps([sys.executable, '-m', 'helpers.tick_game', str(state)])}\n"
        "launch_ready_s = 30.0\n"
        f'kwargs = {{ state = "{state}" }}\n'
        "[algorithm]\n"
        'name = "dqn"\n'
        "hidden = [16, 16]\n"
        "learning_starts = 50\n"
        "[worker]\n"
        "batch_size = 16\n"
        "heartbeat_interval_s = 0.5\n"
    )
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    # the learner has no game: env.launch tells it to wait for the worker's spec
    learner_log, worker_log = open(tmp_path / "learner.log", "wb"), open(tmp_path / "worker.log", "wb")
    run_dir = tmp_path / "run"
    learner = subprocess.Popen(
        [str(BIN / "mqttrl-learner"), "--config", str(config), "--broker", mosquitto.url, "--run-dir", str(run_dir)],
        stdout=learner_log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    worker = subprocess.Popen(
        [str(BIN / "mqttrl-worker"), "--run", "tick-launch", "--broker", mosquitto.url, "--name", "pc1"],
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    text = lambda: (tmp_path / "worker.log").read_text(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 90
        while "stepping 1 envs" not in text():
            assert worker.poll() is None and learner.poll() is None and time.monotonic() < deadline, text()
            time.sleep(0.2)
        first = game_pid(state)
        os.kill(first, signal.SIGKILL)
        killed_at = time.monotonic()
        while "relaunching the game" not in text() or game_pid(state) == first:
            assert time.monotonic() - killed_at < BACK_WITHIN_S, text()
            time.sleep(0.1)
        time.sleep(1.5)  # it plays on, and a heartbeat or two go out
        assert worker.poll() is None, text()
    finally:
        for p in (worker, learner):
            p.terminate()
        codes = [p.wait(60) for p in (worker, learner)]
        learner_log.close()
        worker_log.close()
    assert codes == [0, 0], text()
    assert text().count("relaunching the game") == 1 and "started the game (pid" in text()
    with pytest.raises(ProcessLookupError):  # the worker's stop stopped its game
        for _ in range(50):
            os.kill(game_pid(state), 0)
            time.sleep(0.1)
    learner_text = (tmp_path / "learner.log").read_text()
    assert "its workers launch the game (env.launch)" in learner_text


def test_telemetry_counts_each_workers_game_relaunches_for_the_summary(mosquitto):
    """The worker's heartbeat carries ``game`` (launches, relaunches); telemetry's view, which
    summary.json reads, keeps the relaunches per worker that launched its game."""
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.wire import encode_json

    node = TelemetryNode(BrokerSettings(url=mosquitto.url), "r", [], TelemetrySettings())
    beat = {"env_steps": 10, "model_version": 1}
    node.on_heartbeat("pc1", encode_json({**beat, "game": {"launches": 3, "relaunches": 2}}))
    node.on_heartbeat("pc2", encode_json(beat))  # its game is started by hand
    node.on_heartbeat("pc3", encode_json({**beat, "game": {"launches": "x", "relaunches": -1}}))  # nonsense: 0
    assert node.view().game_relaunches == {"pc1": 2}


def test_check_plugin_checks_the_runs_env_as_the_run_makes_it(tmp_path, capsys):
    """``mqttrl check-plugin --config``: the game launched first ([env] launch), made with the run's
    kwargs, stepped, and held against the config's env.spec (a wrong one fails, exit 1)."""
    from mqttrl import cli

    state = tmp_path / "state"
    settings = tick_settings(state, ready_s=30.0)
    config = tmp_path / "tick.toml"
    base = (
        'run = "tick-check"\n[env]\nid = "helpers.tick_game:Tick-v0"\nnum_envs = 1\n'
        f"launch = {json.dumps(list(settings.command))}\n"
        f"launch_env = {{ PYTHONPATH = {json.dumps(settings.env['PYTHONPATH'])} }}\n"
        f'kwargs = {{ state = "{state}" }}\n'
    )
    config.write_text(base)
    sys.path.insert(0, str(TESTS))  # the env's module, as the worker's PYTHONPATH would have it
    try:
        cli.main(["check-plugin", "--config", str(config)])  # returns: every check passed
        assert "ok    env helpers.tick_game:Tick-v0 (the run's [env])" in capsys.readouterr().out
        wrong = '[env.spec]\nobservation = {type = "Box", shape = [3], dtype = "float32", low = 0, high = 1}\n'
        config.write_text(base + wrong + 'action = {type = "Discrete", n = 2}\n')
        with pytest.raises(SystemExit) as e:
            cli.main(["check-plugin", "--config", str(config)])
        assert e.value.code == 1
        assert "FAIL  env spec: observation shape (1,) here, (3,) in the run's spec" in capsys.readouterr().out
    finally:
        sys.path.remove(str(TESTS))
    assert not state.exists() or not _alive_pid(game_pid(state))  # the check stopped the game it started


def _alive_pid(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


# ---- a real game in a real window ---------------------------------------------------------------
@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_killed_or_hung_catch_window_is_relaunched_by_the_worker_s_env_set(fault, tmp_path):
    """Catch under Xvfb, started by the launcher as a worker starts it: SIGKILL (its window closes)
    or SIGSTOP (its frames stop changing: ``frozen_s``) is noticed by the screen env, and the game is
    stopped and started again; playing on the new window within the stated time."""
    from benchmarks.harness.xvfb import Xvfb
    from mqttrl_plugins.screen import make_screen_env

    x = Xvfb(tmp_path)
    title = f"catch relaunch {fault}"
    game_argv = [sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", title]
    settings = LaunchSettings(
        (*game_argv, "--lives", "3", "--ball-speed", "150"),
        env={"DISPLAY": x.display, "SDL_VIDEODRIVER": "x11", "SDL_AUDIODRIVER": "dummy"},
        ready_s=60.0,
    )
    game = GameProcess(settings)
    kwargs = {
        "window": title,
        "window_exact": True,
        "display": x.display,
        "keys": [[], ["Left"], ["Right"]],
        "reward": "mqttrl_plugins.screen.demo_game:CatchScore",
        "reset_keys": ["Return"],
        "size": 16,
        "step_s": 0.02,
        "frozen_s": 1.5,
    }
    envs = EnvSet(
        lambda: game.make_env(lambda: make_screen_env(**kwargs)),
        1,
        0,
        env_id="screen",
        on_restart=lambda i, e: game.relaunch(f"env {i} failed: {e}"),
    )
    try:
        for _ in range(10):
            envs.step(np.array([1]))
        first = game.proc.pid
        os.kill(first, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        took = step_until_restarted(envs, 0, 30.0)
        for _ in range(10):  # playing again on the new window
            envs.step(np.array([2]))
        assert game.relaunches == 1 and game.proc.pid != first and envs.failed == []
    finally:
        envs.close()
        game.close()
        x.stop()
    # the stated times (2 cores): a killed game's window is gone at the next step, then the game
    # starts again and its window comes up (~1-3 s); a hung one is noticed after frozen_s (1.5 s)
    print(f"{fault}: playing again after {took:.2f} s")
    assert took < (15.0 if fault == "killed" else 20.0), took
