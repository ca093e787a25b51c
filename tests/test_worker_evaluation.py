"""Greedy evaluation played by the workers on their own games (issue 34: one window a PC, so no
evaluator elsewhere can have a copy): the schedule and the play with plain objects, then a real
``mqttrl.train`` run whose every evaluation comes from its workers."""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.envs.rollout import EnvSet, evaluation_seed, greedy_returns
from mqttrl.nodes.worker.evaluation import WorkerEvaluation


class Counter(gym.Env):
    """Reward 1 a step; an episode lasts ``seed % 7 + 3`` steps (so the seeds it was reset with show)."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.length = (seed if seed is not None else 0) % 7 + 3
        self.t = 0
        self.resets = getattr(self, "resets", 0) + 1
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)], np.float32), 1.0, self.t >= self.length, False, {}


class GreedyActor:
    """What the worker's actor is asked for: greedy actions and the truncation of open episodes."""

    def __init__(self):
        self.truncated: list[int] = []
        self.greedy_calls = 0

    def act(self, obs, greedy=False):
        assert greedy, "an evaluation acts greedily"
        self.greedy_calls += 1
        return np.zeros(len(obs), dtype=np.int64), {}

    def truncate(self, i, final_obs):
        self.truncated.append(i)


def test_an_evaluation_is_due_after_its_period_and_for_a_model_not_judged_yet():
    now = [100.0]
    ev = WorkerEvaluation(episodes=3, every_s=10.0, clock=lambda: now[0])
    assert not ev.due(5)  # the first after one period
    now[0] = 110.0
    assert ev.due(5) and not ev.due(-1)  # no model yet: nothing to judge
    ev.evaluated = 5
    assert not ev.due(5) and ev.due(6)


def test_by_data_an_evaluation_is_due_when_the_models_env_steps_reach_the_next_mark():
    ev = WorkerEvaluation(episodes=3, every_s=3600.0, clock=lambda: 0.0, every_env_steps=1000)
    assert not ev.due(5, {"env_steps_ingested": 999}) and ev.due(5, {"env_steps_ingested": 1000})
    envs = EnvSet(lambda: Counter(), 1, seed=0)
    ev.play(envs, GreedyActor(), version=5, info={"env_steps_ingested": 1700})
    assert not ev.due(6, {"env_steps_ingested": 1999}) and ev.due(6, {"env_steps_ingested": 2000})


def test_the_play_ends_open_episodes_plays_greedily_with_the_versions_seeds_and_resets():
    envs = EnvSet(lambda: Counter(), 2, seed=0)
    for _ in range(2):
        envs.step(np.zeros(2, dtype=np.int64))  # episodes open on both envs
    actor = GreedyActor()
    ev = WorkerEvaluation(episodes=5, every_s=1.0, clock=lambda: 0.0)
    result = ev.play(envs, actor, version=4, info={"env_steps_ingested": 1234})
    seed = evaluation_seed(4, 5)
    expected = sorted(float((seed + k) % 7 + 3) for k in range(5))
    assert actor.truncated == [0, 1]  # no n-step window spans the evaluation
    assert result.model_version == 4 and result.episodes == 5 and result.env_steps == 1234
    assert result.mean == pytest.approx(np.mean(expected)) and result.min == min(expected)
    assert ev.evaluated == 4
    assert envs.lengths.tolist() == [0, 0] and envs.returns.tolist() == [0.0, 0.0]  # training starts afresh
    assert envs.obs.tolist() == [[0.0], [0.0]]


def test_which_workers_evaluate():
    from mqttrl.config import from_dict
    from mqttrl.nodes.worker.evaluation import why_not_evaluating

    train = lambda **kw: from_dict({"train": {"eval_on": "workers", **kw}}).train  # noqa: E731
    assert why_not_evaluating(train(), "async", None) is None  # every worker, by default
    assert why_not_evaluating(train(eval_workers=2), "async", 1) is None
    assert why_not_evaluating(train(eval_workers=2), "async", 2) == "train.eval_workers = 2 and its --index is 2"
    assert "has no --index" in why_not_evaluating(train(eval_workers=1), "async", None)
    assert why_not_evaluating(train(), "sync", 0) is None  # PPO too: between its rounds
    assert why_not_evaluating(from_dict({}).train, "async", 0) == "the evaluator node plays them"


def test_greedy_returns_calls_the_chores_between_steps():
    envs = EnvSet(lambda: Counter(), 1, seed=0)
    calls = []
    returns = greedy_returns(envs.envs, envs.dtype, GreedyActor(), 2, seed=7, during=lambda: calls.append(1))
    assert returns == [7 % 7 + 3.0, 8 % 7 + 3.0] and len(calls) == sum(returns)


def train_evaluated_by_workers(config: str, tmp_path: Path, **train) -> tuple:
    """``mqttrl.train`` of ``configs/<config>`` for 15 s, its greedy evaluations played by its
    workers every 2 s; the result and the rows of its evaluations.csv."""
    import mqttrl

    result = mqttrl.train(
        str(Path(__file__).parent.parent / "configs" / config),
        eval_on="workers",
        eval_every_s=2.0,
        target_return=None,
        max_seconds=15,
        telemetry_storages=[],
        run_dir=tmp_path / "run",
        progress=False,
        **train,
    )
    return result, list(csv.DictReader((tmp_path / "run" / "evaluations.csv").open()))


@pytest.mark.e2e
def test_train_with_workers_evaluating_records_their_results(tmp_path):
    # w0 evaluates, w1 trains all the time
    result, rows = train_evaluated_by_workers("cartpole_dqn.toml", tmp_path, eval_episodes=3, eval_workers=1)
    assert len(rows) >= 2 and all(int(r["episodes"]) == 3 for r in rows), rows
    assert result.best_eval_mean is not None and result.best_weights is not None  # best/ from a worker's result
    logs = (tmp_path / "run" / "logs" / "worker-w0.log").read_text()
    assert "worker w0 evaluated model" in logs
    other = (tmp_path / "run" / "logs" / "worker-w1.log").read_text()
    assert "worker w1 evaluated model" not in other and "eval_workers = 1 and its --index is 1" in other
    # the final evaluation: the workers' next one, of the model at the budget's end or a newer one
    s = result.summary
    assert s["stop_reason"] == "time budget" and s["final_eval_mean"] is not None, s
    assert s["final_model_version"] == max(int(r["model_version"]) for r in rows)


@pytest.mark.e2e
def test_ppo_workers_evaluate_between_their_rounds(tmp_path):
    """A sync-mode worker (PPO) evaluates in the gap of a round: after it sent its share, never
    in the middle of one (its shares stay whole: the learner's rounds go on)."""
    result, rows = train_evaluated_by_workers("cartpole_ppo.toml", tmp_path, eval_episodes=2)
    assert len(rows) >= 2 and all(int(r["episodes"]) == 2 for r in rows), rows
    assert result.updates > 0 and result.summary["rejected"] == {}, result.summary
    logs = (tmp_path / "run" / "logs" / "worker-w0.log").read_text()
    assert "worker w0 evaluated model" in logs and "does not evaluate" not in logs


def test_a_listening_evaluator_refuses_a_bad_result_and_keeps_a_good_one():
    """Results published by workers are input like any: a NaN mean or a missing field is refused and
    counted, never handed on; a good one is kept with the worker that played it."""
    import json

    from mqttrl.nodes.evaluator import _Latest
    from mqttrl.transport.topics import Topics

    topics = Topics("r")
    seen = _Latest(topics, 3, listen=True)
    good = {"model_version": 2, "episodes": 3, "mean": 5.0, "std": 0.0, "min": 5.0, "max": 5.0, "eval_s": 0.1}
    seen.dispatch(topics.evaluation("pc1"), json.dumps({**good, "mean": float("nan")}).encode())
    seen.dispatch(topics.evaluation("pc1"), json.dumps({k: v for k, v in good.items() if k != "std"}).encode())
    seen.dispatch(topics.evaluation("pc1"), json.dumps(good).encode())
    assert [(r.evaluation.to_json(), r.evaluator) for r in seen.results] == [(good, "pc1")]
    assert sum(seen.rejections.snapshot().values()) == 2


def test_the_evaluator_takes_a_restarted_learners_weights_at_a_lower_version():
    """The one "newest weights win" rule (``WeightsMessage.newer_than``: epoch, then version): a
    learner restarted from an older checkpoint opens a new epoch at a lower version; the evaluator
    judges its model, not the dead learner's (it compared versions alone before: issue 35)."""
    import numpy as np

    from mqttrl.nodes.evaluator import _Latest
    from mqttrl.transport.topics import Topics
    from mqttrl.wire import encode_weights

    topics = Topics("r")
    seen = _Latest(topics, 3)
    tensors = {"w": np.zeros(2, np.float32)}
    seen.dispatch(topics.weights, encode_weights(50, "dqn", "r", tensors, epoch=1))
    seen.dispatch(topics.weights, encode_weights(3, "dqn", "r", tensors, epoch=2))  # the restarted learner
    assert (seen.weights.epoch, seen.weights.version) == (2, 3)
    seen.dispatch(topics.weights, encode_weights(60, "dqn", "r", tensors, epoch=1))  # a late copy of the old one
    assert (seen.weights.epoch, seen.weights.version) == (2, 3)


def test_a_worker_evaluates_a_resumed_learners_new_epoch_at_a_lower_version():
    """Issue 44: the worker swapped to the resumed learner's model (a new epoch, a lower version);
    its evaluation schedule takes that model as new, and the result names its epoch."""
    from mqttrl.wire import ModelRef

    ev = WorkerEvaluation(episodes=2, every_s=0.0, clock=lambda: 0.0)
    envs = EnvSet(lambda: Counter(), 1, seed=0)
    ev.play(envs, GreedyActor(), ModelRef(7, 50), {})
    assert ev.due(ModelRef(8, 3)) and not ev.due(ModelRef(7, 50))
    result = ev.play(envs, GreedyActor(), ModelRef(8, 3), {})
    assert result.model == ModelRef(8, 3) and result.to_json()["model_epoch"] == 8
    assert ev.evaluated == 3 and not ev.due(ModelRef(7, 60))
