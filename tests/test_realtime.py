"""Real-time stepping on a fake clock: the anchored schedule, the simulated game PC, the
action history in the observation, the worker's env set (no sleeps: time is a number)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.envs.realtime import ActionHistory, RealTimeEnv, RealTimeEnvSet, can_pause, game_of
from mqttrl.envs.realtime_clock import ControlClock
from mqttrl.envs.realtime_sim import WallClockGame
from mqttrl.observe.timing import BlockTimes, PeriodStats, percentile_from_histogram
from mqttrl.wire.heartbeat import Heartbeat


class FakeTime:
    def __init__(self, t: float = 100.0):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        self.t += max(0.0, d)


def clock(ft: FakeTime, hz=20.0, mode="elastic", tolerance=0.1) -> ControlClock:
    c = ControlClock(hz, mode, tolerance, now=ft.now, sleep=ft.sleep)
    c.start()
    return c


def test_on_time_periods_stay_on_the_grid():
    ft = FakeTime()
    c = clock(ft)
    for k in range(1, 6):
        ft.t += 0.01  # forward + chores, well inside the 50 ms period
        assert c.wait() == pytest.approx(100.0 + k * 0.05)
    s = c.stats.take()
    assert s["overruns"] == 0 and s["skipped"] == 0 and s["period_err_ms"]["max"] == pytest.approx(0.0)


def test_elastic_late_period_is_absorbed_and_the_schedule_stays_anchored():
    """rtgym restarts its schedule from "now" past its tolerance (time never made up); this
    clock reads late once, then the next period ends on the original grid."""
    ft = FakeTime()
    c = clock(ft)
    ft.t += 0.08  # 30 ms late for the first period's end (100.05)
    assert c.wait() == pytest.approx(100.08)
    assert c.stats.overruns == 1 and c.stats.skipped == 0
    assert c.wait() == pytest.approx(100.10)  # back on the grid: a shorter period, no lost time
    assert c.stats.lost_s == 0.0


def test_elastic_skips_whole_periods_instead_of_bursting():
    ft = FakeTime()
    c = clock(ft)
    ft.t += 0.05 + 0.12  # 2.4 periods late
    c.wait()
    assert c.stats.skipped == 2 and c.stats.lost_s == pytest.approx(0.1)
    t = c.wait()
    assert t == pytest.approx(100.2)  # the next grid point after 100.17, not three quick reads
    assert c.stats.take()["period_err_ms"]["max"] == pytest.approx(120.0)


def test_strict_reads_only_on_the_grid():
    ft = FakeTime()
    c = clock(ft, mode="strict")
    ft.t += 0.05 + 0.02  # 20 ms late, past 5 ms tolerance
    assert c.wait() == pytest.approx(100.10)  # waited for the next grid point
    assert c.stats.overruns == 1 and c.stats.skipped == 1
    ft.t += 0.052  # 2 ms late: within tolerance, read now
    assert c.wait() == pytest.approx(100.152)


def test_reset_and_pause_are_excused_not_overruns():
    ft = FakeTime()
    c = clock(ft)
    started = ft.t
    ft.t += 3.0  # a level reload
    c.excuse_reset(started)
    c.pause()
    ft.t += 2.0
    c.resume()
    c.wait()
    s = c.stats.take()
    assert s["overruns"] == 0 and s["reset_s"] == pytest.approx(3.0) and s["paused_s"] == pytest.approx(2.0)
    assert s["period_err_ms"]["max"] == pytest.approx(0.0)


def test_period_stats_percentiles_and_histogram():
    st = PeriodStats(window=8)
    for ms in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 40.0]:
        st.record(ms / 1000)
    s = st.take()
    assert s["period_err_ms"]["max"] == pytest.approx(40.0)  # ring keeps the newest 8
    assert s["run_err_ms"]["max"] == pytest.approx(40.0) and s["periods"] == 10
    assert percentile_from_histogram(s["hist"], 0.5) == 0.5
    assert st.take()["period_err_ms"]["p99"] is None  # the window was read


def test_block_times_window_and_totals():
    ft = FakeTime(0.0)
    bt = BlockTimes(clock=ft.now)
    with bt.timed("forward"):
        ft.t += 0.002
    bt.add("forward", 0.001)
    assert bt.take() == {"forward": {"s": 0.003, "n": 2}}
    assert bt.take() == {} and bt.total["forward"] == pytest.approx(0.003)


def sim(ft: FakeTime, **kw) -> WallClockGame:
    return WallClockGame("CartPole-v1", world_hz=20.0, clock=ft.now, sleep=ft.sleep, **kw)


def test_wall_clock_game_late_action_is_a_missed_action():
    ft = FakeTime()
    g = sim(ft)
    g.reset(seed=0)
    g.send_action(1)
    ft.t += 0.05
    obs, r, *_ = g.read_obs()
    assert g.total_ticks == 1 and g.missed == 0 and r == 1.0
    ft.t += 0.06  # no action for a tick: the world moved on with the old one
    g.read_obs()
    assert g.total_ticks == 2 and g.missed == 1
    g.send_action(0)
    g.read_obs()  # read before the next tick: nothing new
    assert g.early_reads == 1 and g.total_ticks == 2


def test_wall_clock_game_pause_stops_the_world():
    ft = FakeTime()
    g = sim(ft)
    g.reset(seed=0)
    g.pause()
    ft.t += 10.0
    g.resume()
    g.read_obs()
    assert g.total_ticks == 0 and g.paused_s == pytest.approx(10.0)
    assert can_pause(g) and game_of(g) is g


def test_action_history_is_part_of_the_observation():
    env = ActionHistory(gym.make("CartPole-v1"), 3)
    assert env.observation_space.shape == (4 + 3 * 2,)
    obs, _ = env.reset(seed=0)
    assert obs[4:].sum() == 0
    obs, *_ = env.step(1)
    obs, *_ = env.step(0)
    assert obs[4:].tolist() == [0, 0, 0, 1, 1, 0]
    assert env.observation_space.contains(obs)
    with pytest.raises(ValueError, match="flat Box"):
        ActionHistory(_ImageEnv(), 1)


class _ImageEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (4, 4), np.uint8)
    action_space = gym.spaces.Discrete(2)


def test_real_time_env_set_sends_every_action_before_any_tick():
    """Two games on one worker: both actions go out at their period's start, so neither misses a
    tick, and each read happens after the tick (the games advance exactly one tick a period)."""
    ft = FakeTime()
    stats = PeriodStats()
    games: list[WallClockGame] = []

    def make():
        g = sim(ft)
        games.append(g)
        return ActionHistory(g, 2)

    envs = RealTimeEnvSet(
        make, 2, seed=0, make_clock=lambda: ControlClock(20.0, now=ft.now, sleep=ft.sleep, stats=stats)
    )
    for _ in range(5):
        ft.t += 0.004  # the forward
        _, rewards, next_obs, *_ = envs.step(np.array([1, 0]))
        assert rewards.tolist() == [1.0, 1.0]
    assert [g.missed for g in games] == [0, 0] and [g.total_ticks for g in games] == [5, 5]
    assert next_obs.shape == (2, 4 + 2 * 2) and next_obs[0, 4:].tolist() == [0, 1, 0, 1]
    assert stats.overruns == 0 and stats.periods == 10


def test_real_time_env_lock_steps_a_plain_env():
    ft = FakeTime()
    env = RealTimeEnv(gym.make("CartPole-v1"), ControlClock(50.0, now=ft.now, sleep=ft.sleep))
    env.reset(seed=0)
    t0 = ft.t
    env.step(1)
    env.step(0)
    assert ft.t == pytest.approx(t0 + 0.04) and env.game is None


class _SlowGame(WallClockGame):
    """A game whose send_action waits for the game (it must return at once) and cannot resume."""

    def send_action(self, action):
        import time

        time.sleep(0.02)

    resume = None


def test_check_plugin_checks_the_real_time_protocol():
    from mqttrl.conformance import check_realtime_game

    good = check_realtime_game(lambda: WallClockGame("CartPole-v1", world_hz=200.0), "env g", period_s=0.005)
    assert good and all(r.ok for r in good) and any("pause/resume" in r.name for r in good)
    bad = check_realtime_game(lambda: _SlowGame("CartPole-v1", world_hz=200.0), "env s", period_s=0.005)
    assert not bad[-1].ok and "must not wait" in bad[-1].detail
    assert check_realtime_game(lambda: gym.make("CartPole-v1"), "env c") == []  # lock-step: nothing to check


def test_a_game_that_hangs_is_restarted_like_a_crash():
    """tmrl #122: the game stopped sending data. Its read_obs gets a deadline; past it the env
    set closes it and makes it afresh (counted in env_restarts); the other game steps on."""
    import threading

    ft = FakeTime()
    release = threading.Event()
    made: list[WallClockGame] = []

    class Hanging(WallClockGame):
        def read_obs(self):
            if self is made[0] and self.total_ticks >= 2:
                release.wait(5)  # never answers (released at the end of the test)
            return super().read_obs()

    def make():
        made.append(Hanging("CartPole-v1", world_hz=20.0, clock=ft.now, sleep=ft.sleep))
        return made[-1]

    envs = RealTimeEnvSet(
        make, 2, seed=0, make_clock=lambda: ControlClock(20.0, now=ft.now, sleep=ft.sleep), obs_timeout_s=0.05
    )
    try:
        for _ in range(4):
            _, rewards, *_ = envs.step(np.array([1, 0]))
        assert envs.env_restarts == 1 and len(made) == 3  # the hung game was made afresh
        assert envs.failures == [0, 0]  # and it steps again
    finally:
        release.set()


def test_the_learner_combines_its_workers_reports():
    """Heartbeats -> learner metrics -> storages: the worst worker's window p99 and max, the
    run's percentiles from the summed histograms, summed counters and block times."""
    from mqttrl.observe.timing import FleetTiming, timing_fields

    reports = []
    for errs in ([0.0002] * 99 + [0.004], [0.0003] * 90 + [0.030] * 10):
        st = PeriodStats()
        for e in errs:
            st.record(e)
        st.overruns = sum(e > 0.005 for e in errs)
        reports.append(st.take())
    fleet = FleetTiming()
    beat = {"model_version": 0, "env_steps": 0}
    fleet.on_heartbeat("w0", Heartbeat(**beat, realtime=reports[0], timing={"forward": {"s": 0.1, "n": 100}}))
    fleet.on_heartbeat("w1", Heartbeat(**beat, realtime=reports[1], timing={"forward": {"s": 0.3, "n": 100}}))
    m = fleet.take()
    rt = m["realtime"]
    assert rt["workers"] == 2 and rt["periods"] == 200 and rt["overruns"] == 10
    assert rt["period_err_ms"]["max"] == pytest.approx(30.0) and rt["period_err_ms"]["p99"] == pytest.approx(30.0)
    assert rt["run_err_ms"]["p50"] == 0.5 and rt["run_err_ms"]["p99"] == 30  # bucket upper edges (99 of 200 <= 0.25)
    assert m["worker_timing"] == {"forward": {"s": pytest.approx(0.4), "n": 200}}
    assert fleet.take()["worker_timing"] == {}  # a window; the total stays
    fields = timing_fields({**m, "timing": {"train_step": {"s": 0.5, "n": 10}}})
    assert fields["rt_err_p99_ms"] == pytest.approx(30.0) and fields["rt_overruns"] == 10
    assert fields["time_workers_forward_ms"] == pytest.approx(2.0) and fields["time_learner_train_step_ms"] == 50.0


def test_status_shows_real_time_workers_control_periods():
    from rich.console import Console

    from mqttrl.cli.fleet import FleetView
    from mqttrl.wire import encode_json

    view = FleetView("r1")
    plain = encode_json({"env_steps": 10, "model_version": 1})
    view.handle(view.topics.heartbeat("w0"), plain)
    console = Console(width=100, record=True)
    console.print(view.table())
    assert "p99 ms" not in console.export_text()  # no real-time worker: the table as before
    st = PeriodStats()
    st.record(0.0021)
    st.overruns = 3
    rt = encode_json({"env_steps": 20, "model_version": 1, "realtime": st.take()})
    view.handle(view.topics.heartbeat("w1"), rt)
    console = Console(width=100, record=True)
    console.print(view.table())
    text = console.export_text()
    assert "p99 ms" in text and "2.1" in text
    row = next(r for r in view.rows() if r["node"] == "w1")
    assert row["period_p99_ms"] == pytest.approx(2.1) and row["overruns"] == 3
