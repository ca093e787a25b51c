"""A learner core without a broker, and the sample payloads its tests feed it (tests/test_learner_core.py, test_learner_membership.py, test_protocol_mismatch.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mqttrl.nodes.learner.core import LearnerCore, LearnerRules
from mqttrl.wire import (
    FieldSpec,
    Rejected,
    SampleBatch,
    SampleSpec,
    encode_batch,
    encode_json,
)

RUN = "core-test"


SPEC = SampleSpec({"obs": FieldSpec("float32", (2,)), "action": FieldSpec("int64", (), low=0, high=1)})


# ---- fakes and helpers -----------------------------------------------------------
class _Common:
    def __init__(self) -> None:
        self.updates = 0

    def export_weights(self):
        return {}, {}

    def state_dict(self, include_replay: bool):
        return {}, {}

    def load_state_dict(self, tensors, meta) -> None:
        pass


class FakeAsync(_Common):
    """An AsyncLearner: a step is due per 2 unconsumed batches; behind at 4 or more."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[SampleBatch] = []
        self.consumed = 0

    def add(self, batch: SampleBatch) -> int:
        self.added.append(batch)
        return batch.count

    def train_due(self) -> bool:
        return len(self.added) - self.consumed >= 2

    def behind(self) -> bool:
        return len(self.added) - self.consumed >= 4

    def train_step(self) -> dict[str, float]:
        self.consumed = len(self.added)
        self.updates += 1
        return {"loss": 0.5}


class FakeSync(_Common):
    """A SyncLearner: records every round it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[list[SampleBatch]] = []

    def train_round(self, batches: list[SampleBatch]) -> dict[str, float]:
        self.rounds.append(list(batches))
        self.updates += 4
        return {"loss": 0.25}


def make(mode: str = "async", now: float = 0.0, **rules):
    learner = FakeAsync() if mode == "async" else FakeSync()
    rules.setdefault("weights_every_s", 0.0)  # the fake clock stands still: versions by updates alone
    core = LearnerCore.create(LearnerRules(run=RUN, **rules), SPEC, mode, learner, now)
    return core, learner


def payload(worker, seq, version, count=3, run=RUN, sender=None, nan=False, action=0, incarnation="", epoch=0) -> bytes:
    obs = np.zeros((count, 2), np.float32)
    if nan:
        obs[0, 0] = np.nan
    arrays = {"obs": obs, "action": np.full(count, action, np.int64)}
    return encode_batch(run, sender or worker, seq, version, arrays, incarnation=incarnation, epoch=epoch)


def birth(core, worker, now=0.0, incarnation=None):
    state = {"status": "online", "host": "h", "pid": 1}
    if incarnation is not None:
        state["incarnation"] = incarnation
    core.on_worker_state(worker, encode_json(state), now)


def reason(fn, *args) -> str:
    with pytest.raises(Rejected) as e:
        fn(*args)
    return e.value.reason
