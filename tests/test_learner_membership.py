"""Membership the learner keeps whatever the broker's retained states say: sequence numbers that
outlive a cleared state or a forgotten worker, env restarts counted over every process, and a
line when a silent worker comes back on the same connection. Plain objects, a fake clock."""

from __future__ import annotations

import logging

from helpers.learner_core_kit import birth, make, payload, reason

from mqttrl.wire import encode_json


def test_a_cleared_retained_state_does_not_forget_sequence_numbers():
    core, learner = make()
    birth(core, "w0", incarnation="a")
    for seq in (0, 1):
        core.on_samples("w0", payload("w0", seq, 0, incarnation="a"), 0.0)
    core.on_worker_state("w0", b"", 1.0)  # someone cleared state/workers/w0
    assert reason(core.on_samples, "w0", payload("w0", 1, 0, incarnation="a"), 2.0) == "duplicate"
    birth(core, "w0", 3.0, incarnation="a")  # its birth again (a reconnect): same process
    assert reason(core.on_samples, "w0", payload("w0", 1, 0, incarnation="a"), 4.0) == "duplicate"
    core.on_samples("w0", payload("w0", 2, 0, incarnation="a"), 5.0)
    assert len(learner.added) == 3 and core.workers["w0"].restarts == 0


def test_a_forgotten_worker_s_resend_is_still_a_duplicate():
    core, learner = make(worker_timeout_s=10.0, forget_offline_s=100.0)
    birth(core, "w0", incarnation="a")
    core.on_samples("w0", payload("w0", 0, 0, incarnation="a"), 0.0)
    core.check_liveness(20.0)  # silent: offline
    core.check_liveness(200.0)  # offline for long: forgotten
    assert "w0" not in core.workers
    birth(core, "w0", 201.0, incarnation="a")  # the same process comes back
    assert reason(core.on_samples, "w0", payload("w0", 0, 0, incarnation="a"), 202.0) == "duplicate"
    core.on_samples("w0", payload("w0", 1, 0, incarnation="a"), 203.0)
    assert len(learner.added) == 2


def hb(core, worker, now, incarnation, env_restarts):
    body = {"model_version": 0, "env_steps": 10, "incarnation": incarnation, "env_restarts": env_restarts}
    core.on_heartbeat(worker, encode_json(body), now)


def test_env_restarts_count_every_process_that_ran_under_a_name():
    core, _ = make(worker_timeout_s=10.0, forget_offline_s=100.0)
    birth(core, "w0", incarnation="a")
    hb(core, "w0", 1.0, "a", 3)
    birth(core, "w0", 2.0, incarnation="b")  # the process restarted: its counter starts at 0
    hb(core, "w0", 3.0, "b", 1)
    hb(core, "w0", 3.5, "a", 7)  # a late heartbeat of the dead process changes nothing
    snap = core.snapshot(4.0)
    assert snap["env_restarts"] == 4 and snap["workers"]["w0"]["env_restarts"] == 4
    birth(core, "w1", incarnation="c")
    hb(core, "w1", 4.0, "c", 2)
    core.check_liveness(30.0)
    core.check_liveness(300.0)  # both forgotten: their restarts still count
    assert core.workers == {} and core.snapshot(300.0)["env_restarts"] == 6


def test_a_worker_back_on_the_same_connection_after_silence_is_logged(caplog):
    core, _ = make(worker_timeout_s=10.0)
    birth(core, "w0", 0.0, incarnation="a")
    core.on_samples("w0", payload("w0", 0, 0, incarnation="a"), 1.0)
    assert core.check_liveness(21.0) == ["w0"]  # silent for 20 s
    caplog.set_level(logging.INFO, logger="mqttrl.learner")
    hb(core, "w0", 21.5, "a", 0)  # its link came back: a heartbeat, no new birth
    lines = [r.getMessage() for r in caplog.records if "back after" in r.getMessage()]
    assert lines == ["worker w0 back after 20s silent (same process)"]
    assert core.workers["w0"].online
    core.on_samples("w0", payload("w0", 1, 0, incarnation="a"), 22.0)  # online already: no second line
    assert len([r for r in caplog.records if "back after" in r.getMessage()]) == 1
