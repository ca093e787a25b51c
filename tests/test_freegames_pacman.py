"""The freegames Pacman recipe (configs/freegames_pacman_dqn.toml) and the scenario's wiring
(benchmarks/scenarios/freegames_pacman.py): their env is the real game (pip install freegames) in a
real window on its own Xvfb display, launched by mqttrl's launcher; the config's reward table (the
screen kit's readers) reads dots eaten as reward, checked against the game's own score, and a
frozen maze as the game over; a new episode is a new game. ``PacmanScore``, the hand-written
reader the recipe used before, is checked on plain frames."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness import scenario
from benchmarks.harness.pacman_reward import STILL_FRAMES, PacmanScore

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/freegames_pacman_dqn.toml"


def test_a_score_change_is_one_dot_and_a_still_maze_is_the_game_over():
    frame = np.zeros((420, 420, 3), np.uint8)
    reader = PacmanScore()
    reader.reset(frame)
    moved = frame.copy()
    moved[100, 100] = 255  # a ghost moved
    assert reader(moved) == (0.0, False)
    scored = moved.copy()
    scored[40, 380] = 255  # the score's digits changed
    assert reader(scored) == (1.0, False)  # the maze's first still frame
    dones = [reader(scored)[1] for _ in range(STILL_FRAMES - 1)]
    assert dones == [False] * (STILL_FRAMES - 2) + [True]


def test_the_scenario_plays_the_real_game_and_relaunches_it_each_episode():
    pytest.importorskip("freegames")
    pytest.importorskip("mss")
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed")
    sc = scenario.load("freegames_pacman")
    assert {s.name for s in sc.sides} == {"mqttrl", "SB3 DQN", "sb3-contrib QR-DQN", "random"}
    # every side reads the recipe's reward: mqttrl runs the config, the others the env made from its [env]
    import gymnasium as gym

    from benchmarks.scenarios.freegames_pacman import ENV

    assert sc.side("mqttrl").config == CONFIG and gym.registry["FreegamesPacman-v0"].kwargs["config"] == CONFIG
    assert {s.env for s in sc.sides if s.name != "mqttrl"} == {ENV}
    from mqttrl.envs.make import make_env

    env = make_env(sc.side("random").env)
    game = env.unwrapped
    try:
        obs, _ = env.reset()
        assert obs.shape == (2, 64, 64) and obs.dtype == np.uint8
        first = game.game.proc.pid
        # Pacman starts moving right along a row of dots: a few seconds of Right eat some
        rewards = [env.step(3)[1] for _ in range(30)]
        assert sum(rewards) >= 1
        env.reset()
        assert game.game.proc.pid != first and game.launches == 2
    finally:
        env.close()


def shown_at(log: list[tuple[float, int]], t: float, lag_s: float) -> set[int]:
    """The scores the game logged as in force at some moment of ``[t - lag_s, t]``."""
    before = [s for at, s in log if at <= t - lag_s]
    return set(before[-1:]) | {s for at, s in log if t - lag_s < at <= t}


@pytest.mark.slow
def test_the_shipped_config_s_readers_read_dots_as_reward_and_the_frozen_maze_as_done():
    """configs/freegames_pacman_dqn.toml's ``[env.kwargs]`` as shipped (its reward table: the score by
    the number reader and the shipped glyphs, the game over by a still reader), on the real game
    launched as its ``[env] launch`` does, on an Xvfb display of its own. The game's own
    ``state['score']`` and the moment a ghost caught Pacman are logged by tests/helpers/pacman_score.py;
    Pacman is steered by the config's keys to pellets, then to a ghost. Every reading is a score the
    game had (within 0.3 s), the episode's rewards add up to the dots it ate, and done comes once
    the game has stopped (10 still frames: 1 s after the catch), never before."""
    pytest.importorskip("freegames")
    pytest.importorskip("mss")
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed")
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.pacman_play import hunt_key, next_key

    from benchmarks.harness.launched_game import LaunchedScreenEnv

    shipped = tomllib.loads((ROOT / CONFIG).read_text())["env"]["kwargs"]
    assert shipped["reward"]["score"]["kind"] == "number" and shipped["reward"]["over"]["kind"] == "still"
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "score.log"
        env = LaunchedScreenEnv(
            CONFIG, launch=[sys.executable, str(ROOT / "tests/helpers/pacman_score.py"), str(log_path), "3"]
        )
        screen = env.env
        assert screen.opts.reward == shipped["reward"] and screen.opts.key_mode == "tap"
        actions = [keys[0] for keys in shipped["keys"]]
        try:
            env.reset()
            start = (screen.last_frame_at, screen.reward_fn.readings["score"])
            steps, total, action, done = [], 0.0, actions.index("Right"), False
            t0 = time.monotonic()
            while not done and time.monotonic() - t0 < 90:
                eating = time.monotonic() - t0 < 12  # 12 s of pellets, then to a ghost
                key = (next_key if eating else hunt_key)(screen.grab())
                action = actions.index(key) if key else action
                _, reward, done, truncated, _ = env.step(action)
                assert not truncated
                total += reward
                steps.append((screen.last_frame_at, reward, done, screen.reward_fn.readings["score"]))
            log = [(float(t), int(s)) for t, s in (line.split() for line in log_path.read_text().splitlines())]
            over_file = Path(f"{log_path}.over")
            assert done and over_file.exists(), "no game over within 90 s"
            caught_at = float(over_file.read_text())
            # each new episode a new game (launched afresh: its window is white a moment before the
            # game draws it), reset and played without a complaint
            for _ in range(3):
                env.reset()
                assert not any(env.step(actions.index("Right"))[2] for _ in range(5))
            assert env.launches == 4
        finally:
            env.close()
    # the game writes its score at the start of each tick and stops at the catch: a pellet eaten on
    # the catching tick (its log line and the catch read by the same 20 ms poll; pellets are 4 ticks
    # apart) is in the game's state but never on the screen (fresh-ci: 28 read for ever, 29 kept)
    if len(log) > 1 and abs(caught_at - log[-1][0]) <= 0.06:
        log = log[:-1]
    readings = [start] + [(t, r) for t, _, _, r in steps]
    ok = [(t, r) for t, r in readings if r.ok]
    wrong = [(t, r.value, shown_at(log, t, 0.3)) for t, r in ok if r.value not in shown_at(log, t, 0.3)]
    assert not wrong, wrong[:5]
    assert len(ok) >= 0.9 * len(readings), [r for _, r in readings if not r.ok][:5]
    final = log[-1][1]  # the game stopped at the catch: its last score
    # the rewards count from the first good reading: a relaunched game's window can be white at the
    # reset's frame (start_check = false), and an unreadable frame pays nothing
    first = next(r.value for _, r in readings if r.ok)
    assert final >= 5 and total == final - first, (final, first, start[1].value, total)
    done_at = steps[-1][0]
    not_done = [t for t, _, d, _ in steps if not d]
    assert len(not_done) == len(steps) - 1  # done once, at the episode's last step
    assert caught_at < done_at < caught_at + 3.0, (caught_at, done_at)  # 10 still frames of 0.1 s, and lag
    assert sum(t > caught_at + 0.3 for t in not_done) <= 12  # the still frames counted, not more
