"""When a greedy evaluation is due (mqttrl.envs.eval_schedule): by time, by data, and a model
whose env steps are unknown."""

from __future__ import annotations

from mqttrl.envs.eval_schedule import EvalSchedule, trained_env_steps
from mqttrl.plugin.algorithm import INGESTED_KEY


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_by_time_a_new_model_after_each_period():
    clock = Clock()
    s = EvalSchedule(every_s=10.0, clock=clock)
    assert not s.due(1) and s.next_mark is None  # the first after one period
    clock.now = 110.0
    assert s.due(1) and not s.due(-1)  # no model yet: nothing to judge
    s.judged(1)
    assert not s.due(2)  # the period counts from the judgement
    clock.now = 120.0
    assert s.due(2) and not s.due(1)  # never the same model twice


def test_a_first_evaluation_can_come_sooner_than_one_period():
    clock = Clock()
    s = EvalSchedule(every_s=10.0, clock=clock, first_after_s=0.0)
    assert s.due(0)


def test_by_data_the_first_model_past_each_mark_whatever_the_clock():
    clock = Clock()
    s = EvalSchedule(every_s=3600.0, every_env_steps=5000, clock=clock)
    assert s.next_mark == 5000
    assert not s.due(1, 4999)
    assert s.due(1, 5000)
    s.judged(1, 5000)
    assert s.next_mark == 10_000 and not s.due(2, 9999) and s.due(2, 10_000)
    # a model that went past several marks (the evaluator was busy): the next mark is after it
    s.judged(2, 23_400)
    assert s.next_mark == 25_000 and not s.due(3, 24_999) and s.due(3, 25_000)
    assert not s.due(2, 30_000)  # evaluated already


def test_a_model_without_its_env_steps_is_evaluated_by_time():
    clock = Clock()
    s = EvalSchedule(every_s=10.0, every_env_steps=5000, clock=clock)
    assert not s.due(1, None)
    clock.now = 110.0
    assert s.due(1, None)
    s.judged(1, None)
    assert s.next_mark == 5000  # unchanged: the next model that says its steps is judged by them


def test_the_env_steps_a_model_was_trained_on_come_from_its_info():
    assert trained_env_steps({INGESTED_KEY: 1234}) == 1234
    for bad in ({}, {INGESTED_KEY: -1}, {INGESTED_KEY: True}, {INGESTED_KEY: 12.5}, {INGESTED_KEY: "9"}):
        assert trained_env_steps(bad) is None, bad


def test_a_resumed_learners_new_epoch_is_due_at_a_lower_version():
    """Issue 44: the broker lost its retained weights and the learner resumed from an older
    checkpoint: its new epoch's versions are lower than the old ones', and its models are due all the
    same (by version alone they were skipped until the version passed the old mark)."""
    from mqttrl.wire import ModelRef

    clock = Clock()
    s = EvalSchedule(every_s=10.0, clock=clock)
    clock.now += 10.0
    s.judged(ModelRef(1, 50))
    clock.now += 10.0
    assert s.due(ModelRef(2, 3))  # the resumed learner's model
    assert not s.due(ModelRef(1, 49)) and not s.due(ModelRef(1, 50))  # the old epoch's: no newer
    s.judged(ModelRef(2, 3))
    assert s.last == ModelRef(2, 3) and s.evaluated == 3
    clock.now += 10.0
    assert s.due(ModelRef(2, 4)) and not s.due(ModelRef(1, 60))  # a late copy of the old epoch's: never


def test_by_data_a_resumed_learners_model_trained_on_fewer_steps_is_due():
    """The resumed learner's data went back with its checkpoint: its first model is due at once, and
    the marks count on from its env steps (not from the old epoch's)."""
    from mqttrl.wire import ModelRef

    s = EvalSchedule(every_s=3600.0, every_env_steps=1000, clock=lambda: 0.0)
    s.judged(ModelRef(1, 50), 9500)
    assert s.next_mark == 10_000
    assert s.due(ModelRef(2, 3), 4200)  # fewer env steps than the old epoch's last: due
    s.judged(ModelRef(2, 3), 4200)
    assert s.next_mark == 5000 and not s.due(ModelRef(2, 4), 4999) and s.due(ModelRef(2, 4), 5000)


def test_bare_versions_still_schedule_as_epoch_0():
    s = EvalSchedule(every_s=0.0, clock=lambda: 0.0)
    s.evaluated = 5
    assert not s.due(5) and s.due(6) and s.evaluated == 5
