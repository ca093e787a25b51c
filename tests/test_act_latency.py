"""Capture to action (issue 34): how old each observation was when the action that answers it went out,
per worker (the env set counts it) and per run (the learner combines the heartbeats; summary.json)."""

from __future__ import annotations

import pytest


# ---- capture to action ----------------------------------------------------------------------------
def test_latency_stats_report_and_the_runs_percentiles_from_summed_histograms():
    from mqttrl.observe.timing import LatencyStats, combine_latency

    fast, slow = LatencyStats(), LatencyStats()
    for _ in range(99):
        fast.record(0.002)  # 2 ms: the (1.5, 2] bucket
    slow.record(0.040)  # 40 ms: the (30, 50] bucket
    assert fast.report()["n"] == 99 and fast.report()["mean_ms"] == 2.0 and fast.report()["max_ms"] == 2.0
    run = combine_latency({"pc1": fast.report(), "pc2": slow.report(), "bad": {"hist": "x"}})
    assert run["steps"] == 100 and run["p50_ms"] == 2 and run["p99_ms"] == 2
    assert run["max_ms"] == 40.0 and run["mean_ms"] == pytest.approx((99 * 2 + 40) / 100, abs=1e-3)
    assert run["p99_ms_by_worker"] == {"pc1": 2, "pc2": 50}
    assert combine_latency({}) is None and combine_latency({"pc1": LatencyStats().report()}) is None


def test_the_env_set_counts_from_the_envs_capture_to_the_next_actions():
    """An env that says when it captured (``info["frame_at"]``) is held to that; the actions' time
    is the next step's start; a pause (``obs_at = None``) is not counted."""
    import time

    import gymnasium as gym
    import numpy as np

    from mqttrl.envs.rollout import EnvSet

    class Captured(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):  # captured 30 ms before the step returns
            return np.zeros(1, np.float32), 0.0, False, False, {"frame_at": time.monotonic() - 0.030}

    envs = EnvSet(Captured, 2, 0)
    envs.step(np.array([0, 1]))  # answers the reset: counted from the reset's return
    envs.step(np.array([0, 1]))  # answers a capture 30 ms old
    envs.obs_at = None  # as a pause leaves it
    envs.step(np.array([0, 1]))
    report = envs.act_latency.report()
    assert report["n"] == 2 and 30.0 <= report["max_ms"] < 200.0, report
