"""The learner's best-model keeping as plain logic (mqttrl.nodes.learner.best): which save named
best is granted, with which model's exact weights, and which is refused with one line."""

from __future__ import annotations

import json

from mqttrl.nodes.learner.best import BestModels, BestSave
from mqttrl.state.best import GREEDY_EVAL, SCORE_FILE, TRAINING_RETURNS, BestScore
from mqttrl.wire.commands import Quicksave
from mqttrl.wire.model_ref import ModelRef


def judged(score: float, version: int, epoch: int | None = None) -> Quicksave:
    return Quicksave(
        name="best", score=score, model_version=version, model_epoch=epoch, judged_by=GREEDY_EVAL, episodes=20
    )


def test_the_judged_versions_exact_weights_are_saved_and_a_worse_score_is_refused():
    best = BestModels(None, keep=3)
    for v in range(1, 6):
        best.remember(v, f"weights {v}".encode())
    assert list(best.recent) == [ModelRef(0, v) for v in (3, 4, 5)]  # the oldest forgotten
    plan = best.plan(judged(100.0, 4), current=5)
    assert isinstance(plan, BestSave) and plan.version == 4
    assert plan.files["weights.safetensors"] == b"weights 4" and SCORE_FILE in plan.files
    best.score = plan.score
    assert "does not beat the best" in best.plan(judged(90.0, 5), current=5)
    assert "no longer held" in best.plan(judged(200.0, 1), current=5)


def test_a_score_of_another_epochs_model_is_not_saved_with_this_epochs_weights_of_its_version():
    """A learner resumed from an older checkpoint (the broker lost the retained weights) numbers
    its new epoch's models from lower versions: an evaluator's score of the old epoch's version 4,
    arriving now, names a model this learner does not hold, though it holds a version 4 of its own."""
    old, new = 1_000, 2_000
    best = BestModels(None, keep=8)
    for v in (3, 4, 5):
        best.remember(ModelRef(new, v), f"new {v}".encode())
    assert "model v4 (epoch 1000) is no longer held (newest v5 (epoch 2000))" in best.plan(
        judged(100.0, 4, old), current=ModelRef(new, 5)
    )
    plan = best.plan(judged(100.0, 4, new), current=ModelRef(new, 5))
    assert isinstance(plan, BestSave) and plan.ref == ModelRef(new, 4) and plan.files["weights.safetensors"] == b"new 4"
    assert json.loads(plan.files["best.json"])["model_epoch"] == new
    stored = BestScore.from_json(json.loads(plan.files[SCORE_FILE]))
    assert stored is not None and stored.ref == ModelRef(new, 4)
    # a sender that names no epoch (older telemetry) means any epoch's model of its version: the newest
    best.remember(ModelRef(old, 4), b"old 4")
    plan = best.plan(judged(100.0, 4), current=ModelRef(new, 5))
    assert isinstance(plan, BestSave) and plan.ref == ModelRef(new, 4)


def test_a_save_without_a_score_does_not_replace_a_scored_best_and_old_telemetry_is_read():
    best = BestModels(BestScore(50.0, 2, GREEDY_EVAL, 20))
    assert "a save without a score does not replace it" in best.plan(Quicksave(name="best"), current=7)
    claim = best.claim(Quicksave(name="best", mean_return=80.0, window=100), current=7)
    assert claim is not None and claim.judged_by == TRAINING_RETURNS and claim.model_version == 7


def test_a_score_file_without_an_epoch_reads_as_epoch_0_and_the_epoch_is_written_when_known():
    assert BestScore.from_json({"score": 1.0, "model_version": 3, "judged_by": GREEDY_EVAL, "episodes": 5}).ref == (
        ModelRef(0, 3)
    )
    assert BestScore(1.0, 3, GREEDY_EVAL, 5, 77).to_json()["model_epoch"] == 77
    for bad in (-1, True, "7", 2**63):  # not an epoch: read as unknown
        data = {"score": 1.0, "model_version": 3, "judged_by": GREEDY_EVAL, "episodes": 5, "model_epoch": bad}
        assert BestScore.from_json(data).model_epoch == 0
