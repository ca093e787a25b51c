"""Takeovers as demonstrations (issue 45; HIL-SERL, Luo et al. 2024; DQfD, Hester et al. 2018): the
transitions whose first step a person took (the batches' optional ``intervention`` field, which the
worker's actor sets where the env reported ``info["demo_action"]``) are learned from as
demonstrations, twice over:

- in the ring, flagged: every update adds DQfD's large-margin loss over its batch's flagged rows,
  summed over them and divided by the batch (DQfD's masked supervised loss), weighted by
  ``takeover_margin_loss``: the person's action is pushed above the others' by ``takeover_margin``;
- in the protected part of replay (:class:`~.demo_replay.DemoReplay`, never evicted by the agent's
  own steps, as HIL-SERL's demonstration buffer and DQfD's demonstrations are): up to
  ``takeover_keep`` of them, ``takeover_ratio`` of each batch drawn from there (with the margin
  loss); with ``mqttrl train --demos`` they join that dataset's part (its ratio and margin).

The protected part is not checkpointed: a resumed learner keeps the takeovers its ring still holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .demo_replay import DemoReplay, large_margin
from .losses import LossOutput


class Takeovers:
    """The learner's part in learning from takeovers: counting them, protecting them, the loss."""

    def __init__(self, params: Any, seed: int = 0):
        self.weight, self.margin = params.takeover_margin_loss, params.takeover_margin
        self.keep, self.ratio = params.takeover_keep, params.takeover_ratio
        self.seed = seed
        #: transitions taken in that a person took over; the loss runs once there are any
        self.transitions = 0

    def added(self, arrays: Any, idx: np.ndarray, replay: Any, demos: DemoReplay | None) -> DemoReplay | None:
        """A batch's rows went into ``replay`` at ring slots ``idx`` (its newest, where the ring is
        smaller): its takeovers counted and copied to the protected part; that part (``demos``, or a
        new one for the first takeovers of a run without demonstrations)."""
        person = arrays.get("intervention")
        if person is None or not len(idx):
            return demos
        taken = idx[np.asarray(person[-len(idx) :]) != 0]
        self.transitions += len(taken)
        if not len(taken) or self.keep <= 0:
            return demos
        rows = {k: v for k, v in replay.sample(taken).items() if k != "intervention"}
        if demos is None:
            empty = {k: v[:0] for k, v in rows.items()}
            rng = np.random.default_rng(self.seed)
            demos = DemoReplay(empty, self.ratio, self.weight, self.margin, rng, fixed=0)
        demos.append(rows, self.keep)
        return demos

    def with_loss(self, out: LossOutput, net, batch: dict, person) -> LossOutput:
        """``out`` with the margin loss on ``batch``'s rows a person took over (``person``: the
        batch's 0/1 flags, or None); only those rows go through ``net`` again."""
        if person is None or not self.transitions or self.weight <= 0:
            return out
        import torch

        rows = torch.nonzero(person, as_tuple=True)[0]
        if len(rows) == 0:
            return out
        term = large_margin(net(batch["obs"][rows]), batch["action"][rows], self.margin).sum() / len(person)
        return out._replace(loss=out.loss + self.weight * term)

    def report(self, metrics: dict[str, float]) -> None:
        if self.transitions:
            metrics["takeover_transitions"] = float(self.transitions)
