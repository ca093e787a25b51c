"""The screen kit on Windows, end to end (issue 36): Catch (plugins/screen/demo_game.py, pygame's
win_amd64 wheel) run by the Windows CPython under Wine on an Xvfb display, a Windows worker
(``python.exe -m mqttrl worker``) whose screen env finds the game's window (``EnumWindows``, the client
area by ``GetClientRect``/``ClientToScreen``), grabs it with mss's GDI capture and holds keys by
``SendInput`` scan code, and a Linux learner that trains on its pixels.

What it asserts, each of which fails if a part of the kit does:

* the Linux learner accepted the Windows worker's samples, and their frames are 32x32 gray pictures
  of the game (its background's gray is their most common value, not a black grab);
* episodes ended where the game's HUD, read from the grabbed pixels, showed game over (capture, the
  client area's place, the reward function), and the reset's Return key started new games;
* the keys reached the game: a Linux observer grabbing the same window from the X side sees the
  paddle at places only held keys take it to (it starts in the middle and moves only on Left/Right);
* the loop closed: the learner trained, and the worker played with the weights it published;
* capture to keys: the Windows worker reports, in its heartbeats, how old each step's frame (mss's
  grab) was when its keys went out, and the learner combines it (``act_latency``, ``summary.json``'s
  ``capture_to_action_ms``): present, finite, p99 below 1 s (a loose bound: it shows the figure is
  measured end to end, not how fast a Windows PC is; the test prints the figures).

It does not assert that the policy learned to catch: on this machine's two shared cores a DQN on
Catch's pixels needs minutes to beat random play (benchmarks/bench_screen.py measures that on
Linux), and a pass that hung on a lucky return would not be honest. docs/windows.md says what Wine
cannot show (a real desktop, DirectX or fullscreen-exclusive games, DPI scaling).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

import numpy as np
import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher
from helpers.wine import WindowsPython, winpath

from benchmarks.harness.xvfb import Xvfb
from mqttrl_plugins.screen.capture import Grabber, rgb
from mqttrl_plugins.screen.window import Region, wait_for_window

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TITLE = "catch-win"
#: where SDL puts the game's client area (``--pos``): the title bar Wine draws above it stays on the screen
CLIENT = Region(20, 30, 160, 160)
#: the gray of Catch's background (20, 20, 40), as the kit's gray frames have it
BG_GRAY = round(0.299 * 20 + 0.587 * 20 + 0.114 * 40)

CONFIG = """
run = "{run}"
[env]
id = "screen"
num_envs = 1
[env.kwargs]
window = "{title}"
window_exact = true
keys = [[], ["Left"], ["Right"]]
reward = "mqttrl_plugins.screen.demo_game:CatchScore"
reset_keys = ["Return"]
size = 32
frame_stack = 2
step_s = 0.03
max_episode_steps = 300
[algorithm]
name = "dqn"
learning_starts = 100
batch_size = 32
buffer_size = 5000
replay_ratio = 1.0
target_update_every = 100
epsilon_decay_steps = 1000
[worker]
batch_size = 16
max_batch_delay_s = 0.2
[learner]
publish_every = 5
checkpoint_every = 100000
metrics_interval_s = 0.5
"""


@pytest.fixture(scope="module")
def winpy(tmp_path_factory) -> WindowsPython:
    wpy, why = WindowsPython.build(REPO / ".wine-py", tmp_path_factory.mktemp("wine"))
    if wpy is None:
        pytest.skip(f"no Windows CPython under Wine here: {why}")
    yield wpy
    wpy.shutdown()


class PaddleObserver(threading.Thread):
    """Grabs the game's window from Linux (mss on the X display) ten times a second: where the paddle is."""

    def __init__(self, region: Region, display: str):
        super().__init__(daemon=True)
        self.region, self.display = region, display
        self.xs: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        grab = Grabber(self.region, self.display)
        try:
            while not self.stopping.wait(0.1):
                rows = rgb(grab.grab())[-8:]
                cols = np.nonzero((rows[..., 1] > 150) & (rows[..., 0] < 120))[1]
                if len(cols):
                    self.xs.append(float(cols.mean()))
        finally:
            grab.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def _start_game(winpy: WindowsPython, display: str, tmp_path):
    game = winpy.start(
        ["-m", "mqttrl_plugins.screen.demo_game", "--title", TITLE, "--pos", f"{CLIENT.left},{CLIENT.top}"]
        + ["--lives", "1", "--ball-speed", "300", "--seed", "1", "--score-log", winpath(tmp_path / "catch-states.log")],
        tmp_path / "catch.log",
        marker=TITLE,
        display=display,
    )
    assert game.wait_for(f"window titled {TITLE!r} is up", 60), game.text()[-3000:]
    return game


def _learner(tmp_path, cfg, url) -> Proc:
    """The Linux learner, with no X display: it cannot make the screen env, so it waits for the spec
    the Windows worker publishes (docs/deployment.md), as a GPU box does."""
    env = {k: v for k, v in node_env().items() if k != "DISPLAY"}
    argv = [script("mqttrl-learner"), "--config", str(cfg), "--broker", url, "--run-dir", str(tmp_path / "run")]
    return Proc(argv, tmp_path / "learner.log", env=env)


def _trained(w: Watcher) -> bool:
    m = w.latest
    return (
        m.get("workers", {}).get("winscreen", {}).get("samples", 0) >= 200
        and m.get("updates", 0) > 20
        and len(w.episodes) >= 3
        and any(v > 0 for v in w.transitions_by_version)
        and (m.get("act_latency") or {}).get("steps", 0) >= 100
    )


def test_a_windows_worker_plays_catch_under_wine_through_the_screen_kit(tmp_path, mosquitto, winpy):
    run = "win-screen"
    with contextlib.ExitStack() as stack:  # each part stopped, the last started first, whatever fails
        display_server = Xvfb(tmp_path)
        stack.callback(display_server.stop)
        display = display_server.display
        winpy.shutdown()  # a wineserver the display-less tests started has a desktop without windows
        game = _start_game(winpy, display, tmp_path)
        stack.callback(lambda: winpy.kill(game.pids()))
        started = time.monotonic()
        # Linux's X11 lookup agrees with where SDL put the Windows program's client area
        assert wait_for_window(TITLE, display, exact=True, wait_s=10).region == CLIENT
        observer = PaddleObserver(CLIENT, display)
        observer.start()
        stack.callback(observer.stop)
        cfg = tmp_path / "run.toml"
        cfg.write_text(CONFIG.format(run=run, title=TITLE))
        watch = Watcher(mosquitto.port, run)
        stack.callback(watch.close)
        learner = _learner(tmp_path, cfg, mosquitto.url)
        stack.callback(lambda: learner.terminate(60))
        worker = winpy.start(
            ["-m", "mqttrl", "worker", "--broker", mosquitto.url, "--run", run, "--name", "winscreen"],
            tmp_path / "winscreen.log",
            marker="winscreen",
            display=display,
        )
        stack.callback(lambda: worker.p.poll() is None and worker.interrupt(60))
        watch.wait(
            lambda w: worker.p.poll() is not None or learner.p.poll() is not None or _trained(w),
            120,
            "200 samples, 20 updates, 3 episodes and play with published weights from the Windows worker",
        )
        xs = observer.xs or [float("nan")]
        latency = watch.latest.get("act_latency") or {}
        print(
            f"trained for {time.monotonic() - started:.0f}s: {len(watch.episodes)} episodes, "
            f"updates {watch.latest.get('updates')}, paddle seen at {min(xs):.0f}..{max(xs):.0f}; capture to "
            f"keys over {latency.get('steps')} steps: p50 <= {latency.get('p50_ms')} ms, p99 <= "
            f"{latency.get('p99_ms')} ms (bucket upper edges), mean {latency.get('mean_ms')} ms, max {latency.get('max_ms')} ms"
        )
        assert worker.p.poll() is None, worker.text()[-3000:]
        assert learner.p.poll() is None, learner.text()[-3000:]
        _check_run(watch, observer, tmp_path)
        # Ctrl-C: the worker stops as on Linux (its screen env lets the keys go and closes)
        assert worker.interrupt(60) == 130, worker.text()[-3000:]
        assert learner.terminate(60) == 0, learner.text()[-3000:]


def _check_run(watch: Watcher, observer: PaddleObserver, tmp_path) -> None:
    m = watch.latest
    assert sum(m["rejected"].values()) == 0, m["rejected"]
    batch = watch.last_batch["winscreen"]
    frames = batch.arrays["frames"]
    assert frames.dtype == np.uint8 and frames.shape[1:] == (32, 32), frames.shape
    assert batch.arrays["obs_ref"].shape[1] == 2  # two frames stacked
    values, counts = np.unique(frames, return_counts=True)
    assert abs(int(values[counts.argmax()]) - BG_GRAY) <= 3, (values, counts)  # the game's pictures
    # episodes end at the HUD's game over: the last reward the lost life, one life, so -1 or more
    eps = watch.episodes
    bad = [(i, eps[i - 1] if i else None, e) for i, e in enumerate(eps) if e["return"] < -1 or e["length"] <= 1]
    # a failure says what the game and the worker did (CI once saw an episode of length 1 in 1 of 3
    # loaded runs, not reproduced since: the game's own states, and the worker's late first actions)
    states = (tmp_path / "catch-states.log").read_text(errors="replace")[-1500:] if bad else ""
    late = [line for line in (tmp_path / "winscreen.log").read_text(errors="replace").splitlines() if "came" in line]
    assert not bad, f"(index, the episode before, the episode) of {len(eps)}: {bad[:3]}; game states: {states}; {late}"
    assert not any(e.get("truncated") for e in eps[:3]), eps[:3]
    # the paddle starts each game in the middle (60..100 px); only held keys take it further
    assert observer.xs, "the observer never saw the paddle"
    assert min(observer.xs) < 50 or max(observer.xs) > 110, (min(observer.xs), max(observer.xs))
    # capture to keys, the Windows worker's own clock from mss's grab to SendInput's keys
    latency = m["act_latency"]
    assert latency["steps"] >= 100 and set(latency["p99_ms_by_worker"]) == {"winscreen"}, latency
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= 1000 and math.isfinite(latency["max_ms"]), latency
