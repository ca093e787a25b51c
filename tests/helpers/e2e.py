"""Start a learner or a worker node as its own process (the installed console scripts)."""

from __future__ import annotations

import time

from helpers.procs import Proc, script


def start_learner(tmp_path, cfg, url, run_dir, *extra, env: dict | None = None) -> Proc:
    """``mqttrl-learner`` with config ``cfg`` on the broker at ``url``; logs under ``tmp_path``;
    ``env`` the process's environment (``node_env()`` when None)."""
    argv = [script("mqttrl-learner"), "--config", str(cfg), "--broker", url, "--run-dir", str(run_dir), *extra]
    return Proc(argv, tmp_path / f"learner-{time.monotonic_ns()}.log", env)


def start_worker(tmp_path, url, run, name, index=0, env: dict | None = None) -> Proc:
    """``mqttrl-worker`` ``name`` for ``run`` on the broker at ``url``; logs under ``tmp_path``."""
    argv = [script("mqttrl-worker"), "--broker", url, "--run", run, "--name", name, "--index", str(index)]
    return Proc(argv, tmp_path / f"worker-{name}-{time.monotonic_ns()}.log", env)
