"""A greedy evaluation, as ``mqttrl/<run>/eval/<name>`` carries it: one record, both sides.

The evaluator node and a worker evaluating on its own game (``[train] eval_on = "workers"``)
publish it; the evaluator listening for the workers' results, telemetry and ``mqttrl train``'s
record read it. All of them encode and decode it here, so a field or a check is written once:
a result without a finite number for any of ``mean``, ``std``, ``min``, ``max``, ``eval_s``, or
with a negative count, is refused (counted, logged by the receiver's dispatcher).

The model is named by ``model_version`` and ``model_epoch`` (:class:`~.model_ref.ModelRef`): a
resumed learner's new epoch numbers its models lower than the old epoch's. A result without
``model_epoch`` (a sender older than it) reads as epoch 0, which matches its version in any epoch.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from .control import decode_json, encode_json
from .errors import Rejected
from .model_ref import EPOCH_LIMIT, ModelRef

#: the float fields every evaluation carries
_NUMBERS = ("mean", "std", "min", "max", "eval_s")
#: optional fields: the data the model was trained on, and the evaluator's own clocks
_OPTIONAL = {"env_steps": int, "wall_s": float, "training_s": float}


@attrs.frozen
class Evaluation:
    """Greedy episodes of one model: their returns' mean, std, min and max."""

    model_version: int
    episodes: int
    mean: float
    std: float
    min: float
    max: float
    #: seconds the episodes took
    eval_s: float
    #: env steps the model was trained on (the learner's count in its weights' info): curves by env step
    env_steps: int | None = None
    #: seconds since the evaluator started, and from the run's first model to this one's publication
    wall_s: float | None = None
    training_s: float | None = None
    #: the learner epoch of the model (0: a sender that names none)
    model_epoch: int = 0

    @property
    def model(self) -> ModelRef:
        """Which model was evaluated."""
        return ModelRef(self.model_epoch, self.model_version)

    @classmethod
    def of_returns(
        cls, model: int | ModelRef, returns: list[float], eval_s: float, env_steps: int | None = None
    ) -> Evaluation:
        """The evaluation of ``returns`` (one per greedy episode) of ``model`` (a bare version: epoch 0)."""
        import numpy as np

        ref = ModelRef.of(model)
        r = np.asarray(returns, dtype=np.float64)
        return cls(
            ref.version,
            len(returns),
            float(r.mean()),
            float(r.std()),
            float(r.min()),
            float(r.max()),
            round(eval_s, 3),
            env_steps,
            model_epoch=ref.epoch,
        )

    def to_json(self) -> dict[str, Any]:
        """The message's fields (the optional ones only where known; ``model_epoch`` where not 0)."""
        fields = attrs.asdict(self)
        return {
            k: v for k, v in fields.items() if (v is not None or k not in _OPTIONAL) and (k, v) != ("model_epoch", 0)
        }

    def encode(self) -> bytes:
        return encode_json(self.to_json())

    def point_fields(self) -> dict[str, float | int]:
        """The fields of telemetry's ``eval`` point (docs/telemetry.md's table, held by a test):
        the returns' figures, the model version and episodes, and ``env_steps`` where known."""
        fields: dict[str, float | int] = {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max}
        fields |= {"model_version": self.model_version, "episodes": self.episodes}
        if self.env_steps is not None:  # the data the model was trained on
            fields["env_steps"] = self.env_steps
        return fields

    @classmethod
    def decode(cls, payload: bytes) -> Evaluation:
        """The record in ``payload``, or :class:`Rejected` naming what is wrong."""
        data = decode_json(payload, {"model_version": int, "episodes": int, "mean": (int, float)})
        for key in _NUMBERS:
            value = data.get(key)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise Rejected("missing_field", f"eval result without a number {key!r}")
            if not math.isfinite(value):
                raise Rejected("non_finite", f"eval result {key}={value!r}")
        if data["model_version"] < 0 or data["episodes"] < 1:
            raise Rejected(
                "bad_value", f"eval result of model {data['model_version']} over {data['episodes']} episodes"
            )
        optional: dict[str, Any] = {}
        for key, typ in _OPTIONAL.items():
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                optional[key] = typ(value)
        epoch = data.get("model_epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < EPOCH_LIMIT:
            raise Rejected("bad_value", f"eval result of model epoch {epoch!r}")
        mean, std, low, high, eval_s = (float(data[k]) for k in _NUMBERS)
        return cls(data["model_version"], data["episodes"], mean, std, low, high, eval_s, **optional, model_epoch=epoch)
