"""Two things a real game broke in the screen kit (issue 47), on a real Catch window (its own
process, an Xvfb display): a hung game is found by the default settings and its still frames are
never recorded by the worker; a tapped key stays down long enough for a game that polls the keys
once a frame."""

from __future__ import annotations

import logging
import os
import re
import signal
import time

import numpy as np
import pytest

from benchmarks.harness.xvfb import Game, Xvfb
from mqttrl.envs.rollout import EnvSet
from mqttrl.nodes.worker.loops import FreeLoop
from mqttrl.nodes.worker.step import StepRecorder
from mqttrl.observe.timing import BlockTimes
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.keys import Keyboard
from mqttrl_plugins.screen.options import parse_options

REWARD = "mqttrl_plugins.screen.demo_game:CatchScore"
KEYS = [[], ["Left"], ["Right"]]
#: a game that goes on (no game-over picture standing still), a ball always moving, a quick paddle
CATCH = ("--lives", "1000", "--ball-speed", "150", "--paddle-speed", "400", "--seed", "5")
BASE = {"window": "g", "reward": REWARD, "keys": KEYS}


# ---- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, says",
    [
        ({"key_mode": "tap", "tap_s": -0.01}, "tap_s=-0.01: seconds, >= 0"),
        ({"key_mode": "tap", "tap_s": "0.05"}, "tap_s='0.05': seconds, >= 0"),
        ({"key_mode": "tap", "tap_s": True}, "tap_s=True: seconds, >= 0"),
        ({"tap_s": 0.05}, 'tap_s=0.05: how long key_mode = "tap" holds a tapped key; here key_mode is "hold"'),
        ({"frozen_s": -1}, "frozen_s=-1: seconds, >= 0"),
    ],
)
def test_tap_s_and_frozen_s_are_checked_in_one_line(extra, says):
    with pytest.raises(ScreenEnvError) as e:
        parse_options(BASE | extra)
    assert str(e.value) == f"screen env: {says}"


def test_a_game_is_watched_for_hangs_and_taps_last_a_frame_by_default():
    o = parse_options(BASE)
    assert (o.frozen_s, o.tap_s) == (10.0, 0.04)
    assert parse_options(BASE | {"frozen_s": 0}).frozen_s == 0  # a game with a long still pause menu
    assert parse_options(BASE | {"key_mode": "tap", "tap_s": 0}).tap_s == 0  # key-down events only


class Recorder(Keyboard):
    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, bool]] = []
        self.flushes = 0

    def _send(self, key, down):
        self.events.append((key, down))

    def _flush(self):
        self.flushes += 1


def test_a_strike_holds_its_keys_with_a_key_down_event_each_time():
    kb = Recorder()
    kb.strike(["Right"])
    kb.strike(["Right", "space"])  # Right again: up and down (hold would send nothing)
    assert kb.held == {"Right", "space"}
    kb.release_all()
    assert kb.events == [
        ("Right", True),
        ("Right", False),
        ("Right", True),
        ("space", True),
        ("Right", False),
        ("space", False),
    ]
    assert kb.held == frozenset() and kb.flushes == 3


# ---- a real game -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def display(tmp_path_factory):
    """An Xvfb display with a client connected all along (an X server whose last client leaves resets)."""
    from Xlib import display as xdisplay

    x = Xvfb(tmp_path_factory.mktemp("xvfb"))
    keeper = xdisplay.Display(x.display)
    yield x.display
    keeper.close()
    x.stop()


@pytest.fixture
def game(display, tmp_path, request):
    g = Game(display, tmp_path, request.node.name[:40], *CATCH)
    g.wait_window()
    yield g
    if g.proc.poll() is None:
        os.kill(g.proc.pid, signal.SIGCONT)
    g.stop()


def screen_env(display: str, title: str, **kwargs):
    opts = {"window": title, "window_exact": True, "display": display, "keys": KEYS, "reward": REWARD}
    return make_screen_env(**(opts | kwargs))


def paddle_x(frame: np.ndarray) -> float:
    """The paddle's centre column in a full-size RGB frame (its green pixels near the bottom)."""
    rows = frame[-8:]
    cols = np.nonzero((rows[..., 1] > 150) & (rows[..., 0] < 120))[1]
    return float(cols.mean())


class TapeActor:
    """The algorithm's side of the worker, keeping what it is given to record (the newest frame of
    each row's observation and next observation); no policy: action 0, no keys."""

    def __init__(self):
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []
        self.truncated: list[tuple[int, np.ndarray]] = []

    def act(self, obs, greedy=False):
        return np.zeros(len(obs), np.int64), {}

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated):
        self.rows.extend((obs[i][-1].copy(), next_obs[i][-1].copy()) for i in range(len(obs)))

    def truncate(self, env_index, final_obs):
        self.truncated.append((env_index, final_obs[-1].copy()))


class Core:
    version = 0
    steps = 0

    def stepped(self, n, ended, at):
        self.steps += n


class Shell:
    def __init__(self, actor):
        self.actor, self.blocks = actor, BlockTimes()


def test_a_stopped_game_is_found_by_default_and_its_still_frames_are_not_recorded(display, game, caplog):
    """The worker's free loop on a real Catch (default frozen_s): SIGSTOP leaves its last picture
    on the screen; about frozen_s later the step raises, one WARNING says how long and how many
    steps, the env is made afresh (the game continued, as a relaunch would start it), and of the
    ~200 steps played on the still picture none reached the actor."""
    actor, core = TapeActor(), Core()
    envs = EnvSet(
        lambda: screen_env(display, game.title, step_s=0.05),
        1,
        seed=0,
        env_id="screen",
        on_restart=lambda i, err: os.kill(game.proc.pid, signal.SIGCONT),
    )
    recorder = StepRecorder(actor, core, BlockTimes(), None, lambda: None, lambda: False)
    loop = FreeLoop(Shell(actor), envs, recorder)
    try:
        for _ in range(30):  # the game plays: its steps are recorded (a step held at most while a frame repeats)
            loop.step()
        assert len(actor.rows) >= 28, len(actor.rows)
        before = len(actor.rows)
        caplog.clear()
        caplog.set_level(logging.INFO)
        os.kill(game.proc.pid, signal.SIGSTOP)
        stopped, played = time.monotonic(), 0
        while envs.env_restarts == 0:
            assert time.monotonic() - stopped < 15, f"{played} steps on a stopped game and none raised"
            loop.step()
            played += 1
        took = time.monotonic() - stopped
    finally:
        envs.close()
    assert 9.9 <= took < 12.5, took  # frozen_s = 10 by default, and a restart that finds the window
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "has not changed for 10 s: the game hangs" in warnings[0], warnings[0]
    said = int(re.search(r"its (\d+) steps since the frames stopped changing are not trained on", warnings[0])[1])
    assert played - 3 <= said <= played - 1 and said > 150, (said, played)
    dropped = [r.getMessage() for r in caplog.records if "held back" in r.getMessage()]
    assert dropped == [f"{said} vector steps held back while a game's frames stood still not recorded (env 0 froze)"]
    recorded = actor.rows[before:]
    assert len(recorded) <= 3, len(recorded)  # the step the stop caught in flight, and the new env's first
    assert not [i for i, (o, n) in enumerate(recorded) if np.array_equal(o, n)], "a still frame was recorded"
    # the stream ended where the still frames began: at the last recorded step's next frame
    assert actor.truncated and actor.truncated[0][0] == 0
    assert any(np.array_equal(n, actor.truncated[0][1]) for _, n in actor.rows[before - 1 :])


def test_tapped_keys_move_a_game_that_polls_the_keys(display, game):
    """Catch moves its paddle while pygame's key.get_pressed() says a key is down, read once a
    frame: a tap held tap_s (default) moves it, in lock-step and under the real-time protocol
    (send_action returns at once); the old tap, down and up in one flush (tap_s = 0), does not."""
    env = screen_env(display, game.title, step_s=0.05, key_mode="tap")
    try:
        env.reset()
        start = paddle_x(env.grab())
        for _ in range(4):
            t0 = time.monotonic()
            env.step(1)  # Left, tapped
            assert env.keyboard.held == frozenset() and time.monotonic() - t0 < 0.09  # up within the step
        tapped = start - paddle_x(env.grab())
        assert tapped > 25, (start, paddle_x(env.grab()))  # 4 taps of 0.04 s at 400 px/s: ~64 px
        start, slowest = paddle_x(env.grab()), 0.0
        for _ in range(4):  # the real-time protocol: the worker's clock waits, not the env
            t0 = time.monotonic()
            env.send_action(2)  # Right
            slowest = max(slowest, time.monotonic() - t0)
            assert env.keyboard.held == {"Right"}
            time.sleep(0.05)
            env.read_obs()
            assert env.keyboard.held == frozenset()
        assert slowest < 0.01, slowest
        assert paddle_x(env.grab()) - start > 25, (start, paddle_x(env.grab()))
    finally:
        env.close()
    old = screen_env(display, game.title, step_s=0.05, key_mode="tap", tap_s=0)
    try:
        old.reset()
        start = paddle_x(old.grab())
        for _ in range(4):
            old.step(1)
        assert abs(paddle_x(old.grab()) - start) < tapped / 4, (start, paddle_x(old.grab()), tapped)
    finally:
        old.close()
