"""The screen kit with a real third-party game's manners: a window that is not there yet (the game is
starting), one that closes or hides mid-episode, a game that stops drawing, a game that acts on
key-down events, and a step that keeps the run's ``control_hz`` without the worker's clock. Each
on a real Catch window (its own process, an Xvfb display) where a window is involved."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from benchmarks.harness.xvfb import Game, Xvfb
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.capture import Stillness
from mqttrl_plugins.screen.keys import Keyboard
from mqttrl_plugins.screen.options import parse_options

REWARD = "mqttrl_plugins.screen.demo_game:CatchScore"
KEYS = [[], ["Left"], ["Right"], ["Return"]]
#: a game that goes on (no game-over picture standing still) and a quick paddle
CATCH = ("--lives", "1000", "--ball-speed", "150", "--paddle-speed", "400", "--seed", "3")


# ---- pure logic: options, frames that stop changing, tapped keys ------------------------------
@pytest.mark.parametrize(
    "extra, says",
    [
        ({"window_wait_s": -1}, "window_wait_s=-1: seconds, >= 0"),
        ({"frozen_s": "2"}, "frozen_s='2': seconds, >= 0"),
        ({"key_mode": "press"}, "key_mode='press': \"hold\""),
        ({"control_hz": True}, "control_hz=True: steps a second"),
        ({"control_hz": 20, "step_s": 0.05}, "give step_s or control_hz (here 20), not both"),
    ],
)
def test_the_new_options_are_checked_in_one_line(extra, says):
    with pytest.raises(ScreenEnvError) as e:
        parse_options({"window": "g", "reward": REWARD, "keys": KEYS} | extra)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_new_options_default_to_todays_behaviour_but_a_patient_lookup_and_a_hang_check():
    o = parse_options({"window": "g", "reward": REWARD, "keys": KEYS})
    assert (o.window_wait_s, o.frozen_s, o.key_mode, o.control_hz, o.step_s) == (30.0, 10.0, "hold", 0.0, 0.05)
    assert parse_options({"window": "g", "reward": REWARD, "keys": KEYS, "control_hz": 0, "step_s": 0.1}).step_s == 0.1


def test_stillness_counts_from_the_first_of_the_equal_frames():
    still, a = Stillness(), np.zeros((4, 4, 4), np.uint8)
    b = a.copy()
    b[1, 2, 0] = 1  # one channel of one pixel
    assert still.seen(a, 10.0) == 0.0
    assert still.seen(a.copy(), 10.5) == 0.5 and still.seen(a.copy(), 11.25) == 1.25
    assert still.seen(b, 11.5) == 0.0 and still.seen(b.copy(), 12.0) == 0.5
    assert still.seen(np.zeros((2, 2, 4), np.uint8), 12.5) == 0.0  # another size: a change
    still.restart()  # a new episode
    assert still.seen(np.zeros((2, 2, 4), np.uint8), 13.0) == 0.0


class Recorder(Keyboard):
    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, bool]] = []
        self.flushes = 0

    def _send(self, key, down):
        self.events.append((key, down))

    def _flush(self):
        self.flushes += 1


def test_tapped_keys_go_down_and_up_at_every_press_and_stay_up():
    kb = Recorder()
    kb.hold(["Left"])
    kb.events.clear()
    kb.press(["space", "Right"])  # what was held is let go first
    kb.press(["Right"])  # the same key again: pressed again (hold would send nothing)
    kb.press([])
    assert kb.events == [
        ("Left", False),
        ("Right", True),
        ("space", True),
        ("space", False),
        ("Right", False),
        ("Right", True),
        ("Right", False),
    ]
    assert kb.held == frozenset() and kb.flushes == 4  # the hold, then one flush a press


# ---- a real game -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def display(tmp_path_factory):
    """An Xvfb display, with a client connected all along: an X server whose last client leaves
    resets itself, and a game starting meanwhile fails (Game.wait_window connects once a look)."""
    from Xlib import display as xdisplay

    x = Xvfb(tmp_path_factory.mktemp("xvfb"))
    keeper = xdisplay.Display(x.display)
    yield x.display
    keeper.close()
    x.stop()


@pytest.fixture
def start_game(display, tmp_path):
    """``start_game(title)``: a Catch window on the display, stopped (and continued first, if a test
    stopped it) at the test's end."""
    games: list[Game] = []

    def start(title: str) -> Game:
        g = Game(display, tmp_path, title, *CATCH)
        games.append(g)
        return g

    yield start
    for g in games:
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


def test_making_the_env_waits_for_a_window_that_is_not_there_yet(tmp_path, caplog):
    """The env is made while the game is still starting, on a display of its own with no other
    client (as a game PC's Xvfb): it waits (one log line saying for what, where), without making
    the X server reset under the starting game, and plays the window once it is there."""
    caplog.set_level(logging.INFO, logger="mqttrl.screen")
    x = Xvfb(tmp_path)
    games: list[Game] = []
    later = threading.Timer(1.5, lambda: games.append(Game(x.display, tmp_path, "catch-late", *CATCH)))
    env = None
    try:
        t0 = time.monotonic()
        later.start()
        try:
            env = screen_env(x.display, "catch-late", window_wait_s=30)
        finally:
            later.join()
        waited = time.monotonic() - t0
        assert 1.5 <= waited < 30, waited
        assert env.window.title == "catch-late"
        lines = [r.getMessage() for r in caplog.records if r.name == "mqttrl.screen"]
        assert lines == [
            f"screen env: no window titled 'catch-late' on {x.display} yet; waiting up to 30 s for it (window_wait_s)"
        ]
        obs, _ = env.reset()
        assert obs.shape == (4, 84, 84) and env.step(0)[0].shape == obs.shape
    finally:
        if env is not None:
            env.close()
        for g in games:
            g.stop()
        x.stop()


def test_a_window_that_does_not_come_is_the_missing_window_line_after_window_wait_s(display):
    t0 = time.monotonic()
    with pytest.raises(ScreenEnvError) as e:
        screen_env(display, "catch-never", window_wait_s=0.5)
    assert 0.5 <= time.monotonic() - t0 < 3
    msg = str(e.value)
    assert msg.startswith("screen env: no window titled 'catch-never' after 0.5 s (windows with a title:"), msg
    assert msg.endswith("is the game running?") and "\n" not in msg
    t0 = time.monotonic()
    with pytest.raises(ScreenEnvError, match=r"^screen env: no window titled 'catch-never' \(windows with a title"):
        screen_env(display, "catch-never", window_wait_s=0)  # 0: at once, as before
    assert time.monotonic() - t0 < 0.5


def xdotool(display: str, *args: str) -> None:
    if not shutil.which("xdotool"):
        pytest.fail("xdotool is not on PATH: apt-get install xdotool (scripts/test.sh does this)")
    env = dict(os.environ, DISPLAY=display)
    subprocess.run(["xdotool", *args], check=True, env=env, timeout=10)


def steps_until_error(env, within_s: float) -> tuple[ScreenEnvError, int, float]:
    """Step (no keys) until a step raises :class:`ScreenEnvError`: the error, the steps it took
    (the raising one included) and the seconds; fails the test after ``within_s``."""
    t0, steps = time.monotonic(), 0
    while time.monotonic() - t0 < within_s:
        steps += 1
        try:
            env.step(0)
        except ScreenEnvError as e:
            return e, steps, time.monotonic() - t0
    pytest.fail(f"{steps} steps in {within_s} s and none raised")


def test_a_window_that_closes_or_hides_is_an_error_at_the_next_step(display, start_game, capfd):
    """Not frames of the screen area it left (black on Xvfb): a hidden window, then a killed game,
    raise at the next step. The game started again, a reset finds its new window and plays on."""
    game = start_game("catch-closes")
    game.wait_window()
    env = screen_env(display, "catch-closes", step_s=0.05, window_wait_s=20)
    try:
        env.reset()
        for _ in range(3):
            env.step(0)
        xdotool(display, "windowunmap", "--sync", str(env.window.handle))
        e, steps, took = steps_until_error(env, 3.0)
        assert steps == 1 and "the window 'catch-closes' on" in str(e) and "is no longer shown" in str(e), str(e)
        xdotool(display, "windowmap", "--sync", str(env.window.handle))
        env.step(0)  # shown again: plays on

        game.proc.kill()
        game.proc.wait()
        e, steps, took = steps_until_error(env, 3.0)
        assert steps <= 2 and took < 1.0, (steps, took)
        assert str(e) == f"screen env: the window 'catch-closes' on {display} closed: did the game exit or crash?"
        assert steps_until_error(env, 1.0)[1] == 1  # and again at every step
        # a step with keys: their focus on the closed window is refused by X, quietly (the line says it)
        with pytest.raises(ScreenEnvError, match="closed: did the game exit or crash"):
            env.step(2)
        assert "X protocol error" not in capfd.readouterr().err

        again = threading.Timer(1.0, start_game, ["catch-closes"])
        t0 = time.monotonic()
        again.start()
        try:
            env.reset()  # the game is starting again: the reset waits for its window
        finally:
            again.join()
        assert time.monotonic() - t0 >= 1.0 and env.step(0)[0].shape == (4, 84, 84)
        start = paddle_x(env.grab())
        for _ in range(3):
            env.step(2)  # Right: the keys reach the new window (the X server may give it the old one's id)
        assert paddle_x(env.grab()) > start + 20, (start, paddle_x(env.grab()))
    finally:
        env.close()


def test_a_window_that_moves_mid_episode_is_followed_at_the_next_step(display, start_game, caplog):
    """A game may move its window after it appeared (turtle's setup() does, a moment after its
    title is set: on a busy CI machine the env had found it first and grabbed the empty place it
    left). Moved mid-episode, the next step grabs the window at its new place (the paddle is there,
    and the keys still move it), with one log line."""
    from mqttrl_plugins.screen.window import find_window

    game = start_game("catch-moves")
    game.wait_window()
    env = screen_env(display, "catch-moves", step_s=0.05)
    try:
        env.reset()
        before = env.region
        xdotool(display, "windowmove", "--sync", str(env.window.handle), str(before.left + 150), str(before.top + 90))
        moved = find_window("catch-moves", display, exact=True).region
        assert (moved.left, moved.top) == (before.left + 150, before.top + 90), (before, moved)
        with caplog.at_level(logging.INFO, logger="mqttrl.screen"):
            obs = env.step(0)[0]
        assert env.region == moved and env.window.region == moved
        assert obs[-1].max() > 0  # the game, not the black root where it was
        start = paddle_x(env.grab())
        for _ in range(3):
            env.step(2)
        assert paddle_x(env.grab()) > start + 20, (start, paddle_x(env.grab()))
        follows = [r.getMessage() for r in caplog.records if "moved or was resized" in r.getMessage()]
        assert len(follows) == 1 and "'catch-moves'" in follows[0], follows
    finally:
        env.close()


def test_an_episodes_late_first_action_is_one_log_line(display, start_game, caplog):
    """A worker busy between the reset and the first step lets a fast game play on unseen (CI's
    Windows Catch test: a ball that falls in half a second, one life, an episode of length 1): the
    env says so, with the gap; a prompt first step says nothing."""
    game = start_game("catch-late")
    game.wait_window()
    env = screen_env(display, "catch-late", step_s=0.05)
    try:
        with caplog.at_level(logging.INFO, logger="mqttrl.screen"):
            env.reset()
            env.step(0)
            env.step(0)
            env.reset()
            time.sleep(0.4)
            env.step(0)
        late = [r.getMessage() for r in caplog.records if "first action came" in r.getMessage()]
        assert len(late) == 1 and env.late.count == 1, late
        gap = float(late[0].split("came ")[1].split(" s")[0])
        assert 0.4 <= gap < 1.5, late
    finally:
        env.close()


def test_a_game_that_stops_drawing_is_an_error_after_frozen_s(display, start_game):
    """frozen_s = 2: a running game's frames change (no error in 2.5 s of steps); the game stopped
    (SIGSTOP: its window stays, with its last picture), a step raises 2 s later."""
    game = start_game("catch-hangs")
    game.wait_window()
    env = screen_env(display, "catch-hangs", step_s=0.05, frozen_s=2)
    try:
        env.reset()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            env.step(0)
        os.kill(game.proc.pid, signal.SIGSTOP)
        try:
            e, _, took = steps_until_error(env, 6.0)
        finally:
            os.kill(game.proc.pid, signal.SIGCONT)
        assert 1.9 <= took < 3.0, took  # the last picture may have been grabbed just before the stop
        assert str(e).startswith(
            "screen env: the window 'catch-hangs' has not changed for 2 s: the game hangs (frozen_s = 2;"
        ), str(e)
    finally:
        env.close()


def test_tapped_keys_fire_key_down_events_and_hold_nothing(display, start_game):
    """Catch moves its paddle while a key is down (it polls the keys) and restarts on Return's
    key-down event: with key_mode = "tap" and tap_s = 0 the paddle does not follow Left (down and
    up before the game looks), while a tapped Return restarts the game (the paddle back in the
    middle). (The default tap_s moves it: tests/test_screen_frozen_and_taps.py.)"""
    game = start_game("catch-taps")
    game.wait_window()
    held = screen_env(display, "catch-taps", step_s=0.03, reset_keys=["Return"])
    try:
        held.reset()  # a new game: the paddle in the middle
        middle = paddle_x(held.grab())
        for _ in range(4):
            held.step(2)  # Right, held
        right = paddle_x(held.grab())
    finally:
        held.close()
    assert right > middle + 30, (middle, right)
    tapped = screen_env(display, "catch-taps", step_s=0.03, key_mode="tap", tap_s=0)
    try:
        tapped.reset()  # no reset keys: the paddle stays where it was
        start = paddle_x(tapped.grab())
        for _ in range(4):
            tapped.step(1)  # Left, tapped
        after_taps = paddle_x(tapped.grab())
        assert abs(after_taps - start) < (right - middle) / 3, (start, after_taps, middle, right)
        tapped.step(3)  # Return, tapped: the game restarts
        tapped.step(0)
        assert abs(paddle_x(tapped.grab()) - middle) < 3, (middle, paddle_x(tapped.grab()))
    finally:
        tapped.close()


def region_env(display: str, **kwargs):
    """An env on a fixed part of the screen (no game needed to time steps)."""
    opts = {"region": [0, 0, 160, 160], "display": display, "keys": KEYS, "reward": REWARD, "size": 16}
    return make_screen_env(**(opts | kwargs))


def timed_steps(env, n: int) -> float:
    env.reset()
    t0 = time.monotonic()
    for _ in range(n):
        env.step(0)
    return time.monotonic() - t0


def test_control_hz_paces_steps_that_no_worker_clock_paces(display):
    """``mqttrl enjoy`` steps the env itself: with the run's control_hz (a kwarg, or told by mqttrl
    through set_control_hz) its steps last a control period, as the worker's did in training."""
    env = region_env(display, control_hz=10)
    try:
        assert env.period == 0.1
        assert 0.48 <= timed_steps(env, 5) < 1.0
        with pytest.raises(
            ScreenEnvError, match=r"control_hz=10 in \[env.kwargs\], but the run's \[env\] control_hz is 20"
        ):
            env.set_control_hz(20)
    finally:
        env.close()
    env = region_env(display, step_s=0.0)  # the docs' setting under a worker's clock: as fast as it goes
    try:
        env.set_control_hz(0)  # a run without control_hz: nothing changes
        assert timed_steps(env, 5) < 0.2
        env.set_control_hz(25)
        assert env.period == 0.04 and 0.19 <= timed_steps(env, 5) < 0.6
    finally:
        env.close()


def test_every_node_that_makes_the_run_env_tells_it_the_runs_control_hz():
    """make_run_env (enjoy, greedy evaluation) passes ``[env] control_hz`` on, so those steps last
    the period training used; an env without set_control_hz, or a run without control_hz, is left alone."""
    import gymnasium as gym

    from mqttrl.config import from_dict
    from mqttrl.envs.realtime import with_control_hz

    class Paced(gym.Env):
        observation_space = gym.spaces.Discrete(1)
        action_space = gym.spaces.Discrete(1)
        hz = None

        def set_control_hz(self, hz):
            self.hz = hz

    env = Paced()
    with_control_hz(gym.wrappers.TimeLimit(env, 10), from_dict({"env": {"control_hz": 25.0}}).env)
    assert env.hz == 25.0
    other = Paced()
    with_control_hz(other, from_dict({}).env)
    assert other.hz is None
    with_control_hz(gym.make("CartPole-v1"), from_dict({"env": {"control_hz": 25.0}}).env)  # no method: no error


def test_a_launched_game_sped_up_by_libfaketime_is_paced_at_the_wall_rate(monkeypatch):
    """With ``[env] game_speed = 2`` a launched game runs twice as fast: an unpaced node's step
    (``mqttrl enjoy``, a greedy evaluation) lasts half the wall time, the same game time as a
    worker's period (its clock runs at control_hz x game_speed); a game started by hand keeps
    control_hz (libfaketime does not reach it)."""
    import sys

    import gymnasium as gym

    from mqttrl.config import from_dict
    from mqttrl.envs.realtime import with_control_hz

    if not sys.platform.startswith("linux"):
        pytest.skip("libfaketime speeds up launched games on Linux only")

    class Paced(gym.Env):
        observation_space = gym.spaces.Discrete(1)
        action_space = gym.spaces.Discrete(1)
        hz = None

        def set_control_hz(self, hz):
            self.hz = hz

    launched, by_hand = Paced(), Paced()
    env = {"control_hz": 10.0, "game_speed": 2.0}
    with_control_hz(launched, from_dict({"env": {**env, "launch": ["game"]}}).env)
    with_control_hz(by_hand, from_dict({"env": env}).env)
    assert (launched.hz, by_hand.hz) == (20.0, 10.0)
