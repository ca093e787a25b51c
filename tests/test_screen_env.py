"""The screen kit (plugins/screen): options and user functions checked with one clear line, the
Catch game's HUD read from its pixels, and then a real game in a real window: Catch in its own
process on an Xvfb display, captured with mss, played with XTest key presses, and trained on by
DQN end to end (``mqttrl.train``)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from benchmarks.harness.xvfb import Game, Xvfb
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.demo_game import HUD, Catch, CatchScore, read_hud
from mqttrl_plugins.screen.keys import Keyboard
from mqttrl_plugins.screen.options import check_result, load_reward, parse_options

REWARD = "mqttrl_plugins.screen.demo_game:CatchScore"
KEYS = [[], ["Left"], ["Right"]]


# ---- options and the user's function: one clear line ---------------------------------------
@pytest.mark.parametrize(
    "kwargs, says",
    [
        (
            {"window": "g", "reward": REWARD, "keys": KEYS, "windw": 1},
            "unknown option 'windw' (did you mean 'window'?)",
        ),
        ({"window": "g", "reward": "nocolon", "keys": KEYS}, 'give "module:function"'),
        ({"window": "g", "region": [0, 0, 9, 9], "reward": REWARD, "keys": KEYS}, "either window"),
        ({"reward": REWARD, "keys": KEYS}, "either window"),
        ({"window": "g", "reward": REWARD, "keys": ["Left"]}, "a list of key lists"),
        ({"region": [0, 0, 0, 9], "reward": REWARD, "keys": KEYS}, "width and height > 0"),
        ({"window": "g", "reward": REWARD, "keys": KEYS, "size": [84]}, "size=[84]"),
        ({"window": "g", "reward": REWARD, "keys": KEYS, "frame_stack": 0}, "frame_stack=0"),
        ({"window": "g", "reward": REWARD, "keys": KEYS, "keys_backend": "xdo"}, "keys_backend='xdo'"),
        ({"window": "g", "reward": REWARD, "keys": KEYS, "gray": "yes"}, "gray='yes': true or false"),
    ],
)
def test_bad_options_are_one_line(kwargs, says):
    with pytest.raises(ScreenEnvError, match=None) as e:
        parse_options(kwargs)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_options_read_sizes_and_defaults():
    o = parse_options({"region": [0, 0, 640, 480], "reward": REWARD, "keys": KEYS, "size": [96, 64], "gray": False})
    assert (o.width, o.height, o.gray, o.frame_stack, o.step_s) == (96, 64, False, 4, 0.05)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("no_such_module_xyz:score", "cannot import module 'no_such_module_xyz'"),
        ("mqttrl_plugins.screen.demo_game:CatchScor", "has no 'CatchScor' (did you mean 'CatchScore'?)"),
        ("mqttrl_plugins.screen.demo_game:HUD", "is not callable"),
    ],
)
def test_a_missing_reward_function_is_one_line(spec, says):
    with pytest.raises(ScreenEnvError) as e:
        load_reward(spec)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_reward_results_are_checked():
    assert check_result("m:f", (1, np.bool_(True))) == (1.0, True)
    for bad in (1.0, (1.0,), ("x", False), (1.0, "yes")):
        with pytest.raises(ScreenEnvError, match="must return \\(reward, done\\)"):
            check_result("m:f", bad)
    assert isinstance(load_reward(REWARD), CatchScore)  # a class: one instance per env


class Recorder(Keyboard):
    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, bool]] = []

    def _send(self, key, down):
        self.events.append((key, down))


def test_keys_are_held_and_only_changes_are_sent():
    kb = Recorder()
    kb.hold(["Left"])
    kb.hold(["Left"])  # still held: nothing sent
    kb.hold(["Right", "space"])
    kb.release_all()
    assert kb.events == [
        ("Left", True),
        ("Left", False),
        ("Right", True),
        ("space", True),
        ("Right", False),
        ("space", False),
    ]


# ---- the game's HUD, read from its pixels -----------------------------------------------------
def render(game: Catch) -> np.ndarray:
    """The game's frame as the kit captures it (RGB, H x W x 3), drawn off screen."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    pygame.font.init()
    surface = pygame.Surface((game.size, game.size))
    game.draw(surface, pygame.font.Font(None, 20))
    return pygame.surfarray.array3d(surface).transpose(1, 0, 2).copy()


def test_catch_score_reads_score_lives_and_game_over_from_pixels():
    game = Catch(160, lives=3, ball_speed=100, paddle_speed=100, seed=0)
    score = CatchScore()
    score.reset(render(game))
    assert read_hud(render(game)) == (0, 3, False)
    game.score = 5
    assert score(render(game)) == (5.0, False) and read_hud(render(game))[0] == 5
    game.score, game.lives = 6, 2
    assert score(render(game)) == (0.0, False)  # one catch, one life lost
    game.lives = 0
    assert score(render(game)) == (-2.0, True)  # two lives lost: game over
    game.restart()
    assert score(render(game)) == (0.0, False)  # a new game: no reward from the score going back to 0


# ---- a real game in a real window ------------------------------------------------------------
@pytest.fixture(scope="module")
def display(tmp_path_factory):
    x = Xvfb(tmp_path_factory.mktemp("xvfb"))
    yield x.display
    x.stop()


@pytest.fixture(scope="module")
def game(display, tmp_path_factory):
    """One Catch window for the module's tests (each starts with a reset: Return, a new game)."""
    g = Game(
        display,
        tmp_path_factory.mktemp("game"),
        "catch-test",
        "--lives",
        "1",
        "--ball-speed",
        "150",
        "--paddle-speed",
        "400",
        "--seed",
        "3",
    )
    g.wait_window()
    yield g
    g.stop()


def paddle_x(frame: np.ndarray) -> float:
    """The paddle's centre column in a full-size RGB frame (its green pixels near the bottom)."""
    rows = frame[-8:]
    cols = np.nonzero((rows[..., 1] > 150) & (rows[..., 0] < 120))[1]
    return float(cols.mean())


def ball_x(frame: np.ndarray) -> float | None:
    field = frame[HUD + 20 : -10]
    cols = np.nonzero(field.min(axis=2) > 200)[1]
    return float(cols.mean()) if len(cols) else None


def screen_env(display: str, **kwargs):
    opts = {"window": "catch-test", "display": display, "keys": KEYS, "reward": REWARD, "reset_keys": ["Return"]}
    return make_screen_env(**(opts | kwargs))


def test_the_window_is_found_where_xdotool_sees_it(game):
    """python-xlib's lookup agrees with xdotool's (another implementation) on the window's geometry."""
    found = game.wait_window()
    if not shutil.which("xdotool"):
        pytest.fail("xdotool is not on PATH: apt-get install xdotool (scripts/test.sh does this)")
    env = dict(os.environ, DISPLAY=game.display)

    def xdotool(*args: str) -> str:
        return subprocess.run(["xdotool", *args], capture_output=True, text=True, env=env, timeout=10).stdout

    # xdotool's own --name search misses SDL's UTF-8 titles here: list the windows, read each name
    ids = [w for w in xdotool("search", "--class", ".").split() if xdotool("getwindowname", w).strip() == "catch-test"]
    assert len(ids) == 1, ids
    geo = dict(line.split("=", 1) for line in xdotool("getwindowgeometry", "--shell", ids[0]).split())
    assert int(geo["WINDOW"]) == found.handle
    assert (int(geo["X"]), int(geo["Y"]), int(geo["WIDTH"]), int(geo["HEIGHT"])) == (
        found.region.left,
        found.region.top,
        found.region.width,
        found.region.height,
    )


def test_keys_move_the_paddle_and_rewards_come_from_the_users_function(game):
    env = screen_env(game.display, size=[42, 42], step_s=0.03)
    try:
        obs, _ = env.reset()
        assert obs.shape == (4, 42, 42) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
        start = paddle_x(env.grab())
        for _ in range(6):  # 0.18 s: the first ball is still falling
            obs, *_ = env.step(2)  # Right held
        right = paddle_x(env.grab())
        assert not np.array_equal(obs[0], obs[-1])  # the stack holds the frames of the move
        for _ in range(6):
            obs, *_ = env.step(1)  # Left held
        left = paddle_x(env.grab())
        assert right > start + 20 and left < right - 20, (start, right, left)
        env.reset()  # Return: a new game
        # follow the ball until one is caught, then stand still until it is missed: game over
        rewards, done, t0 = [], False, time.monotonic()
        while not done and time.monotonic() - t0 < 15:
            frame = env.grab()
            bx = ball_x(frame)
            caught = 1.0 in rewards
            action = (
                0
                if caught or bx is None
                else (1 if bx + 5 < paddle_x(frame) - 4 else 2 if bx + 5 > paddle_x(frame) + 4 else 0)
            )
            _, r, done, truncated, _ = env.step(action)
            rewards.append(r)
        assert 1.0 in rewards and done and rewards[-1] == -1.0  # a catch, then the last life lost
        assert read_hud(env.grab())[2]  # the game's own screen says game over
        obs, _ = env.reset()  # Return restarts it
        assert not read_hud(env.grab())[2] and read_hud(env.grab())[:2] == (0, 1)
    finally:
        env.close()


class CountingReward:
    """A user's reward function: reward = calls since the episode's first frame, done at the 3rd."""

    frames: list = []  # noqa: RUF012 (shared on purpose: the env makes its own instance)

    def reset(self, frame: np.ndarray) -> None:
        self.calls = 0

    def __call__(self, frame: np.ndarray) -> tuple[float, bool]:
        CountingReward.frames.append(frame.shape)
        self.calls = getattr(self, "calls", 0) + 1
        return float(self.calls), self.calls >= 3


def test_reward_and_end_are_the_users_functions(game):
    """Whatever the user's function says is the step's reward and end; it sees the full-size window."""
    env = screen_env(game.display, reward=f"{__name__}:CountingReward", size=21)
    try:
        env.reset()
        steps = [env.step(0)[1:3] for _ in range(3)]
        assert steps == [(1.0, False), (2.0, False), (3.0, True)]
        assert set(CountingReward.frames) == {(160, 160, 3)}  # the window, not the 21x21 observation
    finally:
        env.close()


def test_control_hz_paces_the_screen_env_through_its_real_time_protocol(game):
    """With ``[env] control_hz`` the worker's wrapper drives the kit by send_action/read_obs: the
    keys go out at each period's start and the frame is read at its end, 25 a second here."""
    from mqttrl.envs.realtime import RealTimeEnv, game_of
    from mqttrl.envs.realtime_clock import ControlClock

    inner = screen_env(game.display, size=42, step_s=0.0)
    env = RealTimeEnv(inner, ControlClock(25.0))
    try:
        assert game_of(inner) is inner
        env.reset()
        start, t0 = paddle_x(inner.grab()), time.monotonic()
        for _ in range(5):
            env.step(2)  # Right
        elapsed = time.monotonic() - t0
        assert 0.18 <= elapsed < 1.0, elapsed  # 5 periods of 40 ms, not as fast as the env goes
        assert paddle_x(inner.grab()) > start + 20
    finally:
        env.close()


def test_a_missing_window_or_key_is_one_line(game):
    with pytest.raises(ScreenEnvError) as e:
        # window_wait_s=0: at once, as before the kit waited for games that are starting
        make_screen_env(window="no such game", display=game.display, keys=KEYS, reward=REWARD, window_wait_s=0)
    assert "no window titled 'no such game'" in str(e.value) and "'catch-test'" in str(e.value)
    with pytest.raises(ScreenEnvError) as e:
        screen_env(game.display, keys=[[], ["Lefty"]])
    assert "unknown key 'Lefty'" in str(e.value) and "\n" not in str(e.value)


# ---- DQN on the window, end to end -----------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
def test_dqn_trains_on_the_window_end_to_end(display, tmp_path):
    """``mqttrl.train`` with a worker process playing Catch through the screen kit: env steps are
    taken from the window, episodes that the game's HUD ended are recorded, the learner trains."""
    import mqttrl

    g = Game(display, tmp_path, "catch-train", "--lives", "1", "--ball-speed", "300", "--seed", "1")
    g.wait_window()
    try:
        result = mqttrl.train(
            run="screen-ci",
            env={
                "id": "screen",
                "num_envs": 1,
                "kwargs": {
                    "window": "catch-train",
                    "display": display,
                    "keys": KEYS,
                    "reward": REWARD,
                    "reset_keys": ["Return"],
                    "size": 32,
                    "frame_stack": 2,
                    "step_s": 0.03,
                },
            },
            algorithm={
                "name": "dqn",
                "learning_starts": 40,
                "batch_size": 16,
                "buffer_size": 2000,
                "replay_ratio": 1.0,
            },
            worker={"batch_size": 16, "max_batch_delay_s": 0.2, "heartbeat_interval_s": 0.5},
            learner={"publish_every": 5, "metrics_interval_s": 0.5},
            workers=1,
            max_env_steps=80,  # ~3 s of play at 0.03 s a step, after the nodes start
            max_seconds=45,  # a safety net
            target_return=None,
            eval_every_s=1000,
            final_eval=False,
            telemetry_storages=[],  # no PNG curves to draw at the end
            run_dir=tmp_path / "run",
            progress=False,
        )
    finally:
        g.stop()
    assert result.stop_reason == "env step budget" and result.env_steps >= 80, result.summary
    assert result.updates > 0
    # capture to action, from the screen kit's frame_at to the next step's keys: reported for the run
    latency = result.summary["capture_to_action_ms"]
    assert latency is not None and latency["steps"] >= 20 and 0 < latency["p50_ms"] <= latency["p99_ms"], latency
    assert latency["p50_ms"] < 100 and set(latency["p99_ms_by_worker"]) == {"w0"}, latency
    rows = list(csv.DictReader((tmp_path / "run" / "episodes.csv").open()))
    assert len(rows) >= 2, rows
    # every episode ended at the game over the HUD showed: its last reward was the lost life (-1)
    assert all(float(r["return"]) >= -1 for r in rows) and any(float(r["length"]) > 1 for r in rows)


def test_check_plugin_skips_the_screen_env_it_cannot_make_without_a_run_s_options():
    """``mqttrl check-plugin screen_envs`` said FAIL for a working plugin: the env needs a window and
    keys that only a run's [env] section gives. It now says why it skipped, and still fails an env
    whose factory breaks in another way."""
    from mqttrl.conformance import run_checks

    results = {r.name: r for r in run_checks("screen_envs")}
    assert all(r.ok for r in results.values()), results
    assert results["env screen"].detail.startswith("skipped: needs options from a run's [env] section (screen env:")
