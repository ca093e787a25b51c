"""The learner's best-model keeping as plain logic (mqttrl.nodes.learner.best): which save named
best is granted, with which version's exact weights, and which is refused with one line."""

from __future__ import annotations

from mqttrl.nodes.learner.best import BestModels, BestSave
from mqttrl.state.best import GREEDY_EVAL, SCORE_FILE, TRAINING_RETURNS, BestScore


def judged(score: float, version: int) -> dict:
    return BestScore(score, version, GREEDY_EVAL, 20).to_json() | {"name": "best", "model_version": version}


def test_the_judged_versions_exact_weights_are_saved_and_a_worse_score_is_refused():
    best = BestModels(None, keep=3)
    for v in range(1, 6):
        best.remember(v, f"weights {v}".encode())
    assert list(best.recent) == [3, 4, 5]  # the oldest forgotten
    plan = best.plan(judged(100.0, 4), current_version=5)
    assert isinstance(plan, BestSave) and plan.version == 4
    assert plan.files["weights.safetensors"] == b"weights 4" and SCORE_FILE in plan.files
    best.score = plan.score
    assert "does not beat the best" in best.plan(judged(90.0, 5), current_version=5)
    assert "no longer held" in best.plan(judged(200.0, 1), current_version=5)


def test_a_save_without_a_score_does_not_replace_a_scored_best_and_old_telemetry_is_read():
    best = BestModels(BestScore(50.0, 2, GREEDY_EVAL, 20))
    assert "a save without a score does not replace it" in best.plan({"name": "best"}, current_version=7)
    claim = best.claim({"name": "best", "mean_return": 80.0, "window": 100}, current_version=7)
    assert claim is not None and claim.judged_by == TRAINING_RETURNS and claim.model_version == 7
