"""Built-in storage ``tensorboard``: TensorBoard event files (scalars), written off telemetry's loop.

``mqttrl-telemetry --storage tensorboard`` writes every measurement as TensorBoard scalars
named as :mod:`mqttrl.plugin.scalar_storage` says (``episode/return``, ``worker/w0/return``,
``eval/mean``, ``learner/loss``, ``throughput/samples_per_s`` ...), on the ``env_steps`` axis
(option ``step``), with the points' wall-clock times. ``tensorboard --logdir tensorboard`` shows them.

Options: ``dir`` (default ``tensorboard``: events go to ``<dir>/<run>/``, one TensorBoard run per
mqttrl run), ``logdir`` (the exact directory instead; ``mqttrl train`` passes
``<run dir>/tensorboard``), and the options of :class:`~mqttrl.plugin.scalar_storage.ScalarStorage`
(``step``, ``flush_every_s``, ``max_pending``, ``close_timeout_s``).

The writer is tensorboardX's (``pip install 'mqttrl[tensorboard]'``: tensorboardX, numpy and
protobuf, a few MB), not ``torch.utils.tensorboard`` (needs torch, which a telemetry host need not
have) nor the ``tensorboard`` package's (its install brings grpcio, werkzeug and TensorBoard's web
server, tens of MB, to a host that only writes files). The files are TensorBoard's own format: the
``tensorboard`` viewer, anywhere, reads them. ``write`` only maps and queues (microseconds); the
event records are built and written by the storage's own thread (tensorboardX adds one more that
writes the file).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqttrl import hookimpl
from mqttrl.plugin import Scalars, ScalarStorage, Storage

log = logging.getLogger("mqttrl.storage.tensorboard")


class TensorBoardStorage(ScalarStorage):
    """A :class:`mqttrl.plugin.storage.Storage` writing TensorBoard event files through tensorboardX."""

    thread_name = "tensorboard-storage"

    def __init__(self, settings: dict):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("the tensorboard storage needs tensorboardX: pip install 'mqttrl[tensorboard]'") from None
        self._summary_writer = SummaryWriter
        self.logdir = Path(settings["logdir"]) if settings.get("logdir") else None
        self.dir = Path(settings.get("dir", "tensorboard"))
        self._writers: dict[str, Any] = {}  # run -> tensorboardX's SummaryWriter (untyped)
        super().__init__(settings, log)

    def logdir_of(self, run: str) -> Path:
        """Where the events of ``run`` go: ``logdir``, else ``<dir>/<run>``."""
        return self.logdir if self.logdir is not None else self.dir / (run or "run")

    def _writer(self, run: str):
        w = self._writers.get(run)
        if w is None:
            path = self.logdir_of(run)
            path.mkdir(parents=True, exist_ok=True)
            w = self._writers[run] = self._summary_writer(
                logdir=str(path), flush_secs=max(1, round(self.flush_every_s)), max_queue=1000
            )
            log.info("TensorBoard events of run %s in %s", run, path)
        return w

    def _emit(self, s: Scalars) -> None:
        w = self._writer(s.run)
        for tag, value in s.values.items():
            w.add_scalar(tag, value, global_step=s.step, walltime=s.time)

    def _flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def _finish(self) -> None:
        for w in self._writers.values():
            w.close()  # flushes the event file


@hookimpl
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    register(
        "tensorboard",
        TensorBoardStorage,
        "TensorBoard event files, one run per mqttrl run (options: dir, logdir, step); needs mqttrl[tensorboard]",
    )
