"""The freegames Pacman scenario's wiring (benchmarks/scenarios/freegames_pacman.py): its env is the
real game (pip install freegames) in a real window on its own Xvfb display, launched by mqttrl's
launcher; dots eaten read as reward, a frozen maze as the game over, a new episode as a new game."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from benchmarks.harness import scenario
from benchmarks.harness.pacman_reward import STILL_FRAMES, PacmanScore


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
