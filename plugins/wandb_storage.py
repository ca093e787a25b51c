"""Built-in storage ``wandb``: a Weights & Biases run per mqttrl run, logged off telemetry's loop.

``mqttrl-telemetry --storage wandb`` starts ``wandb.init(project=..., name=<run>, config=<the
run's config>)`` at the first point and logs every measurement under the names of
:mod:`mqttrl.plugin.scalar_storage` (``episode/return``, ``worker/w0/return``, ``eval/mean``,
``learner/loss``, ``throughput/samples_per_s`` ...), each row with its step (``env_steps`` by
default, declared as the x axis of every chart). The config is the learner's retained ``config``
message, which telemetry hands over (``run_config``); a config that arrives after the run started
updates the W&B run's config.

Options (option, else environment variable): ``project`` (WANDB_PROJECT, default ``mqttrl``),
``entity`` (WANDB_ENTITY), ``name`` (default: the mqttrl run name), ``group``, ``tags``
(comma-separated), ``dir`` (WANDB_DIR; wandb writes ``<dir>/wandb/``; ``mqttrl train`` passes the
run directory), ``mode`` (``online``, ``offline``, ``disabled``; default: wandb's own, i.e.
WANDB_MODE, else online), and the options of :class:`~mqttrl.plugin.scalar_storage.ScalarStorage`
(``step``, ``flush_every_s``, ``max_pending``, ``close_timeout_s``).

Needs ``pip install 'mqttrl[wandb]'``. Online mode needs ``wandb login`` (or WANDB_API_KEY); with
``WANDB_MODE=offline`` the run is written to ``<dir>/wandb/offline-run-*`` and ``wandb sync`` uploads
it later. ``wandb.init`` (a second or two: it starts wandb's service process), ``log`` and ``finish``
all run on the storage's own thread; ``write`` only maps and queues. A run that cannot start (no
API key, no network) is logged once with what to do and tried again every ``retry_s`` (30 s); the
points wait meanwhile (up to ``max_pending``), and any still waiting at close are reported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from mqttrl import hookimpl
from mqttrl.plugin import Scalars, ScalarStorage, Storage

log = logging.getLogger("mqttrl.storage.wandb")


class WandbStorage(ScalarStorage):
    """A :class:`mqttrl.plugin.storage.Storage` logging to one Weights & Biases run."""

    thread_name = "wandb-storage"

    def __init__(self, settings: dict):
        try:
            import wandb
        except ImportError:
            raise ImportError("the wandb storage needs wandb: pip install 'mqttrl[wandb]'") from None
        self._wandb = wandb
        get = lambda key, env, default=None: settings.get(key) or os.environ.get(env) or default  # noqa: E731
        self.project = get("project", "WANDB_PROJECT", "mqttrl")
        self.entity = get("entity", "WANDB_ENTITY")
        self.name = settings.get("name") or None
        self.group = settings.get("group") or None
        self.tags = [t.strip() for t in str(settings.get("tags", "")).split(",") if t.strip()] or None
        self.dir = get("dir", "WANDB_DIR")
        self.mode = settings.get("mode") or None
        self.config: dict = {}
        self.run: wandb.Run | None = None  # the wandb Run, once started
        self._run_name: str | None = None
        self._other_runs: set[str] = set()
        #: failed wandb.init calls
        self.start_failures = 0
        super().__init__(settings, log)

    def _ready(self, scalars: list[Scalars]) -> bool:
        if self.run is None:
            self._start(scalars[0].run)
        return self.run is not None

    def _start(self, run: str) -> None:
        wandb = self._wandb
        if self.dir:
            Path(self.dir).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                project=self.project,
                entity=self.entity,
                name=self.name or run or None,
                group=self.group,
                tags=self.tags,
                dir=self.dir,
                mode=self.mode,
                config=self.config,
                reinit="create_new",  # several storages (or runs) in one process each get a run of their own
                # leave telemetry's stdout and stderr alone, and keep wandb's own output short
                settings=wandb.Settings(console="off", quiet=True),
            )
        except Exception as e:
            self.start_failures += 1
            (log.error if self.start_failures == 1 else log.debug)(
                "wandb.init failed (%s: %s); points are kept (up to max_pending) and it is tried again "
                "every %.0f s. Log in (wandb login, or WANDB_API_KEY), or set WANDB_MODE=offline and "
                "upload later with wandb sync",
                type(e).__name__,
                e,
                self.retry_s,
            )
            return
        self._run_name = run
        axis = self.mapper.step_axis
        self.run.define_metric(axis)
        self.run.define_metric("*", step_metric=axis)  # every chart plots against the step axis
        log.info("W&B run %s (%s) for run %s, mode %s", self.run.name, self.run.id, run, self.mode or "wandb default")

    def _config(self, config: dict) -> None:
        self.config = config
        if self.run is not None:
            self.run.config.update(config, allow_val_change=True)

    def _emit(self, s: Scalars) -> None:
        if s.run != self._run_name:  # one W&B run per storage: telemetry watches one run
            if s.run not in self._other_runs:
                self._other_runs.add(s.run)
                log.warning("wandb storage logs run %s; points of run %s are left out", self._run_name, s.run)
            return
        assert self.run is not None  # _start set it with _run_name
        self.run.log({**s.values, self.mapper.step_axis: s.step})

    def _finish(self) -> None:
        if self.run is not None:
            self.run.finish()


@hookimpl
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    register(
        "wandb",
        WandbStorage,
        "a Weights & Biases run per mqttrl run (options: project, entity, name, dir, mode); needs mqttrl[wandb]",
    )
