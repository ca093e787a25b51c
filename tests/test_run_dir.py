"""A run directory holding checkpoints is never reused by accident (mqttrl-learner without --resume)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mqttrl.cli import errors
from mqttrl.state import run_dir

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent


def finished_run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    (d / "checkpoints" / "ckpt-0000004000").mkdir(parents=True)
    (d / "checkpoints" / "ckpt-0000004000" / "weights.safetensors").write_bytes(b"trained")
    (d / "checkpoints" / "latest").write_text("ckpt-0000004000")
    return d


def test_a_fresh_or_log_only_folder_may_be_used(tmp_path):
    assert run_dir.claim(tmp_path / "new", resume=False, overwrite=False) is None
    (tmp_path / "logs-only" / "logs").mkdir(parents=True)  # mqttrl train writes logs/ before the learner starts
    assert run_dir.claim(tmp_path / "logs-only", resume=False, overwrite=False) is None


def test_a_finished_run_is_refused_without_resume_or_overwrite(tmp_path):
    d = finished_run(tmp_path)
    with pytest.raises(run_dir.RunDirInUse, match="--resume.*--overwrite"):
        run_dir.claim(d, resume=False, overwrite=False)
    assert (d / "checkpoints" / "latest").read_text() == "ckpt-0000004000"  # untouched
    assert run_dir.claim(d, resume=True, overwrite=False) is None


def test_overwrite_keeps_the_old_checkpoints_aside(tmp_path):
    d = finished_run(tmp_path)
    aside = run_dir.claim(d, resume=False, overwrite=True)
    assert aside is not None and (aside / "ckpt-0000004000" / "weights.safetensors").read_bytes() == b"trained"
    assert not (d / "checkpoints").exists()


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(run_dir.RunDirInUse, match="choose one"):
        run_dir.claim(finished_run(tmp_path), resume=True, overwrite=True)


def test_the_learner_refuses_a_finished_run_in_one_line(tmp_path):
    """Before anything connects: the broker address here has nothing listening."""
    d = finished_run(tmp_path)
    argv = [str(BIN / "mqttrl-learner"), "--config", str(ROOT / "configs" / "cartpole_dqn.toml")]
    argv += ["--run-dir", str(d), "--broker", "mqtt://127.0.0.1:9"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert str(d) in last and "--resume" in last and "--overwrite" in last
    assert (d / "checkpoints" / "latest").read_text() == "ckpt-0000004000"
