"""The benchmark scripts outside the harness still run: each at its smallest size, as a user
would start it, printing its figures (``bench_learner`` once broke with no test to notice).

Smoke runs, not measurements: the figures are the benchmarks' job (docs/benchmarks.md); here
a script must exit 0 and print the table or line its docs show. The scripts that need minutes,
servers, namespaces or a GPU at any size (fleet, hosts, chaos, links, realtime, workers, screen,
speed, gpu_learner) are held to their ``--help`` (they parse their arguments and import).
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
