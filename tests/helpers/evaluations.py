"""An evaluator's result as the run's record takes it (mqttrl.nodes.evaluator.Result), for tests
that feed a RunRecord by hand."""

from __future__ import annotations

from mqttrl.nodes.evaluator import Result
from mqttrl.wire.evaluation import Evaluation


def judged(version: int, mean: float, episodes: int = 2, eval_s: float = 0.5, **optional) -> Result:
    """Greedy episodes of model ``version`` that all returned ``mean`` (``optional``: env_steps,
    training_s, wall_s, model_epoch), played by the run's own evaluator."""
    return Result(Evaluation(version, episodes, mean, 0.0, mean, mean, eval_s, **optional), "train")
