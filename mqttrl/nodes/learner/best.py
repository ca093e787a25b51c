"""Which model ``checkpoints/best/`` holds, and whether a quicksave named best may replace it.

Telemetry (or an operator) asks the learner to save the best model with the score a greedy
evaluation (or older telemetry's training returns) gave a model version. The learner keeps the
exact weights of its recent versions, so the one judged is the one saved, and never replaces a
better-scored best with a worse one, whoever asks. Pure logic: the node writes the files and
publishes its state.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs

from mqttrl.state.best import SCORE_FILE, TRAINING_RETURNS, BestScore, score_file

#: recent model versions whose exact weights are kept for a best-model save
RECENT_MODELS = 32


@attrs.define
class BestSave:
    """What a granted save writes: the version saved, ``best.json``'s info, the files, the score."""

    version: int
    info: dict[str, Any]
    files: dict[str, bytes]
    score: BestScore | None


class BestModels:
    """The best model's score (read back at start) and the recent versions' exact weights."""

    def __init__(self, score: BestScore | None, keep: int = RECENT_MODELS):
        self.score = score
        self.keep = keep
        #: the last published weights by version, so a best-model save writes the model that was judged
        self.recent: OrderedDict[int, bytes] = OrderedDict()

    def remember(self, version: int, payload: bytes) -> None:
        """The exact published weights of ``version`` (the oldest beyond ``keep`` are forgotten)."""
        self.recent[version] = payload
        while len(self.recent) > self.keep:
            self.recent.popitem(last=False)

    def claim(self, cmd: Mapping[str, Any], current_version: int) -> BestScore | None:
        """The score a best-model request claims: its ``score``/``judged_by``/``episodes``, or an
        older telemetry's ``mean_return`` over ``window`` (training returns); None: no score."""
        claim = BestScore.from_json(cmd)
        if claim is None and isinstance(cmd.get("mean_return"), (int, float)):
            asked = cmd.get("model_version")
            claim = BestScore.from_json(
                {
                    "score": cmd["mean_return"],
                    "model_version": asked if isinstance(asked, int) else current_version,
                    "judged_by": TRAINING_RETURNS,
                    "episodes": cmd.get("window"),
                }
            )
        return claim

    def plan(self, cmd: Mapping[str, Any], current_version: int) -> BestSave | str:
        """What a save named best writes, or why it is refused (a line): a save without a score
        does not replace a scored best, a worse score does not, and a judged version that is no
        longer held is not saved under its score."""
        claim, held = self.claim(cmd, current_version), self.score
        if claim is None and held is not None:
            return (
                f"checkpoints/best holds a model scored {held.describe()}; a save without a score does not replace it"
            )
        if claim is not None and not claim.beats(held):
            return f"{claim.describe()} does not beat the best, {held.describe()}"
        asked = cmd.get("model_version")
        if isinstance(asked, int) and asked in self.recent:
            version = asked
        elif claim is not None and claim.judged_by != TRAINING_RETURNS:
            return f"model version {asked} is no longer held (newest {current_version}): not saved under its score"
        else:
            version = current_version
        info = {
            "model_version": version,
            "requested_version": asked,
            "mean_return": claim.score if claim else cmd.get("mean_return"),
            "window": cmd.get("window", claim.episodes if claim else None),
            "saved_at_version": current_version,
            "time": time.time(),
        }
        files = {"best.json": json.dumps(info, indent=1).encode()}
        payload = self.recent.get(version)
        if payload is not None:
            files["weights.safetensors"] = payload
        score = attrs.evolve(claim, model_version=version) if claim is not None else None
        if score is not None:
            files[SCORE_FILE] = score_file(score)
        return BestSave(version, info, files, score)
