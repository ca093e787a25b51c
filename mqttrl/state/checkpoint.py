"""Atomic checkpoints: a directory with ``state.safetensors`` + ``meta.json``.

Written to a temp directory and renamed into place, so a crash mid-write never
leaves a half checkpoint; ``latest`` names the newest complete one. Loading
reads safetensors and JSON only: no pickle, no ``torch.load``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from mqttrl.state.atomic import write_file_atomically


class CheckpointError(RuntimeError):
    pass


def write_dir_atomically(directory: Path, fill: Callable[[Path], None]) -> Path:
    """Replace ``directory`` with what ``fill(tmp)`` writes into a temporary folder beside it: every
    file synced, then renamed into place, so a reader sees the old folder or the whole new one."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".tmp-{directory.name}-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        fill(tmp)
        for f in tmp.iterdir():  # make the data durable before the rename publishes it
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if directory.exists():
            old = directory.parent / f".old-{directory.name}-{time.monotonic_ns()}"
            directory.rename(old)
            tmp.rename(directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def write_checkpoint(
    directory: Path,
    tensors: Mapping[str, np.ndarray],
    meta: Mapping[str, Any],
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write atomically to ``directory`` (replacing an existing one); ``files`` are extra files to include."""

    def fill(tmp: Path) -> None:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / "state.safetensors"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        for name, data in (files or {}).items():
            (tmp / name).write_bytes(data)

    return write_dir_atomically(directory, fill)


def read_checkpoint(directory: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    directory = Path(directory)
    try:
        meta = json.loads((directory / "meta.json").read_text())
        tensors = load_file(str(directory / "state.safetensors"))
    except (OSError, ValueError, SafetensorError) as exc:  # SafetensorError: a corrupt state file
        raise CheckpointError(f"cannot read checkpoint {directory}: {exc}") from None
    return tensors, meta


class CheckpointStore:
    """The ``checkpoints/`` folder of a run directory."""

    def __init__(self, root: Path, keep: int = 3):
        self.root = Path(root)
        self.keep = keep

    def save_periodic(self, updates: int, tensors, meta) -> Path:
        path = write_checkpoint(self.root / f"ckpt-{updates:010d}", tensors, meta)
        self._set_latest(path.name)
        self._prune()
        return path

    def save_named(self, name: str, tensors, meta, files: Mapping[str, bytes] | None = None) -> Path:
        """Quicksaves and best models; kept regardless of ``keep`` and also made ``latest``."""
        path = write_checkpoint(self.root / name, tensors, meta, files)
        self._set_latest(name)
        return path

    def _set_latest(self, name: str) -> None:
        write_file_atomically(self.root / "latest", name, sync=False)

    def _prune(self) -> None:
        periodic = sorted(p for p in self.root.glob("ckpt-*") if p.is_dir())
        for old in periodic[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def latest(self) -> Path | None:
        marker = self.root / "latest"
        if marker.exists():
            path = self.root / marker.read_text().strip()
            if (path / "meta.json").exists():
                return path
        candidates = sorted(p for p in self.root.glob("ckpt-*") if (p / "meta.json").exists())
        return candidates[-1] if candidates else None
