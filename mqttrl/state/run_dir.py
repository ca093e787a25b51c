"""A run directory is never reused by accident: its checkpoints are a trained model.

A learner started on a folder that already holds checkpoints, without ``--resume``, used to
train afresh in it and point ``checkpoints/latest`` at an untrained model (which retention then
deleted, leaving ``--resume`` nothing to resume). :func:`claim` refuses that in one line naming
both ways on: ``--resume`` (continue from the newest checkpoint) or ``--overwrite`` (start
again, the old checkpoints moved aside, never deleted).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from mqttrl.state.atomic import DiskFull, is_disk_full, write_file_atomically


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


class RunDirNotWritable(ValueError):
    """The run directory (or the folder it would be made in) cannot be written: read-only, not
    ours, or a file. Refused before anything starts (exit 2), not found out by the first checkpoint."""


def check_writable(run_dir: Path, flag: str = "--run-dir") -> None:
    """Refuse, in one line, a run directory this process cannot write: a file is made (and removed)
    in it, or in the nearest folder above it that exists (where it will be made). RunDirNotWritable
    (exit 2) for a read-only or foreign folder, DiskFull (exit 6) when the disk is full already."""
    run_dir = Path(run_dir)
    where = run_dir
    while not where.exists() and where.parent != where:
        where = where.parent
    if not where.is_dir():
        raise RunDirNotWritable(f"{flag} {run_dir}: {where} is a file, not a directory; give another --run-dir")
    try:
        fd, probe = tempfile.mkstemp(prefix=".mqttrl-write-check-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if is_disk_full(e):
            raise DiskFull(
                f"{flag} {run_dir}: the disk is full ({where}): free space or give another --run-dir"
            ) from None
        made = "" if where == run_dir else f" (where it would be made, {where})"
        raise RunDirNotWritable(
            f"{flag} {run_dir}: cannot write there{made}: {e.strerror}; give a --run-dir you can write to"
        ) from None


def intact(checkpoint: Path) -> bool:
    """Whether a checkpoint folder reads back whole: its ``meta.json`` parses and its
    ``state.safetensors`` is as long as its header says (cheap: the tensors are not read)."""
    try:
        json.loads((checkpoint / "meta.json").read_text())
        return _safetensors_whole(checkpoint / "state.safetensors")
    except (OSError, ValueError):
        return False


def _safetensors_whole(path: Path) -> bool:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        size = os.fstat(f.fileno()).st_size
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return size == 8 + n + max(ends, default=0)


def newest_intact_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``--resume`` continues from (``checkpoints/latest``'s, else the newest
    periodic one) when it is intact, else the newest intact periodic one; None when none is."""
    root = Path(run_dir) / "checkpoints"
    candidates = []
    try:
        candidates.append(root / (root / "latest").read_text().strip())
    except OSError:
        pass
    candidates += sorted(root.glob("ckpt-*"), reverse=True)
    return next((c for c in candidates if c.is_dir() and intact(c)), None)


def _counts(checkpoint: Path) -> str:
    """``, model version V after U updates`` from a checkpoint's meta.json (nothing if unreadable)."""
    try:
        node = json.loads((checkpoint / "meta.json").read_text())["node"]
        return f", model version {int(node['version'])} after {int(node['updates'])} updates"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def what_is_kept(run_dir: Path) -> str:
    """What a run directory holds that reads back whole, in words: its newest intact checkpoint
    and its best model (for the line a run ended by a full disk prints)."""
    from mqttrl.state.best import read_score

    run_dir = Path(run_dir)
    kept = []
    ckpt = newest_intact_checkpoint(run_dir)
    if ckpt is not None:
        kept.append(f"{ckpt} (the newest intact checkpoint{_counts(ckpt)}: --resume continues from it)")
    for best in (run_dir / "best", run_dir / "checkpoints" / "best"):
        if best != ckpt and (best / "weights.safetensors").is_file():
            score = read_score(best)
            kept.append(f"{best} ({score.describe()})" if score is not None else str(best))
            break
    if not kept:
        return f"{run_dir} holds no checkpoint or best model yet"
    return f"kept: {' and '.join(kept)}"


def write_resolved(config: Any, path: Path) -> None:
    """``config.json``: the resolved run config (a :class:`~mqttrl.config.RunConfig`), as every run writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(path, json.dumps(config.to_dict(), indent=2, sort_keys=True), sync=False)
