"""Prioritized replay's side of the learner (Schaul et al. 2016, as Ape-X uses it): priorities in
with the samples, importance weights out with a batch, the replayed samples' new priorities.

The priorities live on the host's :class:`~.replay.SumTree`, or on the device replay
(:mod:`.device_replay`) when the replay is there; without ``prioritized`` there is neither, and
only the highest priority seen (a checkpoint field) is kept. Priorities are ``(p + per_eps) **
per_alpha`` of one scale for actors and learner: the expected |TD error| (see
``DQNParams.initial_priority``), a distributional head's own loss only when the actors send none.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from mqttrl.plugin import SampleBatch

from .common import DQNParams, actor_priorities
from .device_replay import DeviceReplay
from .replay import SumTree


class Priorities:
    """Where the priorities are (``tree`` or ``device_replay``, or neither) and their rules."""

    def __init__(self, params: DQNParams, capacity: int, device: DeviceReplay | None):
        self.params = params
        self.capacity = capacity
        #: the device replay, when it holds the priorities
        self.device_replay = device if device is not None and device.priorities is not None else None
        self.tree = SumTree(capacity) if params.prioritized and device is None else None
        #: new samples get the highest priority seen so far (already ** alpha)
        self.max_priority = 1.0
        #: the sample's own loss as its priority (a distributional head whose actors send none)
        self.from_loss = params.distributional != "none" and not actor_priorities(params)

    def beta(self, updates: int) -> float:
        """The importance weights' exponent, annealed from ``per_beta0`` to 1 over ``per_beta_updates``."""
        p = self.params
        return p.per_beta0 + (1.0 - p.per_beta0) * min(1.0, updates / p.per_beta_updates)

    def added(self, batch: SampleBatch, n: int, idx: np.ndarray) -> None:
        """The ring slots ``idx`` hold the newest rows of ``batch`` (of ``n``): their first priorities."""
        if self.tree is not None:
            self.tree.set(idx, self._initial(batch, n, len(idx)))
        elif self.device_replay is not None:
            rows = torch.from_numpy(idx).to(self.device_replay.device, non_blocking=True)
            if "priority" in batch.arrays:
                self.device_replay.set_priorities(rows, torch.from_numpy(self._initial(batch, n, len(idx))))
            else:
                self.device_replay.set_max_priority(rows)

    def _initial(self, batch: SampleBatch, n: int, m: int) -> np.ndarray:
        """Priorities of the ``m`` newest rows of a batch of ``n``: the actors' TD errors (Ape-X) when
        they send them, else the highest priority so far."""
        sent = batch.arrays.get("priority")
        if sent is None:
            return np.full(m, self.max_priority)
        prio = (np.asarray(sent[n - m :], np.float64) + self.params.per_eps) ** self.params.per_alpha
        self.max_priority = max(self.max_priority, float(prio.max(initial=0.0)))
        return prio

    def sample(
        self, rng: np.random.Generator, size: int, batch_size: int, beta: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(indices, importance-sampling weights) of a batch from the sum tree: stratified, one draw
        per segment of the total mass; weights ``(N P(i))^-beta / max_j (N P(j))^-beta``."""
        assert self.tree is not None  # prioritized on the host: the learner samples here only then
        mass = (np.arange(batch_size) + rng.random(batch_size)) * (self.tree.total() / batch_size)
        idx = np.minimum(self.tree.find(mass), size - 1)
        weights = (self.tree.get(idx) / self.tree.min(size)) ** (-beta)
        return idx, weights

    def replayed_on_device(self, idx: torch.Tensor, elementwise: torch.Tensor, td_abs: torch.Tensor) -> None:
        """The replayed samples' new priorities on the device (queued; nothing read back)."""
        if self.device_replay is not None:
            err = elementwise.detach().double() if self.from_loss else td_abs.double()
            self.device_replay.set_priorities(idx, (err.clamp(min=0.0) + self.params.per_eps) ** self.params.per_alpha)

    def replayed_on_host(self, idx: np.ndarray, elementwise: torch.Tensor, td_abs: torch.Tensor) -> None:
        """The replayed samples' new priorities in the sum tree (a read back from the device)."""
        if self.tree is None:
            return
        p = self.params
        err = elementwise.detach() if self.from_loss else td_abs
        prio = (np.maximum(err.cpu().numpy().astype(np.float64), 0.0) + p.per_eps) ** p.per_alpha
        self.tree.set(idx, prio)
        self.max_priority = max(self.max_priority, float(prio.max()))

    def highest(self) -> float:
        """The highest priority seen, the device's running maximum included (a checkpoint's)."""
        if self.device_replay is not None:
            self.max_priority = max(self.max_priority, float(self.device_replay.max_priority))
        return self.max_priority

    def saved(self, size: int) -> dict[str, np.ndarray]:
        """The replay's ``size`` priorities for a checkpoint (none without prioritization)."""
        if self.tree is not None:
            return {"replay.priorities": self.tree.get(np.arange(size)).copy()}
        if self.device_replay is not None:
            return {"replay.priorities": self.device_replay.priorities_host()}
        return {}

    def load(self, tensors: Mapping[str, np.ndarray], n: int) -> None:
        """A checkpoint's ``n`` priorities (a replay saved without them: all at the highest)."""
        saved = tensors.get("replay.priorities")
        prio = np.asarray(saved, np.float64) if saved is not None else np.full(n, self.max_priority)
        if self.tree is not None:
            self.tree = SumTree(self.capacity)
            self.tree.set(np.arange(n), prio)
        elif self.device_replay is not None:
            dr = self.device_replay
            dr.max_priority = torch.tensor(self.max_priority, dtype=torch.float64, device=dr.device)
            assert dr.priorities is not None  # kept as device_replay only with priorities (__init__)
            dr.priorities.zero_()
            dr.set_priorities(torch.arange(n, device=dr.device), torch.from_numpy(prio))
