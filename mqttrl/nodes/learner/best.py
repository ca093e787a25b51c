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
from typing import Any

import attrs

from mqttrl.state.best import SCORE_FILE, TRAINING_RETURNS, BestScore, score_file
from mqttrl.wire.commands import Quicksave
from mqttrl.wire.model_ref import ModelRef, newest_match

#: recent models whose exact weights are kept for a best-model save
RECENT_MODELS = 32


@attrs.define
class BestSave:
    """What a granted save writes: the model saved, ``best.json``'s info, the files, the score."""

    ref: ModelRef
    info: dict[str, Any]
    files: dict[str, bytes]
    score: BestScore | None

    @property
    def version(self) -> int:
        return self.ref.version


class BestModels:
    """The best model's score (read back at start) and the recent models' exact weights, by
    :class:`~mqttrl.wire.model_ref.ModelRef`: a learner resumed from an older checkpoint numbers
    its new epoch's models from lower versions, and a score of the old epoch's version 40 is not
    one of the new epoch's version 40."""

    def __init__(self, score: BestScore | None, keep: int = RECENT_MODELS):
        self.score = score
        self.keep = keep
        #: the last published weights by model, so a best-model save writes the model that was judged
        self.recent: OrderedDict[ModelRef, bytes] = OrderedDict()

    def remember(self, model: ModelRef | int, payload: bytes) -> None:
        """The exact published weights of ``model`` (the oldest beyond ``keep`` are forgotten)."""
        self.recent[ModelRef.of(model)] = payload
        while len(self.recent) > self.keep:
            self.recent.popitem(last=False)

    def claim(self, cmd: Quicksave, current: ModelRef | int) -> BestScore | None:
        """The score a best-model request claims: its ``score``/``judged_by``/``episodes``, or an
        older telemetry's ``mean_return`` over ``window`` (training returns); None: no score."""
        current = ModelRef.of(current)
        claim = BestScore.from_json(cmd.to_json())
        if claim is None and cmd.mean_return is not None:
            asked = cmd.model_version
            claim = BestScore.from_json(
                {
                    "score": cmd.mean_return,
                    "model_version": asked if asked is not None else current.version,
                    "model_epoch": cmd.model_epoch if asked is not None else current.epoch,
                    "judged_by": TRAINING_RETURNS,
                    "episodes": cmd.window,
                }
            )
        return claim

    def plan(self, cmd: Quicksave, current: ModelRef | int) -> BestSave | str:
        """What a save named best writes, or why it is refused (a line): a save without a score
        does not replace a scored best, a worse score does not, and a judged model that is no
        longer held (another epoch's, or too old) is not saved under its score."""
        current = ModelRef.of(current)
        claim, held = self.claim(cmd, current), self.score
        if claim is None and held is not None:
            return (
                f"checkpoints/best holds a model scored {held.describe()}; a save without a score does not replace it"
            )
        if claim is not None and not claim.beats(held):
            return f"{claim.describe()} does not beat the best, {held.describe()}"
        asked = None if cmd.model_version is None else ModelRef(cmd.model_epoch or 0, cmd.model_version)
        found = newest_match(self.recent, asked) if asked is not None else None
        if found is not None:
            ref = found
        elif claim is not None and claim.judged_by != TRAINING_RETURNS:
            return f"model {asked} is no longer held (newest {current}): not saved under its score"
        else:
            ref = current
        info = {
            "model_version": ref.version,
            "model_epoch": ref.epoch,
            "requested_version": cmd.model_version,
            "mean_return": claim.score if claim else cmd.mean_return,
            "window": cmd.window if cmd.window is not None else (claim.episodes if claim else None),
            "saved_at_version": current.version,
            "time": time.time(),
        }
        files = {"best.json": json.dumps(info, indent=1).encode()}
        payload = self.recent.get(ref)
        if payload is not None:
            files["weights.safetensors"] = payload
        score = attrs.evolve(claim, model_version=ref.version, model_epoch=ref.epoch) if claim is not None else None
        if score is not None:
            files[SCORE_FILE] = score_file(score)
        return BestSave(ref, info, files, score)
