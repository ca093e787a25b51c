"""When a worker stops making experience (WorkerCore.should_idle): its link down or stalled, the
learner offline or silent or asking for a pause, its outbox filling. Plain objects and made-up
times; the last test runs the real shell over a fake MQTT node whose link goes down."""

from __future__ import annotations

import threading
import time

from helpers.worker_core_kit import RUN, fake_worker, make_core, published

from mqttrl.nodes.worker.core import (
    BACKLOG_IDLE_MESSAGES,
    IDLE_REASONS,
    LEARNER_SILENT_MIN_S,
    UNACKED_IDLE_S,
    Link,
)
from mqttrl.transport.topics import Kind
from mqttrl.wire import decode_json, encode_json

ONLINE = encode_json({"status": "online"})
OFFLINE = encode_json({"status": "offline", "reason": "connection lost"})


def test_a_worker_with_a_good_link_and_a_live_learner_plays():
    core = make_core()
    assert core.should_idle(0.0) is None  # nothing heard of a learner yet: an old setup plays on
    core.on_learner_state(ONLINE, 0.0)
    core.on_flow(encode_json({"pause": False, "beat_s": 1.0}), 0.0)
    assert core.should_idle(1.0, Link(True, 10, 2000, 0.3)) is None


def test_its_own_link_idles_a_worker():
    core = make_core()
    assert core.should_idle(0.0, Link(connected=False)) == "link_down"
    assert core.should_idle(0.1) == "link_down"  # the last reading holds until the next
    assert core.should_idle(0.2, Link(unacked_age_s=UNACKED_IDLE_S + 0.1)) == "link_stalled"  # a silent cut
    assert core.should_idle(0.3, Link(unacked_age_s=UNACKED_IDLE_S - 0.1)) is None
    # a backlog behind the in-flight window: the env is faster than the link
    assert core.should_idle(0.4, Link(outbox=BACKLOG_IDLE_MESSAGES, outbox_limit=2000)) == "link_behind"
    assert core.should_idle(0.5, Link(outbox=BACKLOG_IDLE_MESSAGES - 1, outbox_limit=2000)) is None
    assert core.should_idle(0.6, Link(outbox=5, outbox_limit=10)) == "link_behind"  # half of a small outbox
    assert core.should_idle(0.7, Link(outbox=4, outbox_limit=10)) is None


def test_the_learner_s_state_beat_and_flow_idle_a_worker():
    core = make_core()
    core.on_learner_state(OFFLINE, 0.0)  # its last will
    assert core.should_idle(0.0) == "learner_offline"
    core.on_learner_state(ONLINE, 1.0)
    assert core.should_idle(1.0) is None
    core.on_flow(encode_json({"pause": True, "beat_s": 1.0}), 2.0)
    assert core.should_idle(2.0) == "learner_paused"
    core.on_flow(encode_json({"pause": False, "beat_s": 1.0}), 3.0)
    assert core.should_idle(3.0 + LEARNER_SILENT_MIN_S - 0.1) is None
    assert core.should_idle(3.0 + LEARNER_SILENT_MIN_S + 0.1) == "learner_silent"  # no will yet, no beat
    core.on_flow(encode_json({"pause": False, "beat_s": 1.0}), 20.0)
    assert core.should_idle(20.5) is None
    core.on_flow(encode_json({"pause": False}), 21.0)  # a learner that does not beat is never "silent"
    assert core.should_idle(1000.0) is None
    assert set(IDLE_REASONS) == {"link_down", "link_stalled", "learner_offline", "learner_silent"} | {
        "learner_paused",
        "link_behind",
    }


def test_idle_time_adds_up_in_heartbeats():
    core = make_core()
    assert core.track_idle(None, 0.0) is False
    assert core.track_idle("link_down", 10.0) is True
    assert core.track_idle("link_down", 11.0) is False
    assert core.heartbeat(0.0, 1, 0, {}, {}, now=12.0).paused_s == 2.0
    assert core.track_idle("learner_silent", 12.5) is True  # another reason: the time goes on
    assert core.track_idle(None, 13.5) is True
    hb = core.heartbeat(0.0, 1, 0, {}, {}, now=20.0)
    assert hb.paused_s == 3.5 and hb.idle is None
    core.track_idle("link_behind", 20.0)
    hb = core.heartbeat(0.0, 1, 0, {}, {}, now=21.0)
    assert hb.paused_s == 4.5 and hb.idle == "link_behind"


def test_the_shell_makes_no_experience_while_its_link_is_down(monkeypatch):
    """The worker over a fake node: while the link is down it steps no env, its heartbeats go on
    (counting paused_s); when the link is back it plays again."""
    worker = fake_worker(monkeypatch, "async")
    worker.client.connected = False
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(published(worker, Kind.HEARTBEAT)) < 3:
            time.sleep(0.02)
        time.sleep(0.2)
        assert worker.env_steps == 0 and worker.core.idle_reason == "link_down"
        assert decode_json(published(worker, Kind.HEARTBEAT)[-1])["paused_s"] > 0
        worker.client.connected = True
        while time.monotonic() < deadline and worker.env_steps == 0:
            time.sleep(0.02)
        assert worker.env_steps > 0 and worker.core.idle_reason is None
    finally:
        worker.stop()
        t.join(10)
    assert RUN and not t.is_alive()
