"""The learner's pace: ``replay_ratio``, the update debt, the workers' pause and the backlog forgiven.

The pace is set by ``replay_ratio``: the mean number of times each sample is replayed,
``updates * batch_size / samples_added``. The learner trains while it is below that ratio, and
``behind()`` asks workers to pause when it owes more than ``max_update_debt`` updates, so a slow
learner sees the same data-to-update ratio as a fast one. A backlog (the broker handing over what
workers made during an outage) would owe minutes of updates and pause every worker that long;
updates owed beyond ``forgive_debt_above`` are forgiven instead (counted in ``updates_forgiven``):
those samples are replayed less often.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import DQNParams

#: a backlog is only forgiven beyond what this many batches of every sender owe (Pacing._forgive_above)
FORGIVE_BATCHES = 4


class Pacing:
    """The counts the pace is made of (updates, samples added, updates forgiven) and its rules."""

    def __init__(self, params: DQNParams):
        self.params = params
        #: gradient updates done
        self.updates = 0
        #: transitions ever added
        self.samples_added = 0
        #: updates owed beyond forgive_debt_above, written off (a backlog after an outage)
        self.forgiven = 0.0
        #: who sent batches and the most updates one batch owed (:meth:`_forgive_above`)
        self._senders: set[str] = set()
        self._batch_debt = 0.0
        self._paused = False

    def debt(self) -> float:
        """Updates owed to reach replay_ratio."""
        return self.samples_added * self.params.replay_ratio / self.params.batch_size - self.updates - self.forgiven

    def ratio(self) -> float:
        """The replay ratio reached: ``updates * batch_size / samples_added``."""
        return self.updates * self.params.batch_size / max(1, self.samples_added)

    def learning(self, size: int) -> bool:
        """Whether a replay of ``size`` transitions can be learned from (``learning_starts``, a batch)."""
        return size >= max(self.params.learning_starts, self.params.batch_size)

    def due(self, size: int) -> bool:
        return self.learning(size) and self.debt() > 0

    def behind(self, size: int) -> bool:
        """Whether the workers should pause: above max_update_debt, until half of it is paid off."""
        if not self.learning(size):  # nothing can be trained yet: pausing workers would deadlock
            return False
        # hysteresis: the retained flow message flips a few times a second at most, not on every batch
        debt = self.debt()
        if self._paused:
            self._paused = debt > self.params.max_update_debt / 2
        else:
            self._paused = debt > self.params.max_update_debt
        return self._paused

    def added(self, worker: str, n: int) -> None:
        """``worker`` sent ``n`` transitions: counted, and a backlog's excess debt forgiven."""
        self.samples_added += n
        over = self.debt() - self._forgive_above(worker, n)
        if over > 0:
            self.forgiven += over

    def _forgive_above(self, worker: str, n: int) -> float:
        """Updates owed beyond which a backlog is forgiven: ``forgive_debt_above``, but never less than
        what FORGIVE_BATCHES batches of every sender owe, plus what is left of the warm-up's debt (the
        samples before ``learning_starts``). At high replay ratios one batch owes hundreds of updates
        (256 transitions at ratio 64, batch 32: 512), and neither the batches still in flight when the
        workers are told to pause nor the warm-up are a backlog: forgiving them would lower the ratio."""
        p = self.params
        self._senders.add(worker)
        self._batch_debt = max(self._batch_debt, n * p.replay_ratio / p.batch_size)
        warmup = max(p.learning_starts, p.batch_size) * p.replay_ratio / p.batch_size - self.updates
        return max(p.forgive_debt_above, FORGIVE_BATCHES * len(self._senders) * self._batch_debt) + max(0.0, warmup)

    def state(self) -> dict[str, Any]:
        """The checkpoint's fields: a resumed learner caps the batches in flight at its restart as the
        killed one would, not as a learner that met no sender yet."""
        return {
            "updates": self.updates,
            "samples_added": self.samples_added,
            "updates_forgiven": self.forgiven,
            "forgive_senders": sorted(self._senders),
            "forgive_batch_debt": self._batch_debt,
        }

    def load(self, meta: Mapping[str, Any]) -> None:
        self.updates = int(meta["updates"])
        self.samples_added = int(meta["samples_added"])
        self.forgiven = float(meta.get("updates_forgiven", 0.0))
        self._senders = {str(s) for s in meta.get("forgive_senders", ())}
        self._batch_debt = float(meta.get("forgive_batch_debt", 0.0))
