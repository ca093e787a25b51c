"""One record per wire message, encoded and decoded from its one definition (issue 35).

The evaluation (``eval/<name>``): the evaluator node and the workers publish it, the evaluator,
telemetry and ``mqttrl train``'s record read it, all through :class:`mqttrl.wire.evaluation.Evaluation`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest

from mqttrl.wire import (
    EpisodeReport,
    EpisodeStats,
    Flow,
    Heartbeat,
    InferenceMetrics,
    InferenceState,
    LearnerMetrics,
    LearnerState,
    Quicksave,
    QuicksaveReply,
    Rejected,
    WorkerState,
    decode_episodes,
)
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
    doc = (Path(__file__).resolve().parents[1] / "docs" / "telemetry.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `eval` | `evaluator` |"))
    documented = set(re.findall(r"`([a-z_]+)`", row.split("|")[3]))
    made = set(Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5, env_steps=100).point_fields())
    assert documented == made, (documented, made)
    assert "env_steps" not in Evaluation(3, 5, 1.0, 0.0, 1.0, 1.0, 0.5).point_fields()


# ---- the JSON records declared with wire_field (mqttrl.wire.record) ----------------------------
DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_optional_extras_are_left_out_while_none_and_the_rest_are_sent():
    body = json.loads(Heartbeat(model_version=1, env_steps=2).encode())
    assert "timing" not in body and "realtime" not in body and "game" not in body and "act_latency" not in body
    assert body["idle"] is None and body["model_version"] == 1  # null is a value a reader may test for


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"env_steps": 5}, "bad_header"),  # model_version missing
        ({"model_version": "7", "env_steps": 5}, "bad_value"),
        ({"model_version": True, "env_steps": 5}, "bad_value"),  # a bool is not a count
        ({"model_version": 1.5, "env_steps": 5}, "bad_value"),
    ],
)
def test_a_required_field_missing_or_of_the_wrong_type_refuses_the_message(body, reason):
    with pytest.raises(Rejected) as e:
        Heartbeat.decode(json.dumps(body).encode())
    assert e.value.reason == reason


def test_an_optional_field_of_the_wrong_type_reads_as_absent_and_unknown_keys_are_ignored():
    payload = json.dumps(
        {"model_version": 3, "env_steps": 9, "outbox": "many", "paused_s": "slow", "from_the_future": [1], "idle": 4}
    ).encode()
    hb = Heartbeat.decode(payload)
    assert (hb.outbox, hb.idle, hb.model_version) == (None, None, 3)
    assert Heartbeat.decode(json.dumps({"model_version": 3, "env_steps": 9, "paused_s": 2}).encode()).paused_s == 2.0


def test_a_float_field_takes_an_int_and_refuses_a_non_finite_literal():
    assert Flow.decode(b'{"pause": true, "beat_s": 2}').beat == 2.0
    with pytest.raises(Rejected):
        Flow.decode(b'{"pause": true, "beat_s": NaN}')
    assert Flow.decode(b'{"beat_s": -3}').beat == 0.0 and Flow.decode(b"{}").pause is False


@pytest.mark.parametrize(
    "record",
    [
        WorkerState(status="online", worker="w0", incarnation="abc", pid=4, index=None, num_envs=8, time=1.5),
        LearnerState(status="offline", reason="stopped", model_version=3, best={"score": 1.0}),
        LearnerMetrics(updates=10, model_version=2, train={"loss": 0.5}, round=None, uptime_s=3.0),
        Flow(pause=True, model_version=4, beat_s=2.0, time=9.0),
        Quicksave(name="best", score=4.5, model_version=3, judged_by="greedy_eval", episodes=10),
        QuicksaveReply(path="runs/x/checkpoints/best", model_version=3, updates=100, refused="no"),
        InferenceState(status="online", server="s0", shared=True, batch_size=64),
        InferenceMetrics(server="s0", requests_per_s=12.0, rejected={}),
        EpisodeStats(episode_return=-3.5, length=12, env=1, terminated=False, model_version=2, env_steps=40),
    ],
    ids=lambda r: type(r).__name__,
)
def test_every_record_round_trips(record):
    assert type(record).decode(record.encode()) == record


def test_the_learner_metrics_record_declares_every_key_the_learner_core_and_fleet_timing_give():
    """The learner node builds its metrics with keyword arguments: a key the core's snapshot or
    the fleet timing gives that the record does not declare would fail here, not on the wire."""
    from mqttrl.observe.timing import FleetTiming

    fields = {f.name for f in attrs.fields(LearnerMetrics)}
    core_keys = {
        "model_version", "samples", "batches", "paused_workers", "missing_batches", "worker_restarts",
        "env_restarts", "epoch", "old_epoch_batches", "workers_online", "workers_known", "workers", "train", "round",
    }  # fmt: skip
    assert core_keys | set(FleetTiming().take()) <= fields
    with pytest.raises(TypeError):
        LearnerMetrics(updates=1, model_version=1, bogus=3)


def test_an_episode_report_refuses_the_whole_message_for_one_bad_episode():
    good = {"return": 1.0, "length": 3}
    report = EpisodeReport.decode(json.dumps({"worker": "w0", "episodes": [good, {**good, "length": 4}]}).encode())
    assert [e.length for e in report.episodes] == [3, 4] and report.worker == "w0"
    for bad in ({"return": "x", "length": 3}, {"return": 1.0, "length": -1}, {"length": 3}, 7):
        with pytest.raises(Rejected):
            EpisodeReport.decode(json.dumps({"episodes": [good, bad]}).encode())
    assert EpisodeReport.decode(json.dumps(good).encode()).episodes[0].length == 3  # an older worker's single episode


def test_decode_episodes_still_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="EpisodeReport"):
        episodes = decode_episodes(json.dumps({"episodes": [{"return": 2, "length": 5}]}).encode())
    assert episodes[0]["return"] == 2.0 and episodes[0]["length"] == 5


def test_every_topic_kind_has_one_definition():
    from mqttrl.transport.topics import Kind
    from mqttrl.wire_catalog import DEFINITIONS

    assert set(DEFINITIONS) == set(Kind)


@pytest.mark.parametrize("doc", ["telemetry.md", "architecture.md"])
def test_the_docs_tables_of_the_messages_are_written_from_the_records(doc):
    from mqttrl.wire_catalog import MARKER, render_doc

    text = (DOCS / doc).read_text()
    assert MARKER.search(text), f"docs/{doc} has no records tables"
    assert text == render_doc(text), f"docs/{doc} is stale: run python -m mqttrl.wire_catalog docs/{doc}"


def test_the_episode_and_learner_point_fields_are_the_ones_docs_telemetry_lists():
    doc = (DOCS / "telemetry.md").read_text()

    def documented(measurement: str) -> set[str]:
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{measurement}` |"))
        return set(re.findall(r"`([a-z_]+)`", row.split("|")[3]))

    episode = EpisodeStats(episode_return=1.0, length=2, model_version=3, env_steps=4).point_fields()
    assert set(episode) == documented("episode")
    learner = LearnerMetrics(
        updates=1, model_version=1, samples=2, updates_per_s=1.0, samples_per_s=2.0, workers_online=1, inbox=0
    )
    learner.missing_batches = 0
    made = set(learner.point_fields())
    assert made <= documented("learner") and "rejected_total" in made


def test_a_heartbeats_counts_read_a_bad_value_as_zero_by_one_rule():
    hb = Heartbeat.from_json(
        {
            "model_version": 0,
            "env_steps": 0,
            "dropped": {"samples": 3, "episodes": "x", "eval": -1, "cmd": True},
            "game": {"launches": 2, "relaunches": 1.5, "crashes": -1},
        }
    )
    assert hb.dropped_total() == 3 and (hb.count("launches"), hb.count("relaunches"), hb.count("crashes")) == (2, 0, 0)


def test_a_nested_record_decodes_by_its_own_rules_and_encodes_back_to_the_same_json():
    from mqttrl.wire import GameReport
    from mqttrl.wire.record import fields_table

    sent = {
        "model_version": 1,
        "env_steps": 5,
        "game": {"launches": 3, "relaunches": 2, "crashes": 1, "relaunch_s": 4.5},
    }
    hb = Heartbeat.from_json(sent)
    assert hb.game == GameReport(launches=3, relaunches=2, crashes=1, relaunch_s=4.5)
    assert hb.to_json()["game"] == sent["game"]  # the wire is what it was: a JSON object
    assert Heartbeat.decode(hb.encode()).game == hb.game
    assert Heartbeat.from_json({**sent, "game": "three"}).game is None  # an optional field of the wrong type: absent
    assert Heartbeat.from_json({**sent, "game": {"launches": "x"}}).game == GameReport()  # its own optional rules
    assert "object (GameReport)" in fields_table(Heartbeat)
