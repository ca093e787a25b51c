"""The learner's checkpoints: what one holds, written and read back in one place.

A checkpoint is the algorithm's state (``algo/...`` tensors and its metadata), the RNG state,
the node's counters (version, updates, samples and batches taken in, every worker's last
sequence number, the epoch) and the run's config; a named one (``best``, ``quicksave-...``)
can carry extra files. Resuming reads the newest back into the algorithm and the core.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from mqttrl.config import RunConfig
from mqttrl.nodes.learner.core import LearnerCore
from mqttrl.state.atomic import DiskFull, is_disk_full
from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint
from mqttrl.state.rng import restore_rng, rng_state

log = logging.getLogger("mqttrl.learner")


class Checkpointing:
    """Saves the learner's state (periodic or named) and resumes from the newest."""

    def __init__(self, store: CheckpointStore, config: RunConfig, algo: Any, core: LearnerCore):
        self.store = store
        self.config = config
        self.algo = algo
        self.core = core
        #: the update count at the last save: periodic saves come every ``learner.checkpoint_every``
        self.last_update = 0
        #: the audit ledger, once the learner opened one (a line per save)
        self.ledger: Any = None
        #: the first save a full disk refused: every later save raises it again at once, writing nothing
        self.disk_full: DiskFull | None = None

    def due(self) -> bool:
        every = self.config.learner.checkpoint_every
        return bool(every) and self.algo.updates - self.last_update >= every

    def save(self, name: str | None = None, extra: dict | None = None, files: dict[str, bytes] | None = None) -> Path:
        """A checkpoint now: periodic (``name`` None, the oldest pruned) or named. A full disk is a
        :class:`DiskFull` naming what was kept; it ends the node (``ends_node``, past the dispatcher)."""
        if self.disk_full is not None:
            raise self.disk_full
        tensors, algo_meta = self.algo.state_dict(include_replay=self.config.learner.checkpoint_replay)
        all_tensors = {f"algo/{k}": v for k, v in tensors.items()}
        rng_meta, rng_tensors = rng_state()
        all_tensors.update(rng_tensors)
        core = self.core
        meta = {
            "algo": algo_meta,
            "rng": rng_meta,
            "node": {
                "version": core.version,
                "updates": self.algo.updates,
                "samples_total": core.samples_total,
                "batches_total": core.batches_total,
                "last_seq": core.last_seqs(),
                "epoch": core.epoch,
                "time": time.time(),
            },
            "config": self.config.to_dict(),
            **(extra or {}),
        }
        self.last_update = self.algo.updates
        if self.ledger is not None:
            self.ledger.write("checkpoint", name=name or "periodic", updates=self.algo.updates)
        try:
            if name is None:
                return self.store.save_periodic(self.algo.updates, all_tensors, meta)
            return self.store.save_named(name, all_tensors, meta, files)
        except Exception as e:  # safetensors words a full disk as its own error, not an OSError
            if not is_disk_full(e):
                raise
            what = f"checkpoint {name or f'ckpt-{self.algo.updates:010d}'}"
            self.disk_full = DiskFull(disk_full_line(self.store.root.parent, what))
            raise self.disk_full from None

    def resume(self, now: float) -> str | None:
        """The newest checkpoint read back into the algorithm and the core; its path, or None when
        there is none (said in a warning: the run starts fresh)."""
        path = self.store.latest()
        if path is None:
            log.warning("resume requested but %s holds no checkpoint; starting fresh", self.store.root)
            return None
        tensors, meta = read_checkpoint(path)
        algo_tensors = {k[len("algo/") :]: v for k, v in tensors.items() if k.startswith("algo/")}
        self.algo.load_state_dict(algo_tensors, meta["algo"])
        node = meta["node"]
        core = self.core
        core.restore(node["version"], node["samples_total"], node["batches_total"], node.get("last_seq", {}), now=now)
        core.epoch = max(core.epoch, int(node.get("epoch", 0)) + 1)
        restore_rng(meta.get("rng", {}), tensors)
        self.last_update = self.algo.updates
        log.info("resumed from %s: version %d, %d updates", path, core.version, self.algo.updates)
        return str(path)


def disk_full_line(run_dir: Path, writing: str) -> str:
    """The learner's one line when a write (``writing``: what) found the disk full. Checkpoints are
    written to a temporary folder and renamed, so the ones before it are whole."""
    from mqttrl.state.run_dir import what_is_kept

    return f"the disk is full: {writing} not written; {what_is_kept(run_dir)}. Free space, then continue with --resume"
