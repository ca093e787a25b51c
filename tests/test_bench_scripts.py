"""The benchmark scripts outside the harness still run: each at its smallest size, as a user
would start it, printing its figures (``bench_learner`` once broke with no test to notice).

Smoke runs, not measurements: the figures are the benchmarks' job (docs/benchmarks.md); here
a script must exit 0 and print the table or line its docs show. The scripts that need minutes,
servers, namespaces or a GPU at any size (fleet, hosts, chaos, links, realtime, workers, screen,
speed, takeover, gpu_learner) are held to their ``--help`` (they parse their arguments and import).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.paths import REPO

SMOKE = {
    "bench_learner": (
        ["--config", "configs/minatar_breakout_dqn.toml", "--transitions", "300", "--fill", "300", "--updates", "3"],
        "| batch | updates/s |",
    ),
    "bench_compression": (["--reps", "1"], "zstd-3"),
    "bench_clock": (["--hz", "50", "--seconds", "1"], "| hz | variant |"),
    "bench_heads": (["--transitions", "300", "--rounds", "1", "--updates", "2"], "| rainbow |"),
    "bench_worker_node": (["--envs", "1", "--env-steps", "300", "--rounds", "1"], "env steps per CPU-second"),
}
HELP_ONLY = [
    "bench_fleet",
    "bench_gpu_learner",
    "bench_hosts",
    "bench_links",
    "bench_realtime",
    "bench_screen",
    "bench_speed",
    "bench_takeover",
    "bench_throughput",
    "bench_workers",
    "chaos",
    "adam_moments",
]


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", f"benchmarks.{module}", *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("module", sorted(SMOKE))
def test_a_benchmark_runs_at_its_smallest_size_and_prints_its_figures(module):
    args, shown = SMOKE[module]
    out = run(module, *args)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert shown in out.stdout, out.stdout[-3000:]


@pytest.mark.parametrize("module", HELP_ONLY)
def test_a_long_benchmark_parses_its_arguments(module):
    out = run(module, "--help")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("usage:"), out.stdout[:500]


def test_every_benchmark_script_is_held_here():
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - {"__init__", "run", "report", "chaos_env"}
    assert scripts == set(SMOKE) | set(HELP_ONLY), scripts ^ (set(SMOKE) | set(HELP_ONLY))


def test_the_takeover_benchmark_s_corrector_steps_in_only_before_a_miss():
    """bench_takeover's scripted corrector, on 32x32 frames drawn as Catch's are seen (the ball
    white, the paddle mid-gray in the bottom rows): it lets the agent play while the ball is high,
    while the paddle is under it, or while the agent already moves toward it; else it moves there."""
    import numpy as np

    from benchmarks.bench_takeover import correction

    def frame(ball_y: int, ball_x: int, paddle_x: int) -> np.ndarray:
        f = np.zeros((32, 32), np.uint8)
        f[ball_y : ball_y + 2, ball_x : ball_x + 2] = 255
        f[29:31, paddle_x : paddle_x + 8] = 150
        return np.stack([f, f])

    assert correction(frame(9, 25, 2), 0) is None  # the ball is high: the agent plays
    assert correction(frame(22, 5, 2), 0) is None  # low, the paddle under it
    assert correction(frame(22, 25, 2), 0) == 2  # low, the paddle far left, standing: to the right
    assert correction(frame(22, 25, 2), 1) == 2  # moving away: corrected
    assert correction(frame(22, 25, 2), 2) is None  # already moving toward it
    assert correction(frame(22, 2, 20), 2) == 1


def test_the_takeover_benchmark_corrects_only_in_a_worker_s_process():
    from benchmarks.bench_takeover import in_worker_process

    assert in_worker_process(["/x/mqttrl/__main__.py", "worker", "--run", "r", "--name", "w0"])
    assert not in_worker_process(["/x/mqttrl/__main__.py", "learner", "--config", "c.json"])
    assert not in_worker_process(["-m"])
