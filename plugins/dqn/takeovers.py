"""Takeovers as demonstrations (issue 45; HIL-SERL, Luo et al. 2024; DQfD, Hester et al. 2018): the
transitions whose first step a person took (the batches' optional ``intervention`` field, which the
worker's actor sets where the env reported ``info["demo_action"]``) are kept flagged in replay, and
every update adds DQfD's large-margin loss over the flagged rows of its batch, summed over them and
divided by the batch (DQfD's masked supervised loss), weighted by ``takeover_margin_loss``: the
person's action is pushed above the others' by ``takeover_margin`` where they took over."""

from __future__ import annotations

from typing import Any

import numpy as np

from .demo_replay import large_margin
from .losses import LossOutput


class Takeovers:
    """The learner's part in learning from takeovers: counting them, the loss, the metric."""

    def __init__(self, weight: float, margin: float):
        self.weight, self.margin = weight, margin
        #: transitions taken in that a person took over; the loss runs once there are any
        self.transitions = 0

    def added(self, arrays: Any, kept: int) -> None:
        """A batch's rows went into replay (its newest ``kept``, where the ring is smaller)."""
        person = arrays.get("intervention")
        if person is not None and kept:
            self.transitions += int(np.count_nonzero(person[-kept:]))

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
