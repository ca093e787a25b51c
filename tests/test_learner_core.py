"""The learner's rules without a broker: admission, membership, liveness, rounds, flow control.

The core is driven with a fake clock, real ``encode_batch`` payloads of a tiny
spec and fake learners that implement only their mode's protocol, so a call
into the wrong protocol fails with AttributeError. The stateful tests replay
random interleavings against a small model of the rules.
"""

from __future__ import annotations

import logging
import types
from collections import Counter, defaultdict

import attrs
import pytest
from helpers.learner_core_kit import RUN, FakeAsync, FakeSync, birth, make, payload, reason
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mqttrl.nodes.learner.core import MAX_HOLES, AsyncAdmission, SyncRounds
from mqttrl.plugin.algorithm import AsyncLearner, SyncLearner
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import (
    Heartbeat,
    LearnerMetrics,
    Rejected,
    SampleBatch,
    decode_batch,
    encode_json,
)


def last_will(core, worker, now=0.0):
    core.on_worker_state(worker, encode_json({"status": "offline", "reason": "connection lost"}), now)


def heartbeat(core, worker, now, version=0):
    core.on_heartbeat(worker, encode_json({"model_version": version, "env_steps": 10}), now)


# ---- the fakes really are what the node expects ----------------------------------------------
def test_fakes_implement_exactly_their_protocol():
    assert isinstance(FakeAsync(), AsyncLearner) and not isinstance(FakeAsync(), SyncLearner)
    assert isinstance(FakeSync(), SyncLearner) and not isinstance(FakeSync(), AsyncLearner)
    assert isinstance(make("async")[0].admission, AsyncAdmission)
    assert isinstance(make("sync")[0].admission, SyncRounds)


# ---- admission ---------------------------------------------------------------------------
def test_an_admitted_batch_goes_to_the_learner_and_is_counted():
    core, learner = make()
    birth(core, "w0")
    core.new_version(0.0)
    batch = core.on_samples("w0", payload("w0", 0, 1), 1.0)
    assert learner.added == [batch]
    assert (core.samples_total, core.batches_total) == (3, 1)
    w = core.workers["w0"]
    assert (w.last_seq, w.first_seq, w.samples, w.last_seen) == (0, 0, 3, 1.0)


def test_wrong_run_and_sender_mismatch():
    core, learner = make()
    birth(core, "w0")
    assert reason(core.on_samples, "w0", payload("w0", 0, 0, run="other-run"), 0.0) == "wrong_run"
    assert reason(core.on_samples, "w0", payload("w0", 0, 0, sender="w1"), 0.0) == "sender_mismatch"
    assert learner.added == [] and core.batches_total == 0


def test_unknown_sender_when_announce_is_required_and_admitted_when_not():
    core, _ = make()
    assert reason(core.on_samples, "w9", payload("w9", 0, 0), 0.0) == "unknown_sender"
    assert "w9" not in core.workers
    core, learner = make(require_announce=False)
    core.on_samples("w9", payload("w9", 0, 0), 2.0)
    assert len(learner.added) == 1 and core.workers["w9"].last_seen == 2.0


def test_future_version():
    core, _ = make()
    birth(core, "w0")
    core.new_version(0.0)
    assert reason(core.on_samples, "w0", payload("w0", 0, 2), 0.0) == "future_version"
    core.on_samples("w0", payload("w0", 1, 1), 0.0)  # the current version is fine


def test_stale_version_boundary_accepts_exactly_max_staleness_versions_back():
    core, learner = make(max_staleness=2)
    birth(core, "w0")
    assert core.continue_after(5) and not core.continue_after(3)
    assert reason(core.on_samples, "w0", payload("w0", 0, 2), 0.0) == "stale_version"  # 5 - 2 = 3 > 2
    core.on_samples("w0", payload("w0", 1, 3), 0.0)  # 5 - 3 = 2: accepted
    assert [b.model_version for b in learner.added] == [3]


def test_max_staleness_zero_accepts_only_the_current_version():
    """Issue 9, item 4: N means "at most N versions older", so N+1 versions; 0 is the current only."""
    core, learner = make(max_staleness=0)
    birth(core, "w0")
    core.continue_after(5)
    assert reason(core.on_samples, "w0", payload("w0", 0, 4), 0.0) == "stale_version"
    core.on_samples("w0", payload("w0", 1, 5), 0.0)
    assert [b.model_version for b in learner.added] == [5]


def test_wrong_round_in_sync_mode_even_within_the_async_window():
    core, learner = make("sync", max_staleness=5)
    birth(core, "w0")
    core.new_version(0.0)
    core.new_version(0.0)
    assert reason(core.on_samples, "w0", payload("w0", 0, 1), 0.0) == "wrong_round"
    core.on_samples("w0", payload("w0", 1, 2), 0.0)
    assert list(core.admission.round.batches) == ["w0"] and learner.rounds == []


def test_duplicate_sequence_numbers_and_missing_count():
    core, learner = make()
    birth(core, "w0")
    core.on_samples("w0", payload("w0", 5, 0), 0.0)
    assert reason(core.on_samples, "w0", payload("w0", 5, 0), 0.0) == "duplicate"
    assert reason(core.on_samples, "w0", payload("w0", 3, 0), 0.0) == "duplicate"
    core.on_samples("w0", payload("w0", 8, 0), 0.0)
    w = core.workers["w0"]
    assert (w.last_seq, w.first_seq, w.missing) == (8, 5, 2)
    assert [b.seq for b in learner.added] == [5, 8]


def test_a_batch_that_comes_late_fills_its_hole():
    """Brokers can hand over QoS 1 messages out of order (mosquitto 2.0's bridge does around a
    reconnect: tests/test_bridge.py). A batch below the last one seen that never came before is
    taken and no longer missing; one that came before is still a duplicate."""
    core, learner = make()
    birth(core, "w0")
    for seq in (0, 1, 3, 6):
        core.on_samples("w0", payload("w0", seq, 0), 0.0)
    w = core.workers["w0"]
    assert (w.last_seq, w.missing) == (6, 3)
    core.on_samples("w0", payload("w0", 2, 0), 0.0)
    core.on_samples("w0", payload("w0", 5, 0), 0.0)
    assert (w.last_seq, w.missing) == (6, 1)
    for seq in (2, 3, 5, 6):
        assert reason(core.on_samples, "w0", payload("w0", seq, 0), 0.0) == "duplicate"
    core.on_samples("w0", payload("w0", 4, 0), 0.0)
    assert (w.last_seq, w.missing) == (6, 0) and [b.seq for b in learner.added] == [0, 1, 3, 6, 2, 5, 4]
    # holes are remembered as far back as MAX_HOLES: older ones stay missing, then are refused
    core.on_samples("w0", payload("w0", 7 + MAX_HOLES + 10, 0), 0.0)
    assert w.missing == MAX_HOLES + 10 and len(w.holes[w.incarnation]) == MAX_HOLES
    assert reason(core.on_samples, "w0", payload("w0", 7, 0), 0.0) == "duplicate"
    core.on_samples("w0", payload("w0", 7 + MAX_HOLES + 9, 0), 0.0)
    assert w.missing == MAX_HOLES + 9


def test_a_second_share_in_one_round_is_a_duplicate():
    core, _ = make("sync")
    birth(core, "w0")
    birth(core, "w1")
    core.new_version(0.0)
    core.on_samples("w0", payload("w0", 0, 1, count=3), 0.0)
    assert reason(core.on_samples, "w0", payload("w0", 1, 1, count=5), 0.0) == "duplicate"
    assert core.admission.round.batches["w0"].count == 3 and core.samples_total == 3


def test_spec_validation_refuses_and_counts_nothing():
    core, learner = make()
    birth(core, "w0")
    assert reason(core.on_samples, "w0", payload("w0", 0, 0, nan=True), 0.0) == "non_finite"
    assert reason(core.on_samples, "w0", payload("w0", 1, 0, action=2), 0.0) == "out_of_range"
    assert reason(core.on_samples, "w0", b"not a batch", 0.0) == "garbage"
    assert learner.added == [] and core.samples_total == 0 and core.batches_total == 0


def test_a_refused_batch_is_not_counted_again_as_missing():
    """Issue 9, item 5: seq 1 was refused (counted under out_of_range); when seq 2 arrives,
    the gap before it is not a lost batch."""
    core, learner = make()
    birth(core, "w0")
    core.on_samples("w0", payload("w0", 0, 0), 0.0)
    assert reason(core.on_samples, "w0", payload("w0", 1, 0, action=2), 0.0) == "out_of_range"
    core.on_samples("w0", payload("w0", 2, 0), 0.0)
    assert core.workers["w0"].missing == 0 and [b.seq for b in learner.added] == [0, 2]
    core.on_samples("w0", payload("w0", 5, 0), 0.0)  # 3 and 4 never came: those are missing
    assert core.workers["w0"].missing == 2


# ---- incarnations: a restarted worker is a new sender, not a duplicate ---------------------------
def test_a_restarted_worker_numbering_from_zero_is_accepted():
    """Issue 9, item 1: the supervisor restarts w0 under its name; the new process numbers from 0."""
    core, learner = make()
    birth(core, "w0", incarnation="a")
    for seq in range(5):
        core.on_samples("w0", payload("w0", seq, 0, incarnation="a"), 0.0)
    birth(core, "w0", 1.0, incarnation="b")  # the restarted process's birth message
    for seq in range(3):
        core.on_samples("w0", payload("w0", seq, 0, incarnation="b"), 1.0)
    w = core.workers["w0"]
    assert (w.incarnation, w.restarts, w.last_seq, w.first_seq, w.missing) == ("b", 1, 2, 0, 0)
    assert len(learner.added) == 8 and core.batches_total == 8
    # resends stay duplicates, per incarnation; a late batch of the old process still counts
    assert reason(core.on_samples, "w0", payload("w0", 2, 0, incarnation="b"), 1.0) == "duplicate"
    assert reason(core.on_samples, "w0", payload("w0", 4, 0, incarnation="a"), 1.0) == "duplicate"
    core.on_samples("w0", payload("w0", 5, 0, incarnation="a"), 1.0)
    assert (w.incarnation, w.last_seq, w.missing) == ("b", 2, 0) and len(learner.added) == 9


def test_a_new_incarnation_without_a_birth_seen_is_still_a_new_sender():
    core, learner = make()
    birth(core, "w0", incarnation="a")
    core.on_samples("w0", payload("w0", 7, 0, incarnation="a"), 0.0)
    core.on_samples("w0", payload("w0", 0, 0, incarnation="c"), 0.0)
    w = core.workers["w0"]
    assert (w.incarnation, w.restarts, w.missing) == ("c", 1, 0) and len(learner.added) == 2


def test_a_restarted_member_delivers_its_share_of_the_open_round():
    """Issue 9, item 1 with PPO: w1 dies (dropped from the round), comes back as a new process and
    sends its share of the open version: the round takes it and trains without waiting for a timeout."""
    core, learner = make("sync", round_timeout_s=30.0)
    birth(core, "w0", incarnation="a0")
    birth(core, "w1", incarnation="a1")
    core.new_version(0.0)
    core.on_samples("w1", payload("w1", 0, 1, incarnation="a1"), 0.0)
    core.step(0.0)  # w0 still owes its share
    last_will(core, "w0", 1.0)
    assert core.admission.round.dropped == {"w0"}
    core.step(1.0)  # w1 delivered, w0 dropped: the round trains
    assert len(learner.rounds) == 1 and core.version == 2
    birth(core, "w0", 2.0, incarnation="b0")
    core.on_samples("w1", payload("w1", 1, 2, incarnation="a1"), 2.0)
    core.on_samples("w0", payload("w0", 0, 2, incarnation="b0"), 2.0)
    step = core.step(2.0)
    assert step.trained and step.round_record["workers"] == ["w0", "w1"] and step.round_record["dropped"] == []
    assert core.admission.round.version == 3 and core.admission.round.members == {"w0", "w1"}


def test_a_dropped_member_that_delivers_late_is_a_member_again():
    core, _ = make("sync", round_timeout_s=30.0)
    birth(core, "w0")
    birth(core, "w1")
    core.new_version(0.0)
    last_will(core, "w1", 0.5)
    birth(core, "w1", 0.6)
    core.on_samples("w1", payload("w1", 0, 1), 0.7)
    r = core.admission.round
    assert "w1" in r.members and "w1" not in r.dropped


def test_checkpointed_sequence_numbers_are_per_incarnation():
    core, _ = make()
    birth(core, "w0", incarnation="a")
    core.on_samples("w0", payload("w0", 4, 0, incarnation="a"), 0.0)
    birth(core, "w0", incarnation="b")
    core.on_samples("w0", payload("w0", 1, 0, incarnation="b"), 0.0)
    saved = core.last_seqs()
    assert saved == {"w0": {"a": 4, "b": 1}} and list(saved["w0"]) == ["a", "b"]  # current one last
    resumed, _ = make()
    resumed.restore(0, 0, 0, saved)
    w = resumed.workers["w0"]
    assert (w.incarnation, w.last_seq, w.online) == ("b", 1, False)
    birth(resumed, "w0", incarnation="b")
    assert reason(resumed.on_samples, "w0", payload("w0", 1, 0, incarnation="b"), 0.0) == "duplicate"
    assert reason(resumed.on_samples, "w0", payload("w0", 4, 0, incarnation="a"), 0.0) == "duplicate"
    resumed.on_samples("w0", payload("w0", 2, 0, incarnation="b"), 0.0)


# ---- epochs: a learner whose version went back ----------------------------------------------
def test_batches_of_a_previous_epoch_never_deadlock_an_async_learner():
    """Issue 9, item 3: the learner resumed from an older checkpoint (version 3, epoch 2) while
    workers ran version 40 of epoch 1. Their batches are not future_version: they are admitted
    as off-policy data of the previous epoch, and counted as such."""
    core, learner = make()
    core.epoch = 2
    core.restore(3, 0, 0, {})
    birth(core, "w0")
    core.on_samples("w0", payload("w0", 0, 40, epoch=1), 0.0)
    assert len(learner.added) == 1 and core.old_epoch_batches == 1
    assert reason(core.on_samples, "w0", payload("w0", 1, 40, epoch=2), 0.0) == "future_version"
    assert reason(core.on_samples, "w0", payload("w0", 2, 3, epoch=3), 0.0) == "future_epoch"
    core.on_samples("w0", payload("w0", 3, 3, epoch=2), 0.0)
    assert len(learner.added) == 2 and core.snapshot(0.0)["old_epoch_batches"] == 1


def test_a_batch_naming_no_epoch_meets_the_version_rules():
    core, learner = make(max_staleness=1)
    core.epoch = 2
    core.restore(5, 0, 0, {})
    birth(core, "w0")
    assert reason(core.on_samples, "w0", payload("w0", 0, 3), 0.0) == "stale_version"
    assert reason(core.on_samples, "w0", payload("w0", 1, 6), 0.0) == "future_version"
    core.on_samples("w0", payload("w0", 2, 5), 0.0)
    assert len(learner.added) == 1 and core.old_epoch_batches == 0


def test_a_sync_round_refuses_shares_of_a_previous_epoch_by_name():
    core, learner = make("sync")
    core.epoch = 5
    birth(core, "w0")
    core.new_version(0.0)
    assert reason(core.on_samples, "w0", payload("w0", 0, 1, epoch=4), 0.0) == "old_epoch"
    core.on_samples("w0", payload("w0", 1, 1, epoch=5), 0.0)
    assert core.step(0.0).trained and core.workers["w0"].missing == 0


def test_oversize_payload_is_refused_before_decoding():
    core, _ = make(max_payload_bytes=64)
    birth(core, "w0")
    assert reason(core.on_samples, "w0", payload("w0", 0, 0), 0.0) == "oversize"


def test_refusals_are_counted_once_by_the_dispatcher():
    """The shell wires the core into a Dispatcher; its counter is the only one."""
    core, learner = make()
    topics = Topics(RUN)
    dispatch = Dispatcher(topics, {Kind.SAMPLES: lambda n, p: core.on_samples(n, p, 0.0)}, logging.getLogger("t"))
    birth(core, "w0")
    for body in (payload("w0", 0, 0), payload("w0", 0, 0), b"junk", payload("w0", 1, 9)):
        assert dispatch(topics.samples("w0"), body) == Kind.SAMPLES
    assert dispatch.rejections.snapshot() == {"duplicate": 1, "garbage": 1, "future_version": 1}
    assert len(learner.added) == 1


# ---- membership and liveness -----------------------------------------------------------------
def test_heartbeats_need_a_birth_and_update_the_worker():
    core, _ = make()
    assert reason(heartbeat, core, "w0", 1.0) == "unknown_sender"
    birth(core, "w0", 1.0)
    heartbeat(core, "w0", 3.0, version=4)
    w = core.workers["w0"]
    assert (w.online, w.last_seen, w.announced_at, w.model_version, w.env_steps) == (True, 3.0, 1.0, 4, 10)
    assert w.info == {"host": "h", "pid": 1}


def test_birth_makes_a_member_and_last_will_drops_it_from_the_round():
    core, _ = make("sync")
    for w in ("w0", "w1", "w2"):
        birth(core, w)
    core.new_version(0.0)
    assert core.admission.round.members == {"w0", "w1", "w2"}
    core.on_samples("w1", payload("w1", 0, 1), 0.0)
    last_will(core, "w0")
    last_will(core, "w1")  # already delivered: its share stays in the round
    r = core.admission.round
    assert not core.workers["w0"].online and r.members == {"w1", "w2"} and r.dropped == {"w0"}
    assert list(r.batches) == ["w1"]


def test_liveness_timeout_marks_offline_and_drops_from_the_round():
    core, _ = make("sync", worker_timeout_s=10.0)
    birth(core, "w0", 0.0)
    birth(core, "w1", 0.0)
    core.new_version(0.0)
    heartbeat(core, "w0", 5.0)
    assert core.check_liveness(10.0) == []  # 10 s is not longer than the timeout
    assert core.check_liveness(14.0) == ["w1"]
    assert core.admission.round.members == {"w0"} and core.admission.round.dropped == {"w1"}
    assert core.check_liveness(15.5) == ["w0"]
    assert core.online() == set() and core.check_liveness(100.0) == []  # offline workers are not dropped twice


def test_resumed_workers_are_offline_and_keep_their_sequence_numbers():
    core, _ = make()
    core.restore(7, 300, 100, {"w0": 7})  # a checkpoint from before incarnations
    assert core.version == 7 and core.last_seqs() == {"w0": {"": 7}} and not core.workers["w0"].online
    assert core.check_liveness(1e6) == []  # never seen in this process: no timeout
    birth(core, "w0")
    assert reason(core.on_samples, "w0", payload("w0", 7, 7), 0.0) == "duplicate"
    core.on_samples("w0", payload("w0", 8, 7), 0.0)
    assert core.workers["w0"].first_seq == 8 and core.batches_total == 101


# ---- rounds ------------------------------------------------------------------------------
def sync_round(workers=("w0", "w1"), **rules):
    core, learner = make("sync", round_timeout_s=30.0, **rules)
    for w in workers:
        birth(core, w)
    core.new_version(0.0)
    return core, learner


def test_round_completes_when_every_member_delivered():
    core, learner = sync_round()
    core.on_samples("w1", payload("w1", 0, 1, count=2), 1.0)
    assert not core.step(2.0).trained
    core.on_samples("w0", payload("w0", 0, 1, count=3), 3.0)
    step = core.step(4.5)
    assert step.trained and step.publish and step.metrics == {"loss": 0.25, "round_workers": 2}
    assert [b.worker for b in learner.rounds[0]] == ["w0", "w1"]
    assert step.round_record == {
        "version": 1,
        "workers": ["w0", "w1"],
        "batch_versions": [1],
        "transitions": 5,
        "missing": [],
        "dropped": [],
        "seconds": 4.5,
    }
    assert core.version == 2 and core.admission.round.version == 2 and core.admission.round.members == {"w0", "w1"}
    assert core.admission.completed == 1 and core.admission.short == 0 and not core.step(5.0).trained


def test_round_timeout_trains_without_the_missing():
    core, learner = sync_round()
    core.on_samples("w0", payload("w0", 0, 1), 1.0)
    assert not core.step(29.9).trained
    step = core.step(30.0)
    assert step.trained and step.round_record["missing"] == ["w1"] and core.admission.short == 1
    assert [[b.worker for b in r] for r in learner.rounds] == [["w0"]]


def test_round_with_no_share_keeps_waiting_and_refreshes_its_members():
    core, learner = sync_round(("w0",))
    birth(core, "w1", 10.0)  # born after the round opened: not a member
    assert (
        not core.step(29.0).trained and core.admission.round.members == {"w0"} and core.admission.round.started == 0.0
    )
    last_will(core, "w0", 30.0)
    assert not core.step(31.0).trained
    r = core.admission.round
    assert (r.version, r.started, r.members) == (1, 31.0, {"w1"}) and learner.rounds == []
    assert not core.step(60.0).trained  # the timeout counts again from the refresh
    core.on_samples("w1", payload("w1", 0, 1), 61.0)
    assert core.step(61.0).trained and learner.rounds[0][0].worker == "w1"


def test_the_first_share_of_a_fresh_run_opens_the_round():
    core, learner = sync_round(())
    birth(core, "w0")  # born after the round opened: not a member yet
    core.on_samples("w0", payload("w0", 0, 1), 0.5)
    assert core.admission.round.members == {"w0"} and core.step(0.6).trained


def test_a_dead_member_makes_a_short_round_that_records_it():
    core, _ = sync_round()
    core.on_samples("w0", payload("w0", 0, 1), 1.0)
    last_will(core, "w1", 2.0)
    step = core.step(2.0)
    assert step.trained and step.round_record["dropped"] == ["w1"] and core.admission.short == 1
    assert core.admission.round.members == {"w0"}


# ---- async training, publishing and flow ---------------------------------------------------------
def test_async_trains_when_due_and_publishes_every_publish_every_updates():
    core, learner = make(publish_every=2)
    birth(core, "w0")
    core.new_version(0.0)
    assert core.step(0.0) == core.step(0.0) and not core.step(0.0).trained
    seq = 0
    published = []
    for _ in range(4):
        for _ in range(2):
            core.on_samples("w0", payload("w0", seq, core.version), 0.0)
            seq += 1
        step = core.step(0.0)
        assert step.trained and step.metrics == {"loss": 0.5}
        published.append(step.publish)
    assert published == [False, True, False, True] and core.version == 3 and learner.updates == 4
    assert core.snapshot(0.0)["train"] == {"loss": 0.5}


def test_flow_control_signals_only_changes():
    core, learner = make()
    birth(core, "w0")
    assert not core.update_flow()
    for seq in range(4):
        core.on_samples("w0", payload("w0", seq, 0), 0.0)
    assert core.update_flow() and core.paused and not core.update_flow()
    core.step(0.0)
    assert core.update_flow() and not core.paused


def test_workers_are_held_from_the_first_due_update_until_the_first_trained_model_is_out():
    """The warm-up hold: while an update is due and no trained model was opened, workers wait
    (a fast env would fill the replay with the untrained policy's play during a slow first
    update); the first trained model goes out at once, whatever ``weights_every_s`` says."""
    core, learner = make(weights_every_s=60.0, publish_every=1)
    birth(core, "w0")
    core.new_version(0.0)  # the untrained model, as the shell publishes at start
    core.on_samples("w0", payload("w0", 0, core.version), 0.0)
    assert not core.update_flow() and not core.paused  # nothing due: holding would deadlock
    core.on_samples("w0", payload("w0", 1, core.version), 0.0)
    assert learner.train_due() and not learner.behind()
    assert core.update_flow() and core.paused  # held before the first update runs
    step = core.step(1.0)
    assert step.trained and step.publish  # 1 s after version 1 opened, weights_every_s is 60: the first goes out
    assert core.version == 2 and core.admission.warm
    assert core.update_flow() and not core.paused
    for seq in (2, 3):
        core.on_samples("w0", payload("w0", seq, core.version), 1.0)
    assert learner.train_due() and not core.update_flow() and not core.paused  # warm: the learner's own rule
    step = core.step(2.0)
    assert step.trained and not step.publish  # weights_every_s holds from here on


def test_a_resumed_learner_is_warm_and_holds_nobody():
    learner = FakeAsync()
    learner.updates = 1000  # as a checkpoint restores it
    mode = AsyncAdmission(learner, max_staleness_s=60.0, publish_every=1, weights_every_s=60.0)
    learner.added = [object(), object()]  # two unconsumed batches: an update is due
    assert learner.train_due() and mode.warm and not mode.behind()


def test_sync_mode_never_pauses_and_reports_its_round():
    core, _ = sync_round()
    assert not core.update_flow() and not core.paused
    snap = core.snapshot(3.0)
    assert snap["round"] == {
        "version": 1,
        "members": ["w0", "w1"],
        "delivered": [],
        "age_s": 3.0,
        "completed": 0,
        "short": 0,
    }
    assert make()[0].snapshot(0.0)["round"] is None


def test_snapshot_reports_workers():
    core, _ = make()
    birth(core, "w0", 1.0)
    heartbeat(core, "w0", 2.0, version=0)
    core.new_version(2.0)
    core.on_samples("w0", payload("w0", 2, 1), 2.5)
    snap = core.snapshot(4.0)
    assert (snap["model_version"], snap["samples"], snap["batches"], snap["workers_online"]) == (1, 3, 1, 1)
    w = snap["workers"]["w0"]
    assert w["last_seen_s"] == 1.5 and w["version_lag"] == 1 and (w["first_seq"], w["last_seq"]) == (2, 2)


def test_snapshot_reports_env_restarts_per_worker_and_summed():
    core, _ = make()
    for name, restarts in (("w0", 3), ("w1", 2)):
        birth(core, name, 1.0)
        core.on_heartbeat(name, encode_json({"model_version": 0, "env_steps": 10, "env_restarts": restarts}), 2.0)
    birth(core, "w2", 1.0)
    heartbeat(core, "w2", 2.0)  # an older worker's heartbeat has no env_restarts
    snap = core.snapshot(3.0)
    assert {n: w["env_restarts"] for n, w in snap["workers"].items()} == {"w0": 3, "w1": 2, "w2": 0}
    assert snap["env_restarts"] == 5


# ---- stateful: random interleavings against a model of the rules -----------------------------------
WORKERS = st.sampled_from(["w0", "w1", "w2"])
STALENESS, ROUND_TIMEOUT, WORKER_TIMEOUT, PUBLISH_EVERY = 2, 5.0, 10.0, 1


class LearnerMachine(RuleBasedStateMachine):
    """Births, deaths, heartbeats, batches of any version and sequence number, time, training."""

    mode = "async"

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.core, self.learner = make(
            self.mode,
            max_staleness=STALENESS,  # the deprecated rule in versions, which the model below follows
            max_staleness_s=1e9,
            round_timeout_s=ROUND_TIMEOUT,
            worker_timeout_s=WORKER_TIMEOUT,
            publish_every=PUBLISH_EVERY,
        )
        self.epoch = self.core.epoch = 5  # as the shell does at start; batches of epoch 4 and 6 come too
        self.current: dict[str, str] = {}  # worker -> the incarnation the core should call current
        self.numbered: dict[str, set[str]] = defaultdict(set)  # incarnations whose batches got numbered
        self.restarts: Counter[str] = Counter()
        self.missing: Counter[str] = Counter()
        self.births = 0
        self.known: set[str] = set()
        for w in ("w0", "w1"):  # a run starts with some workers; w2 is unknown until born
            self.birth(w)
        self.core.new_version(self.now)  # as the shell does at start
        self.version = 1  # the model's view of the rules
        self.warm = False  # async: a trained model was opened (until then workers are held while training is due)
        self.delivered: set[str] = set()
        self.last_seq: dict[tuple[str, str], int] = {}  # (worker, incarnation) -> last seq seen
        self.holes: dict[tuple[str, str], set[int]] = defaultdict(set)  # seqs skipped over, may come late
        self.offered = 0
        self.accepted: list[SampleBatch] = []
        self.refused: Counter[str] = Counter()
        self.trained: list[tuple[int, list[SampleBatch]]] = []

    def switch(self, worker, inc):
        if inc != self.current.get(worker):
            if worker in self.current or self.numbered[worker]:
                self.restarts[worker] += 1
            self.current[worker] = inc

    def expected_reason(self, worker, sender, run, inc, seq, epoch, version, nan) -> str | None:
        if run != RUN:
            return "wrong_run"
        if sender != worker:
            return "sender_mismatch"
        if worker not in self.known:
            return "unknown_sender"
        if inc not in self.numbered[worker]:
            self.switch(worker, inc)
        last = self.last_seq.get((worker, inc), -1)
        holes = self.holes[worker, inc]
        if seq <= last and seq not in holes:
            return "duplicate"
        if seq <= last:  # a batch that comes late, out of order, fills its hole
            holes.discard(seq)
            self.missing[worker] -= 1
        else:
            if last >= 0:
                self.missing[worker] += seq - last - 1
                holes.update(range(last + 1, seq))
            self.last_seq[worker, inc] = seq  # seen from here on, whatever the verdict
        self.numbered[worker].add(inc)
        if epoch > self.epoch:
            return "future_epoch"
        if epoch < self.epoch:
            if self.mode == "sync":
                return "old_epoch"
            return "non_finite" if nan else None
        if version > self.version:
            return "future_version"
        if self.mode == "async" and self.version - version > STALENESS:
            return "stale_version"
        if self.mode == "sync" and version != self.version:
            return "wrong_round"
        if self.mode == "sync" and worker in self.delivered:
            return "duplicate"
        return "non_finite" if nan else None

    @rule(worker=WORKERS, restarted=st.booleans())
    def birth(self, worker, restarted=True):
        """A birth message: a restarted process (a new incarnation) or the same one reconnecting."""
        if restarted or worker not in self.current:
            self.births += 1
            inc = f"{worker}.{self.births}"
        else:
            inc = self.current[worker]
        birth(self.core, worker, self.now, incarnation=inc)
        self.switch(worker, inc)
        self.known.add(worker)

    @rule(worker=WORKERS)
    def death(self, worker):
        last_will(self.core, worker, self.now)
        self.known.add(worker)
        if self.mode == "sync":
            assert worker not in self.core.admission.round.members or worker in self.delivered

    @rule(worker=WORKERS)
    def heartbeat(self, worker):
        try:
            heartbeat(self.core, worker, self.now)
        except Rejected as r:
            assert r.reason == "unknown_sender" and worker not in self.known
        else:
            assert worker in self.known and self.core.workers[worker].online

    @rule(
        worker=WORKERS,
        seq=st.integers(0, 8),
        back=st.sampled_from([0, 0, 0, 1, 2, 3, -1]),  # versions behind the current one (-1: a future one)
        count=st.integers(1, 4),
        fault=st.sampled_from([None, None, None, None, "run", "sender", "nan"]),
        which=st.sampled_from(["current"] * 4 + ["older", "unannounced"]),
        epoch_delta=st.sampled_from([0, 0, 0, 0, 0, -1, 1]),
    )
    def offer(self, worker, seq, back, count, fault, which="current", epoch_delta=0):
        """A batch from the current process, a late one from an earlier process, or one from
        a process whose birth the learner never saw; made with this epoch's model or another's."""
        version = max(self.version - back, 0)
        run = "other-run" if fault == "run" else RUN
        sender = "w7" if fault == "sender" else worker
        older = sorted(self.numbered[worker] - {self.current.get(worker)})
        if which == "older" and older:
            inc = older[0]
        elif which == "unannounced":
            self.births += 1
            inc = f"{worker}.{self.births}"
        else:
            inc = self.current.get(worker, "")
        epoch = self.epoch + epoch_delta
        body = payload(
            worker, seq, version, count, run=run, sender=sender, nan=fault == "nan", incarnation=inc, epoch=epoch
        )
        want = self.expected_reason(worker, sender, run, inc, seq, epoch, version, fault == "nan")
        self.offered += 1
        try:
            batch = self.core.on_samples(worker, body, self.now)
        except Rejected as r:
            assert r.reason == want, (r, want)
            self.refused[r.reason] += 1
        else:
            assert want is None, want
            self.accepted.append(batch)
            if self.mode == "sync":
                self.delivered.add(worker)

    @rule(worker=WORKERS, gap=st.sampled_from([1, 1, 1, 2]), back=st.sampled_from([0, 0, 1, 2, 3]))
    def offer_next(self, worker, gap, back):
        """A well-behaved worker's next batch (most offers of a real run), so versions move on."""
        inc = self.current.get(worker, "")
        self.offer(worker, self.last_seq.get((worker, inc), -1) + gap, back, 2, None)

    @rule(dt=st.sampled_from([0.1, 1.0, 3.0, 6.0, 11.0]))
    def advance(self, dt):
        self.now += dt

    @rule()
    def liveness(self):
        self.core.check_liveness(self.now)
        for w in self.core.workers.values():
            assert not (w.online and w.last_seen is not None and self.now - w.last_seen > WORKER_TIMEOUT)

    @rule()
    def tick(self):
        """One turn of the shell's loop: train if due, open the next version, update the flow signal."""
        r = self.core.admission.round if self.mode == "sync" else None
        before = r and attrs.evolve(r, members=set(r.members), batches=dict(r.batches))
        step = self.core.step(self.now)
        if self.mode == "sync":
            r = self.core.admission.round
            if step.trained:
                batches = self.learner.rounds[-1]
                assert {b.worker: b for b in batches} == before.batches
                assert len({b.worker for b in batches}) == len(batches)
                self.trained.append((self.version, batches))
            elif before.batches:  # shares but no training: a member still owes one, within the timeout
                assert r.members - r.batches.keys() and self.now - r.started < ROUND_TIMEOUT
            elif self.now - before.started > ROUND_TIMEOUT:  # no share in time: wait on, for who is online now
                assert (r.started, r.members) == (self.now, self.core.online())
            else:
                assert (r.started, r.members) == (before.started, before.members)
        if step.publish:
            self.version += 1
            self.delivered = set()
            self.warm = True
        assert step.publish == (step.trained and (self.mode == "sync" or self.learner.updates % PUBLISH_EVERY == 0))
        self.core.update_flow()
        if self.mode == "async":
            held = not self.warm and self.learner.train_due()
            assert self.core.paused == (held or self.learner.behind())
        else:
            assert not self.core.paused

    @invariant()
    def versions_agree(self):
        assert self.core.version == self.version
        if self.mode == "sync":
            r = self.core.admission.round
            assert r.version == self.version and set(r.batches) == self.delivered
            assert all(b.model_version == r.version for b in r.batches.values())

    @invariant()
    def incarnations_restarts_and_gaps_agree(self):
        for name, w in self.core.workers.items():
            assert w.incarnation == self.current.get(name, ""), name
            assert w.restarts == self.restarts[name], name
            assert w.missing == self.missing[name], name

    @invariant()
    def a_round_never_mixes_versions(self):
        for version, batches in self.trained:
            assert all(b.model_version == version for b in batches)

    @invariant()
    def every_offer_is_accepted_or_refused_once(self):
        assert len(self.accepted) + sum(self.refused.values()) == self.offered
        assert self.core.batches_total == len(self.accepted)

    @invariant()
    def no_accepted_batch_is_counted_twice(self):
        if self.mode == "async":
            handed = self.learner.added
        else:
            handed = [b for _, batches in self.trained for b in batches] + list(
                self.core.admission.round.batches.values()
            )
        key = [(b.worker, b.incarnation, b.seq) for b in handed]
        assert sorted(key) == sorted((b.worker, b.incarnation, b.seq) for b in self.accepted)
        assert len(set(key)) == len(key)
        seqs = defaultdict(list)
        for b in self.accepted:
            seqs[b.worker, b.incarnation].append(b.seq)
        # a late batch may fill a hole (out of order), but no sequence number is ever accepted twice
        assert all(len(set(s)) == len(s) for s in seqs.values())

    @invariant()
    def sample_totals_match(self):
        total = sum(b.count for b in self.accepted)
        assert self.core.samples_total == total
        assert sum(w.samples for w in self.core.workers.values()) == total
        if self.mode == "async":
            assert sum(b.count for b in self.learner.added) == total


class SyncLearnerMachine(LearnerMachine):
    mode = "sync"


STATEFUL = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAsyncRules = LearnerMachine.TestCase
TestAsyncRules.settings = STATEFUL
TestSyncRules = SyncLearnerMachine.TestCase
TestSyncRules.settings = STATEFUL


def test_decoded_batches_are_admitted_like_payloads():
    """``admit`` takes an already decoded batch: the same rules, without the decode step."""
    core, learner = make()
    birth(core, "w0")
    batch = decode_batch(payload("w0", 0, 0))
    core.admit("w0", batch, 0.0)
    assert reason(core.admit, "w0", batch, 0.0) == "duplicate" and learner.added == [batch]


def test_metrics_table_of_a_big_fleet_takes_turns_and_reports_changes_first():
    """Past rules.metrics_workers, each snapshot holds that many worker rows: a worker whose
    state changed comes first, the others in turn, so every worker is shown within a few
    messages; the totals count every worker."""
    core, _ = make(metrics_workers=10)
    for i in range(35):
        birth(core, f"w{i:02d}")
    seen: set[str] = set()
    for _ in range(4):  # 35 workers, 10 rows each: all shown in 4 messages
        snap = core.snapshot(1.0)
        assert len(snap["workers"]) == 10 and snap["workers_online"] == 35 and snap["workers_known"] == 35
        seen |= set(snap["workers"])
    assert seen == {f"w{i:02d}" for i in range(35)}
    # the next turn is w05..w14; w33 goes offline and jumps the queue
    last_will(core, "w33", 2.0)
    snap = core.snapshot(2.0)
    assert len(snap["workers"]) == 10 and snap["workers"]["w33"]["online"] is False
    assert snap["workers_online"] == 34 and "w14" not in snap["workers"]


def test_metrics_table_of_a_small_fleet_holds_every_worker():
    core, _ = make(metrics_workers=10)
    for i in range(10):
        birth(core, f"w{i}")
    assert [len(core.snapshot(1.0)["workers"]) for _ in range(3)] == [10, 10, 10]


def test_a_worker_offline_for_longer_than_forget_offline_s_is_forgotten():
    """Fleets whose processes come and go under new names: an offline worker's row and sequence
    numbers go after rules.forget_offline_s; one offline for less, or online, stays."""
    core, _ = make(forget_offline_s=100.0)
    for name in ("gone", "recent", "alive"):
        birth(core, name, 0.0, incarnation="a")
        core.admit(name, decode_batch(payload(name, 0, 0, incarnation="a")), 0.0)
    last_will(core, "gone", 10.0)
    last_will(core, "recent", 60.0)
    heartbeat(core, "alive", 105.0)
    assert core.check_liveness(105.0) == [] and set(core.workers) == {"gone", "recent", "alive"}
    core.check_liveness(111.0)
    assert set(core.workers) == {"recent", "alive"} and "gone" not in core.last_seqs()
    snap = core.snapshot(111.0)
    assert snap["workers_known"] == 2 and set(snap["workers"]) == {"recent", "alive"}
    # a worker marked offline by silence counts from then; one that comes back is kept
    core.check_liveness(200.0)  # "alive" silent for 95 s > worker_timeout_s: offline since 200
    assert set(core.workers) == {"alive"}
    heartbeat(core, "alive", 250.0)
    core.check_liveness(400.0)  # offline again at 400 (silent 150 s), not forgotten yet
    assert set(core.workers) == {"alive"} and not core.workers["alive"].online
    core.check_liveness(501.0)
    assert core.workers == {}


def test_workers_restored_from_a_checkpoint_are_forgotten_if_they_never_come_back():
    core, _ = make(forget_offline_s=100.0)
    core.restore(5, 0, 0, {"old": {"a": 7}, "back": {"b": 3}}, now=1000.0)
    birth(core, "back", 1050.0, incarnation="b")
    core.check_liveness(1101.0)
    assert set(core.workers) == {"back"} and core.last_seqs() == {"back": {"b": 3}}


def test_a_version_replaced_beyond_memory_is_refused_in_words_not_infinity():
    """A batch of a version whose successor came so long ago that its time is no longer held (a
    game PC back after a pulled cable) is stale, and the line says so rather than "infs ago"."""
    mode = AsyncAdmission(FakeAsync(), max_staleness_s=60.0, publish_every=1, weights_every_s=1.0)
    for version, at in ((1, 0.0), (2, 10.0), (3, 200.0)):
        mode.opened(version, set(), at)
    old_batch = types.SimpleNamespace(model_version=1)  # only its model version is read
    with pytest.raises(Rejected) as e:
        mode.check(old_batch, 3, 300.0)
    assert e.value.reason == "stale_version" and "inf" not in str(e.value)
    assert "replaced so long ago that it is no longer held" in str(e.value)


def test_a_heartbeat_record_updates_the_workers_status_and_is_handed_on_decoded_once():
    """The worker's heartbeat, one record on both sides: the core reads it into the worker's
    status and returns it for the fleet's timing; its snapshot makes the metrics record."""
    core, _ = make()
    birth(core, "w0", incarnation="i1")
    hb = Heartbeat(worker="w0", incarnation="i1", model_version=0, env_steps=4096, episodes=12, env_restarts=1)
    hb.timing = {"forward": {"s": 0.5, "n": 100}}
    assert core.on_heartbeat("w0", hb.encode(), 1.0) == hb
    snap = core.snapshot(1.0)
    assert snap["workers"]["w0"]["env_steps"] == 4096 and snap["env_restarts"] == 1
    metrics = LearnerMetrics.decode(LearnerMetrics(updates=0, **snap).encode())
    assert metrics.workers["w0"]["env_steps"] == 4096 and metrics.workers_online == 1
