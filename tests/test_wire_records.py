"""One record per wire message, encoded and decoded from its one definition (issue 35).

The evaluation (``eval/<name>``): the evaluator node and the workers publish it, the evaluator,
telemetry and ``mqttrl train``'s record read it, all through :class:`mqttrl.wire.evaluation.Evaluation`.
"""

from __future__ import annotations

import json

import pytest

from mqttrl.wire import Rejected
from mqttrl.wire.evaluation import Evaluation


def test_an_evaluation_round_trips_and_leaves_unknown_optional_fields_out():
    ev = Evaluation.of_returns(7, [1.0, 3.0], eval_s=0.1234, env_steps=4200)
    assert (ev.mean, ev.std, ev.min, ev.max, ev.eval_s) == (2.0, 1.0, 1.0, 3.0, 0.123)
    assert Evaluation.decode(ev.encode()) == ev
    assert set(ev.to_json()) == {"model_version", "episodes", "mean", "std", "min", "max", "eval_s", "env_steps"}
    bare = Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5)
    assert "env_steps" not in bare.to_json() and Evaluation.decode(bare.encode()) == bare


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"std": None}, "missing_field"),
        ({"eval_s": "slow"}, "missing_field"),
        ({"mean": True}, "bad_value"),
        ({"episodes": 0}, "bad_value"),
        ({"model_version": -1}, "bad_value"),
    ],
)
def test_a_bad_evaluation_is_refused_naming_why(change, reason):
    good = Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5).to_json()
    data = {k: v for k, v in {**good, **change}.items() if v is not None}
    with pytest.raises(Rejected) as e:
        Evaluation.decode(json.dumps(data).encode())
    assert e.value.reason == reason


def test_a_non_finite_number_is_refused():
    payload = json.dumps({**Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5).to_json(), "max": float("inf")}).encode()
    with pytest.raises(Rejected):
        Evaluation.decode(payload)


def test_docs_telemetry_lists_the_eval_points_fields_as_the_record_makes_them():
    """docs/telemetry.md's ``eval`` row names exactly the fields of ``Evaluation.point_fields``."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "telemetry.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `eval` | `evaluator` |"))
    documented = set(re.findall(r"`([a-z_]+)`", row.split("|")[3]))
    made = set(Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5, env_steps=100).point_fields())
    assert documented == made, (documented, made)
    assert "env_steps" not in Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5).point_fields()
