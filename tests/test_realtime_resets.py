"""Real-time control on the real clock: a slow reset of one game does not stall the worker's
other games, the clock's spin is bounded, the control thread's priority is raised and lowered,
and a WallClock game that cannot pause or that runs at another speed."""

from __future__ import annotations

import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.config import EnvConfig
from mqttrl.envs.realtime import RESETTING, RealTimeEnvSet, can_pause, with_game_speed
from mqttrl.envs.realtime_clock import ControlClock, ThreadPriority
from mqttrl.envs.realtime_sim import WallClockGame
from mqttrl.observe.timing import PeriodStats


class Game(gym.Env):
    """A real-time protocol game on the real clock: its episodes end after ``episode_len`` reads
    (0: never), and every reset after the first takes ``reset_s`` of wall time (a level reloads)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, episode_len: int, reset_s: float):
        self.episode_len, self.reset_s = episode_len, reset_s
        self.reads: list[float] = []
        self.resets = 0
        self.n = 0

    def reset(self, *, seed=None, options=None):
        if self.resets and self.reset_s:
            time.sleep(self.reset_s)
        self.resets += 1
        self.n = 0
        return np.zeros(1, np.float32), {}

    def send_action(self, action):
        pass

    def read_obs(self):
        self.reads.append(time.perf_counter())
        self.n += 1
        done = bool(self.episode_len) and self.n >= self.episode_len
        return np.full(1, self.n, np.float32), 1.0, done, False, {}

    def step(self, action):
        return self.read_obs()


def play(background: bool, seconds: float = 1.2):
    """Game 0 ends an episode every 3 periods and takes 0.4 s to reset; game 1 never ends."""
    games = [Game(3, 0.4), Game(0, 0.0)]
    made = iter(games)
    stats = PeriodStats()
    envs = RealTimeEnvSet(
        lambda: next(made), 2, seed=0, make_clock=lambda: ControlClock(50.0, stats=stats), background_resets=background
    )
    gaps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _obs, _r, _next, _term, _trunc, _ended = envs.step(np.zeros(2, np.int64))
        gaps += bool(envs.resetting_rows)
        assert 1 not in envs.resetting_rows
    envs.close()
    reads = np.asarray(games[1].reads)
    return games, float(np.diff(reads).max()), gaps, envs


def test_a_slow_reset_does_not_stall_the_other_game():
    games, worst_gap, gaps, envs = play(background=True)
    assert games[0].resets >= 2  # it reset (slowly) at least once in the run
    assert gaps > 0  # steps in which game 0 was resetting in the background
    # game 1 was read every period meanwhile (20 ms; generous slack for a loaded machine)
    assert worst_gap < 0.2, worst_gap
    # each game's episode length counts its own steps only (no step while it was resetting)
    assert envs.lengths[0] <= 3


def test_without_background_resets_the_other_game_waits():
    """The behaviour the background resets remove: game 1 waits out game 0's 0.4 s reset."""
    _games, worst_gap, gaps, _envs = play(background=False, seconds=0.8)
    assert gaps == 0 and worst_gap >= 0.39


def test_a_fast_reset_stays_a_plain_reset():
    """A reset done within the join budget is collected in the same step: no row without a transition."""
    games = [Game(2, 0.0), Game(0, 0.0)]
    made = iter(games)
    envs = RealTimeEnvSet(lambda: next(made), 2, seed=0, make_clock=lambda: ControlClock(200.0))
    envs.reset_join_s = 5.0
    for _ in range(10):
        envs.step(np.zeros(2, np.int64))
        assert envs.resetting_rows == []
    assert games[0].resets >= 4


def test_a_reset_that_raises_in_the_background_is_a_crash():
    class Broken(Game):
        def reset(self, *, seed=None, options=None):
            if self.resets:
                time.sleep(0.05)
                raise RuntimeError("the level did not load")
            return super().reset(seed=seed, options=options)

    made = iter([Broken(1, 0.0), Game(0, 0.0), Game(0, 0.0)])
    envs = RealTimeEnvSet(lambda: next(made), 2, seed=0, make_clock=lambda: ControlClock(100.0), backoff_s=0.0)
    deadline = time.perf_counter() + 5
    while envs.env_restarts == 0 and time.perf_counter() < deadline:
        envs.step(np.zeros(2, np.int64))
    assert envs.env_restarts == 1  # the crash path made env 0 afresh


def test_the_clock_spins_only_the_end_of_a_period():
    c = ControlClock(100.0, spin_s=0.002)
    c.start()
    for _ in range(10):
        c.wait()
    # bounded CPU: about spin_s a period (more only when the spinning thread was preempted)
    assert 0.0 < c.stats.spin_s <= 10 * 0.002 + 0.05
    assert c.stats.periods == 10
    # an injected clock never spins (it may stand still while nobody sleeps)
    assert ControlClock(100.0, spin_s=0.002, now=lambda: 0.0, sleep=lambda d: None).spin_s == 0.0


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no sched_setscheduler on this OS")
def test_thread_priority_is_raised_for_the_deadline_and_lowered_for_chores():
    seen: dict = {}

    def control_thread():
        tp = ThreadPriority(5)
        tp.high()
        seen["enabled"] = tp.enabled
        seen["high"] = os.sched_getscheduler(0)
        tp.low()
        seen["low"] = os.sched_getscheduler(0)
        child = threading.Thread(target=lambda: seen.setdefault("child", os.sched_getscheduler(0)))
        child.start()
        child.join()
        off = ThreadPriority(0)
        off.high()
        seen["off"] = os.sched_getscheduler(0)

    t = threading.Thread(target=control_thread)
    t.start()
    t.join(10)
    if seen["enabled"]:  # root or CAP_SYS_NICE
        assert seen["high"] == os.SCHED_FIFO
    else:  # refused: one log line, the ordinary priority
        assert seen["high"] == os.SCHED_OTHER
    assert seen["low"] == os.SCHED_OTHER and seen["child"] == os.SCHED_OTHER and seen["off"] == os.SCHED_OTHER


def test_wall_clock_game_that_cannot_pause_and_its_speed():
    assert can_pause(WallClockGame("CartPole-v1"))
    game = WallClockGame("CartPole-v1", can_pause=False)
    assert not can_pause(game)

    t = [0.0]
    fast = WallClockGame("CartPole-v1", world_hz=50.0, clock=lambda: t[0])
    assert with_game_speed(fast, EnvConfig(id="x", game_speed=4.0)) is fast and fast.speeds == [4.0]
    fast.reset(seed=0)
    t[0] = 0.08  # 80 ms at 4x 50 Hz: 16 ticks (at 1x: 4)
    fast.read_obs()
    assert fast.total_ticks == 16 or fast.done  # CartPole may fall first (noop actions)
    assert fast.ticks >= 8


def test_game_speed_on_an_env_without_set_speed_is_one_warning(caplog):
    from mqttrl.envs import realtime

    realtime._speed_warned = False
    env = gym.make("CartPole-v1")
    with caplog.at_level("WARNING", logger="mqttrl.realtime"):
        assert with_game_speed(env, EnvConfig(game_speed=2.0)) is env
        with_game_speed(env, EnvConfig(game_speed=2.0))
    lines = [r for r in caplog.records if "set_speed" in r.getMessage()]
    assert len(lines) == 1 and "game_speed = 2 is ignored" in lines[0].getMessage()
    assert RESETTING  # the row marker is public (a caller's filter)
