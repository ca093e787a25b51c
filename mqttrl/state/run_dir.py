"""A run directory is never reused by accident: its checkpoints are a trained model.

A learner started on a folder that already holds checkpoints, without ``--resume``, used to
train afresh in it and point ``checkpoints/latest`` at an untrained model (which retention then
deleted, leaving ``--resume`` nothing to resume). :func:`claim` refuses that in one line naming
both ways on: ``--resume`` (continue from the newest checkpoint) or ``--overwrite`` (start
again, the old checkpoints moved aside, never deleted).
"""

from __future__ import annotations

import time
from pathlib import Path


class RunDirInUse(ValueError):
    """The folder holds a previous run's checkpoints and neither --resume nor --overwrite was given."""


def has_checkpoints(run_dir: Path) -> bool:
    """Whether ``run_dir/checkpoints`` holds any checkpoint (or a ``latest`` marker)."""
    ckpt = run_dir / "checkpoints"
    return ckpt.is_dir() and any(p.name == "latest" or p.is_dir() for p in ckpt.iterdir())


class NothingToResume(RunDirInUse):
    """--resume on a folder without a checkpoint: a mistyped path would otherwise start a fresh run."""


def resumable(run_dir: Path) -> bool:
    """Whether ``run_dir/checkpoints`` holds a checkpoint a learner can continue from."""
    ckpt = run_dir / "checkpoints"
    return ckpt.is_dir() and (
        (ckpt / "latest").is_file() or any((p / "meta.json").is_file() for p in ckpt.glob("ckpt-*"))
    )


def claim(run_dir: Path, resume: bool, overwrite: bool, if_any: bool = False) -> Path | None:
    """Check that a learner may start in ``run_dir``; with ``overwrite``, move the old
    checkpoints to ``checkpoints.replaced-<time>`` and return that path (else None).

    ``resume`` on a folder with no checkpoint is refused (NothingToResume), unless ``if_any``: a
    supervisor restarting a learner that died before its first checkpoint starts it afresh."""
    if resume and overwrite:
        raise RunDirInUse("--resume and --overwrite contradict each other: choose one")
    if resume and not if_any and not resumable(run_dir):
        where = "does not exist" if not run_dir.exists() else f"holds no checkpoint ({run_dir / 'checkpoints'})"
        raise NothingToResume(
            f"--resume: {run_dir} {where}, so there is nothing to continue: check the path "
            f"(the run directory that holds checkpoints/), or leave out --resume to start a new run there"
        )
    if resume or not has_checkpoints(run_dir):
        return None
    if not overwrite:
        raise RunDirInUse(
            f"{run_dir} already holds a run's checkpoints: add --resume to continue it, "
            f"--overwrite to start again there (the old checkpoints are kept aside), or choose another --run-dir"
        )
    aside = run_dir / f"checkpoints.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    (run_dir / "checkpoints").rename(aside)
    return aside
