"""Commands to the learner (``cmd/learner/<command>``) and its replies (``reply/<id>``).

One command today: ``quicksave``, sent by telemetry for a new best model and by ``mqttrl
quicksave``. The learner writes a checkpoint and, where asked, answers on ``reply_to``.
"""

from __future__ import annotations

import attrs

from .record import JsonRecord, wire_field

#: the commands the learner knows
COMMANDS = ("quicksave",)


@attrs.define
class Quicksave(JsonRecord):
    """Write a checkpoint now; named ``best`` with a score, the best model."""

    name: str | None = wire_field("`best` for the best model; otherwise a `quicksave-<updates>` checkpoint", None)
    score: float | None = wire_field("the best model's score (greedy mean, or the training-returns average)", None)
    model_version: int | None = wire_field("the model version the score is of", None)
    model_epoch: int | None = wire_field(
        "the learner epoch of that model (omitted: any epoch's model of the version, as older senders meant)",
        None,
        omit_none=True,
    )
    judged_by: str | None = wire_field("`greedy_eval` or `training_returns`", None)
    episodes: int | None = wire_field("episodes behind the score", None)
    mean_return: float | None = wire_field("the score, as older learners read it", None, omit_none=True)
    window: int | None = wire_field("the training-returns window, as older learners read it", None, omit_none=True)
    reply_to: str | None = wire_field("a topic of this run where the learner answers", None, omit_none=True)


@attrs.define
class QuicksaveReply(JsonRecord):
    """Where the checkpoint went, or why a save named best was refused."""

    path: str = wire_field("the checkpoint's folder (the kept best's when refused)")
    model_version: int | None = wire_field("the learner's model version when it saved", None)
    updates: int | None = wire_field("its gradient updates when it saved", None)
    refused: str | None = wire_field("why a save named best was refused", None, omit_none=True)
