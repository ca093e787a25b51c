"""Which model: ``ModelRef(epoch, version)``, ordered as every receiver orders weights.

A learner numbers its models from its checkpoint's version, and a learner that restarts opens a
new epoch (:mod:`.weights`): when the broker lost the retained weights and the learner resumed
from an older checkpoint, the new epoch's versions are lower than the old ones'. So a version
alone does not name a model, and "newer" is epoch first, then version. Every record that names a
model (weights, evaluations, best-model requests, eval schedules) names it by this pair.

Epoch 0 is what a sender that names no epoch reads as (weights and evaluations from before the
epoch was carried, as the learner's batch check reads it): such a reference matches any epoch's
model of its version (:meth:`ModelRef.matches`).
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen(order=True)
class ModelRef:
    """One model of a run: the learner epoch that published it, then its version (compared in that order)."""

    epoch: int
    version: int

    @classmethod
    def of(cls, model: Any) -> ModelRef:
        """The reference of ``model``: a ModelRef, an ``(epoch, version)`` pair, anything with
        ``.epoch``/``.version`` (decoded weights), or a bare version (an older caller: epoch 0)."""
        if isinstance(model, ModelRef):
            return model
        if isinstance(model, tuple):
            return cls(int(model[0]), int(model[1]))
        if isinstance(model, int):
            return cls(0, model)
        return cls(int(getattr(model, "epoch", 0)), int(model.version))

    def matches(self, other: ModelRef) -> bool:
        """Whether both name the same model: the same pair, or the same version where either names
        no epoch (epoch 0: a sender older than the epoch's field)."""
        return self == other or (self.version == other.version and 0 in (self.epoch, other.epoch))

    def __str__(self) -> str:
        return f"v{self.version} (epoch {self.epoch})" if self.epoch else f"v{self.version}"


#: an epoch is below this (the weights', batches' and evaluations' checks)
EPOCH_LIMIT = 2**62

#: no model yet: below every model's reference
NO_MODEL = ModelRef(-1, -1)


def newest_match(refs: Any, wanted: ModelRef) -> ModelRef | None:
    """Of ``refs``, the model ``wanted`` names (the newest where it names no epoch), or None."""
    if wanted in refs:
        return wanted
    return max((r for r in refs if wanted.matches(r)), default=None)
