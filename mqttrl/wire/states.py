"""The nodes' retained states (``state/worker/<name>``, ``state/learner``): who is there, as what.

A node publishes ``online`` on every connect, leaves ``offline`` as its last will and on a clean
exit; a learner waiting for its env spec is ``waiting``. The learner reads the workers' states
(membership), workers the learner's (its liveness), telemetry and ``mqttrl status`` both.
"""

from __future__ import annotations

import attrs

from .record import JsonRecord, wire_field


@attrs.define
class WorkerState(JsonRecord):
    """A worker's birth, last will or goodbye."""

    status: str = wire_field("`online` or `offline`")
    reason: str = wire_field("why offline (`connection lost`, `stopped`, ...); empty when online", "")
    worker: str | None = wire_field("the worker's name", None)
    incarnation: str | None = wire_field("this process's id: a new one restarts its sequence numbers", None)
    host: str | None = wire_field("the host it runs on", None)
    pid: int | None = wire_field("its process id", None)
    index: int | None = wire_field("its `--index` (placeholders, ports), if given", None)
    num_envs: int | None = wire_field("its envs, where set on its command line", None)
    mqttrl: str | None = wire_field("its mqttrl version", None)
    protocol: int | None = wire_field("the wire protocol it speaks", None)
    time: float | None = wire_field("its wall clock when sent", None)

    @property
    def online(self) -> bool:
        return self.status == "online"


@attrs.define
class LearnerState(JsonRecord):
    """The learner's birth, last will or goodbye, with the best model's score."""

    status: str = wire_field("`online`, `waiting` (for the env spec) or `offline`")
    reason: str = wire_field("why waiting or offline; empty when online", "")
    run: str | None = wire_field("the run's name", None)
    algorithm: str | None = wire_field("the algorithm plugin", None)
    mode: str | None = wire_field("`async` (off-policy) or `sync` (rounds)", None)
    model_version: int | None = wire_field("its newest model version (-1 before the first)", None)
    epoch: int | None = wire_field("this learner process's epoch", None)
    updates: int | None = wire_field("gradient updates so far", None)
    host: str | None = wire_field("the host it runs on", None)
    pid: int | None = wire_field("its process id", None)
    mqttrl: str | None = wire_field("its mqttrl version", None)
    protocol: int | None = wire_field("the wire protocol it speaks", None)
    time: float | None = wire_field("its wall clock when sent", None)
    best: dict | None = wire_field(
        "the best model's score (`checkpoints/best/score.json`): a telemetry host started later learns it",
        None,
        omit_none=True,
    )

    @property
    def online(self) -> bool:
        return self.status == "online"


@attrs.define
class InferenceState(JsonRecord):
    """An inference server's birth or last will: workers with ``remote`` forwards pick servers by it."""

    status: str = wire_field("`online` or `offline` (a cleared state reads as gone)")
    server: str | None = wire_field("the server's name", None)
    shared: bool | None = wire_field("it reads the shared subscription (MQTT 5): requests need not name it", None)
    host: str | None = wire_field("the host it runs on", None)
    pid: int | None = wire_field("its process id", None)
    batch_size: int | None = wire_field("the most rows it evaluates in one forward", None)
    time: float | None = wire_field("its wall clock when sent", None)

    @property
    def online(self) -> bool:
        return self.status == "online"
