"""The best model's score: stored beside it (``score.json``) so that every node, restarted or not,
replaces a best model only with a better one.

Two kinds of score exist. ``greedy_eval``: the mean return of an evaluator's greedy episodes
with one model version (what ``mqttrl enjoy`` will see). ``training_returns``: the moving
average of the workers' exploring episodes, a noisy stand-in used only when no evaluator runs.
A greedy-eval score beats any training-returns score; within one kind, the higher score wins.

``score.json`` is ``{"score": float, "model_version": int, "judged_by": "greedy_eval" |
"training_returns", "episodes": int, "model_epoch": int}``; it travels on the wire under the same
keys (the learner's retained state, quicksave commands). ``model_epoch`` and ``model_version``
name the model (:class:`~mqttrl.wire.model_ref.ModelRef`); a score without the epoch (written
before it was kept) reads as epoch 0, which matches its version in any epoch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mqttrl.state.checkpoint import write_dir_atomically
from mqttrl.wire.model_ref import EPOCH_LIMIT, ModelRef

SCORE_FILE = "score.json"
GREEDY_EVAL = "greedy_eval"
TRAINING_RETURNS = "training_returns"
#: the kinds of score, weakest first
KINDS = (TRAINING_RETURNS, GREEDY_EVAL)


@attrs.frozen
class BestScore:
    score: float
    model_version: int
    judged_by: str
    episodes: int
    #: the learner epoch of the model scored (0: not known, any epoch's model of the version)
    model_epoch: int = 0

    @property
    def ref(self) -> ModelRef:
        """The model scored."""
        return ModelRef(self.model_epoch, self.model_version)

    def beats(self, other: BestScore | None) -> bool:
        """Whether this score should replace ``other`` (None: no best yet)."""
        if other is None:
            return True
        return (KINDS.index(self.judged_by), self.score) > (KINDS.index(other.judged_by), other.score)

    def to_json(self) -> dict[str, Any]:
        """Its JSON form; ``model_epoch`` only where known (a file as before it was kept, else)."""
        data = attrs.asdict(self)
        if not self.model_epoch:
            del data["model_epoch"]
        return data

    def point_fields(self) -> dict[str, float | int]:
        """Telemetry's ``best`` point (docs/telemetry.md): the score and the model, its epoch where known."""
        fields: dict[str, float | int] = {"mean_return": self.score, "model_version": self.model_version}
        if self.model_epoch:
            fields["model_epoch"] = self.model_epoch
        return fields

    def describe(self) -> str:
        how = "greedy evaluation" if self.judged_by == GREEDY_EVAL else "training returns"
        return f"{self.score:.1f} by {how} over {self.episodes} episodes (model {self.ref})"

    @classmethod
    def from_json(cls, data: Any) -> BestScore | None:
        """A score from its JSON form; None when ``data`` is not one (missing keys, wrong types)."""
        if not isinstance(data, Mapping):
            return None
        score, version, kind, episodes = (data.get(k) for k in ("score", "model_version", "judged_by", "episodes"))
        epoch = data.get("model_epoch", 0)
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
            return None
        if not isinstance(version, int) or kind not in KINDS:
            return None
        episodes = episodes if isinstance(episodes, int) and not isinstance(episodes, bool) else 0
        epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and 0 <= epoch < EPOCH_LIMIT else 0
        return cls(float(score), version, kind, episodes, epoch)


def read_score(directory: Path) -> BestScore | None:
    """The score stored in ``directory`` (a ``best/`` folder); None when there is none or it is unreadable.

    A ``checkpoints/best/`` written before scores were stored has only ``best.json``
    (telemetry's moving average): it reads as a training-returns score."""
    directory = Path(directory)
    for name in (SCORE_FILE, "best.json"):
        try:
            data = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue
        if name == "best.json" and isinstance(data, dict):
            data = {
                "score": data.get("mean_return"),
                "model_version": data.get("model_version"),
                "judged_by": TRAINING_RETURNS,
                "episodes": data.get("window"),
            }
        found = BestScore.from_json(data)
        if found is not None:
            return found
    return None


def score_file(score: BestScore) -> bytes:
    """``score.json``'s content."""
    return json.dumps(score.to_json(), indent=1).encode()


def write_best_dir(directory: Path, files: Mapping[str, bytes]) -> Path:
    """Replace ``directory`` with one holding exactly ``files``, atomically: written to a temporary
    folder beside it, synced, then renamed into place (weights and score never disagree)."""

    def fill(tmp: Path) -> None:
        for name, data in files.items():
            (tmp / name).write_bytes(data)

    return write_dir_atomically(directory, fill)
