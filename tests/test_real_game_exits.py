"""What a real, unchanged game breaks (issue 47 part 4): a game that exits at game over is an
episode's end, not a crash; a real-time game is never held by the learner's update debt; a reset
that relaunches its game is not cut by ``obs_timeout_s``; a restarted worker's counts go on.

The tick game (tests/helpers/tick_game.py) is a real process: ``--exit-after N`` quits with status 0,
and its env's ``over_at`` is its game over a little before (the screen kit's game over, then the
window gone).
"""

from __future__ import annotations

import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from helpers.launch_kit import tick_settings

from mqttrl.envs.launch import GameKeepsFailing, GameProcess, LaunchSettings
from mqttrl.envs.launched import LaunchedEnv
from mqttrl.envs.rollout import EnvSet

SLEEPER = (sys.executable, "-c", "import time; time.sleep(30)")


def test_new_games_after_a_game_over_are_not_held_to_the_hourly_bound():
    """Only crashes count against launch_max_per_hour: a game that ends 6 times a minute by
    exiting is not a game that cannot run."""
    game = GameProcess(LaunchSettings(SLEEPER, max_per_hour=2))
    try:
        game.start()
        for _ in range(4):
            game.relaunch("game over", crash=False)
        game.relaunch("it crashed")  # the second counted start
        assert (game.launches, game.relaunches, game.crashes) == (6, 5, 1)
        with pytest.raises(GameKeepsFailing, match="crashed and was started 2 times"):
            game.relaunch("it crashed again")
    finally:
        game.close()


def launched_tick(tmp_path, exit_after: int, over_at: int, max_per_hour: int = 1, each_episode: bool = False):
    """The tick game launched with an env set over it. A game lives ``exit_after`` ticks of 10 ms:
    keep it well past the launcher's 0.5 s poll for the game to come up (READY_POLL_S) and a busy
    machine's start-up, or it has exited before its first reset (a crash, not a game over)."""
    from helpers.tick_game import TickEnv

    state = tmp_path / "state"
    extra = ("--exit-after", str(exit_after)) if exit_after else ()
    settings = tick_settings(state, *extra, ready_s=30.0, max_per_hour=max_per_hour, each_episode=each_episode)
    game = GameProcess(settings)
    envs = EnvSet(
        lambda: LaunchedEnv(game, lambda: TickEnv(str(state), hang_s=1.0, episode_steps=10_000, over_at=over_at)),
        1,
        0,
        on_restart=lambda i, e: game.relaunch(f"env {i} failed: {e}"),
    )
    return game, envs


def test_a_game_that_exits_at_game_over_plays_game_after_game(tmp_path, caplog):
    """Game over at tick 150, exit (status 0) at tick 170: each game is an episode, the next starts on
    a new game (one info line each, no warning), no crash is counted, and a budget of one start an
    hour is never reached."""
    game, envs = launched_tick(tmp_path, exit_after=170, over_at=150)
    ended = []
    try:
        deadline = time.monotonic() + 40
        with caplog.at_level("INFO", logger="mqttrl.envs"):
            while len(ended) < 4:
                ended += envs.step(np.array([0]))[5]
                assert time.monotonic() < deadline, (game.launches, game.relaunches)
    finally:
        envs.close()
        game.close()
    assert all(e.terminated for e in ended)
    assert envs.env_restarts == 0 and game.crashes == 0 and game.relaunches >= 3
    assert game.relaunch_s > 0
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [], [r.getMessage() for r in warnings]
    assert sum("a new game: the game" in r.getMessage() for r in caplog.records) == game.relaunches


def test_a_game_that_exits_mid_episode_is_a_crash(tmp_path):
    """Exit status 0 without the episode's end: a crash (the env set's restart path, counted)."""
    game, envs = launched_tick(tmp_path, exit_after=150, over_at=0, max_per_hour=5)
    try:
        deadline = time.monotonic() + 20
        while envs.env_restarts == 0:
            envs.step(np.array([0]))
            assert time.monotonic() < deadline
    finally:
        envs.close()
        game.close()
    assert game.crashes == 1 and game.relaunches == 1


def test_a_game_that_stays_over_plays_a_new_game_each_episode_with_launch_each_episode(tmp_path, caplog):
    """A game that never exits and stays over from tick 150 (freegames' Pacman freezes at game over):
    with ``launch_each_episode`` every episode is a new game, none a crash, within a budget of one
    start an hour."""
    game, envs = launched_tick(tmp_path, exit_after=0, over_at=150, each_episode=True)
    ended = []
    try:
        deadline = time.monotonic() + 40
        with caplog.at_level("INFO", logger="mqttrl.envs"):
            while len(ended) < 3:
                ended += envs.step(np.array([0]))[5]
                assert time.monotonic() < deadline, (game.launches, game.relaunches)
    finally:
        envs.close()
        game.close()
    assert all(e.terminated for e in ended) and envs.env_restarts == 0
    assert game.crashes == 0 and game.relaunches >= 2
    assert sum("env.launch_each_episode" in r.getMessage() for r in caplog.records) == game.relaunches


def test_without_it_a_game_that_stays_over_is_a_crash_with_a_hint(tmp_path, caplog):
    """The same game without the setting: its reset fails while it still runs; a crash (counted),
    and one line that names the setting."""
    game, envs = launched_tick(tmp_path, exit_after=0, over_at=150, max_per_hour=5)
    try:
        deadline = time.monotonic() + 40
        with caplog.at_level("INFO", logger="mqttrl.envs"):
            while envs.env_restarts == 0:
                envs.step(np.array([0]))
                assert time.monotonic() < deadline
    finally:
        envs.close()
        game.close()
    assert game.crashes == 1
    assert sum("set env.launch_each_episode = true" in r.getMessage() for r in caplog.records) == 1


class SlowResetGame(gym.Env):
    """A real-time game whose reset takes 0.4 s (its game coming up) and says it may take 2 s."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    reset_wait_s = 2.0

    def send_action(self, action):
        pass

    def read_obs(self):
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def reset(self, *, seed=None, options=None):
        time.sleep(0.4)
        return np.zeros(1, np.float32), {}


def test_a_reset_that_waits_for_its_game_is_not_cut_by_obs_timeout_s():
    from mqttrl.envs.realtime import RealTimeEnv
    from mqttrl.envs.realtime_clock import ControlClock
    from mqttrl.envs.realtime_guard import GameHung

    env = RealTimeEnv(SlowResetGame(), ControlClock(hz=20.0), obs_timeout_s=0.1)
    env.reset()  # 0.4 s: within obs_timeout_s + the game's reset_wait_s
    assert env.deadline.timeout_s == 0.1  # a read is held to obs_timeout_s as before
    SlowResetGame.reset_wait_s = 0.0
    try:
        with pytest.raises(GameHung):
            env.reset()
    finally:
        SlowResetGame.reset_wait_s = 2.0
        env.close()


def test_a_restarted_worker_s_counts_go_on_in_the_summary(mosquitto):
    """A worker that ended and was started again counts from 0: telemetry adds its earlier
    process's counts (relaunches, crashes, relaunch time, env steps) instead of starting over."""
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.wire import encode_json

    steps = []
    node = TelemetryNode(BrokerSettings(url=mosquitto.url), "r", [], TelemetrySettings())
    node.on_env_steps = lambda name, n: steps.append(n)
    game = {"launches": 21, "relaunches": 20, "crashes": 2, "relaunch_s": 40.0}
    node.on_heartbeat("pc1", encode_json({"incarnation": "a", "env_steps": 900, "model_version": 1, "game": game}))
    game = {"launches": 10, "relaunches": 9, "crashes": 0, "relaunch_s": 18.5}
    node.on_heartbeat("pc1", encode_json({"incarnation": "b", "env_steps": 50, "model_version": 1, "game": game}))
    view = node.view()
    assert view.game_relaunches == {"pc1": 29} and view.game_crashes == {"pc1": 2}
    assert view.game_relaunch_s == {"pc1": 58.5}
    assert steps == [900, 950]  # the console's steps go on, not frozen at 900 until 900 more


class _Shell:
    name = "w0"

    class core:
        awaiting_model = False

    def idle_now(self):
        return "learner_paused"


class _Envs:
    def __init__(self, pausable):
        self.pausable = pausable


@pytest.mark.parametrize("pausable", [False, True])
def test_a_real_time_game_that_cannot_pause_is_not_held_by_update_debt(pausable, caplog):
    """The learner's flow control (its update debt at learning_starts) pauses a game that can
    pause; one that cannot plays on and its steps are recorded (said once), not played unrecorded."""
    from mqttrl.nodes.worker.loops import RealTimeLoop

    loop = RealTimeLoop(_Shell(), _Envs(pausable), recorder=None)
    with caplog.at_level("INFO", logger="mqttrl.worker"):
        idle = [loop.why_idle() for _ in range(3)]
    if pausable:
        assert idle == ["the learner's flow control"] * 3
    else:
        assert idle == [None] * 3
        assert sum("cannot pause, so it plays on" in r.getMessage() for r in caplog.records) == 1


class _ClockedGame(gym.Env):
    """A game on its own clock (the real-time protocol) stepped freely, as a screen env with
    ``step_s`` and no ``control_hz`` is: its steps and pauses counted."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, pausable: bool):
        self.pausable, self.pauses, self.resumes = pausable, 0, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def send_action(self, action):
        pass

    def read_obs(self):
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def step(self, action):
        return self.read_obs()

    def pause(self):
        self.pauses += 1

    def resume(self):
        self.resumes += 1


class _FreeShell:
    """What the free loop asks of the node, its idle reason set by the test."""

    name, reason = "w0", None

    def __init__(self):
        from mqttrl.observe.timing import BlockTimes

        self.blocks = BlockTimes()

        class Actor:
            def act(self, obs):
                return np.zeros(len(obs), np.int64), {}

        self.actor = Actor()

    def drain(self, timeout=0.0):
        pass

    load_new_weights = heartbeat_if_due = send_when_due = lambda self: None

    def evaluate_if_due(self, envs):
        pass

    def idle_now(self):
        return self.reason


class _Recorder:
    def __init__(self):
        self.hold = type("Hold", (), {"steps": []})()
        self.steps: list[bool] = []  # each step taken: recorded or not

    def take(self, envs, step, record, timed):
        self.steps.append(record)


@pytest.mark.parametrize("env", ["cannot pause", "can pause", "lock-step"])
def test_the_free_loop_does_not_leave_a_game_on_its_own_clock_playing_alone(env, caplog):
    """The free loop idles for the learner's flow control or a link down: a lock-step env simply
    waits; a game on its own clock that can pause is paused (once) and resumed when play goes on;
    one that cannot pause plays on, as in the real-time loop: recorded when only the learner's
    update debt holds it (said once), played but not recorded while the link is down. (Before,
    the free loop idled beside it: the Windows screen-kit test's Catch, one life and a ball that
    falls in half a second, lost its game while the worker waited for the learner, and the next
    episode ended at its first step.)"""
    from mqttrl.nodes.worker.loops import FreeLoop

    game = _ClockedGame(env == "can pause")
    envs = EnvSet(lambda: game if env != "lock-step" else gym.make("CartPole-v1"), 1, seed=0)
    shell, recorder = _FreeShell(), _Recorder()
    loop = FreeLoop(shell, envs, recorder)
    with caplog.at_level("INFO", logger="mqttrl.worker"):
        for reason in ["learner_paused"] * 3 + ["link_down"] * 3 + [None] * 2:
            shell.reason = reason
            loop.tick()
    said = sum("cannot pause, so it plays on" in r.getMessage() for r in caplog.records)
    if env == "cannot pause":
        assert recorder.steps == [True] * 3 + [False] * 3 + [True] * 2 and said == 1
    else:  # idle: not stepped; then played and recorded
        assert recorder.steps == [True] * 2 and said == 0
    if env == "can pause":
        assert (game.pauses, game.resumes) == (1, 1)


# ---- a real game in a real window ---------------------------------------------------------------
def test_the_worker_plays_catch_that_exits_at_game_over_game_after_game(tmp_path):
    """Catch ``--exit-at-game-over`` under Xvfb, launched by the worker's env set as ``mqttrl
    worker`` builds it: several games, each an episode; no crash counted; the relaunches counted."""
    import threading

    from benchmarks.harness.xvfb import Xvfb
    from mqttrl.config import from_dict
    from mqttrl.nodes.worker.envs import make_worker_envs

    x = Xvfb(tmp_path)
    title = "catch exits at game over"
    env = {
        "id": "screen",
        "num_envs": 1,
        "launch": [sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", title, "--lives", "1"]
        + ["--ball-speed", "400", "--exit-at-game-over"],
        "launch_env": {"DISPLAY": x.display, "SDL_VIDEODRIVER": "x11", "SDL_AUDIODRIVER": "dummy"},
        "launch_max_per_hour": 1,
        "kwargs": {
            "window": title,
            "window_exact": True,
            "display": x.display,
            "keys": [[], ["Left"], ["Right"]],
            "reward": "mqttrl_plugins.screen.demo_game:CatchScore",
            "size": 16,
            "step_s": 0.02,
        },
    }
    built = make_worker_envs(from_dict({"env": env}), "w0", 0, threading.Event())
    envs, game = built.envs, built.game
    ended = []
    try:
        deadline = time.monotonic() + 60
        while len(ended) < 3:
            ended += envs.step(np.array([0]))[5]
            assert time.monotonic() < deadline, (game.launches, game.relaunches, envs.env_restarts)
    finally:
        envs.close()
        game.close()
        x.stop()
    assert all(e.terminated for e in ended)
    assert envs.env_restarts == 0 and game.crashes == 0 and game.relaunches >= 2


class SlowResetEnv(gym.Env):
    """Every step ends its episode with a frame stamped at the step; a reset takes 0.2 s."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        time.sleep(0.2)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {"frame_at": time.monotonic()}


def test_a_reset_is_not_counted_as_capture_to_action():
    envs = EnvSet(SlowResetEnv, 1, 0)
    for _ in range(3):
        envs.step(np.array([0]))
    assert envs.act_latency.max_s < 0.1, envs.act_latency.max_s


class _Greedy:
    def act(self, obs, greedy=False):
        return np.zeros(len(obs), np.int64), {}


def test_an_evaluation_of_several_episodes_plays_a_new_game_for_each(tmp_path):
    """A worker's greedy evaluation starts on a fresh game and each game over starts the next
    episode on a new one: every episode has a result, no crash is counted."""
    from mqttrl.envs.launched import new_game_for_evaluation
    from mqttrl.envs.rollout import greedy_returns

    game, envs = launched_tick(tmp_path, exit_after=170, over_at=150)
    try:
        new_game_for_evaluation(envs.envs)
        assert game.relaunches == 1  # the evaluation's first episode on a fresh game
        returns = greedy_returns(envs.envs, envs.dtype, _Greedy(), 3, seed=0, max_steps=5_000)
    finally:
        envs.close()
        game.close()
    assert len(returns) == 3 and game.relaunches >= 3 and game.crashes == 0


def test_a_person_s_steps_reach_the_worker_point_and_count_on_over_a_restart(mosquitto):
    """The worker point's ``person_steps`` (a takeover's steps, issue 45) is the heartbeats' count,
    its earlier processes' included, like the game's counts."""
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.wire import encode_json

    node = TelemetryNode(BrokerSettings(url=mosquitto.url), "r", [], TelemetrySettings())
    node.on_heartbeat(
        "pc1", encode_json({"incarnation": "a", "env_steps": 900, "model_version": 1, "person_steps": 300})
    )
    node.on_heartbeat("pc1", encode_json({"incarnation": "b", "env_steps": 50, "model_version": 1, "person_steps": 20}))
    node.on_heartbeat("pc2", encode_json({"incarnation": "c", "env_steps": 70, "model_version": 1}))  # an older worker
    fields = {p.tags["worker"]: p.fields for p in node.aggregate_points(time.time()) if p.measurement == "worker"}
    assert fields["pc1"]["person_steps"] == 320 and fields["pc2"]["person_steps"] == 0
