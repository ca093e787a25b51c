"""MQTT transport against real brokers: round trips, retained messages, the bounded
outbox, reconnects, last will, clean stop, persistent sessions and protocol fallback."""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from conftest import Mosquitto, node_env

from mqttrl.local.broker import EmbeddedBroker, free_port
from mqttrl.transport.client import BrokerSettings, BrokerUnavailable, Message, MqttNode, Outgoing, negotiate_protocol


# ---------------------------------------------------------------- helpers
@pytest.fixture
def nodes():
    """Make started nodes; all are stopped at the end of the test."""
    made: list[MqttNode] = []

    def make(broker, client_id: str | None = None, start: bool = True, **kwargs) -> MqttNode:
        n = MqttNode(BrokerSettings(url=broker.url), client_id or f"t-{uuid.uuid4().hex[:10]}", **kwargs)
        made.append(n)
        return n.start() if start else n

    yield make
    for n in made:
        n.stop(flush_timeout=0.5)


@pytest.fixture
def prefix():
    return f"test/{uuid.uuid4().hex[:12]}"


def wait_until(pred, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def take(node: MqttNode, n: int, timeout: float = 10.0, skip_probes: bool = True) -> list[Message]:
    """The next ``n`` messages from a node's inbox (probe messages skipped)."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            m = node.inbox.get(timeout=left)
        except queue.Empty:
            break
        if skip_probes and m.payload.startswith(b"probe"):
            continue
        out.append(m)
    return out


def nothing_more(node: MqttNode, wait: float, skip_probes: bool = True) -> list[Message]:
    return take(node, 10**6, timeout=wait, skip_probes=skip_probes)


def ensure_subscribed(sub: MqttNode, pub: MqttNode, topic: str, timeout: float = 10.0) -> None:
    """Publish probes until ``sub`` receives one, so its subscription is known to be active;
    then drain the probes that were still on their way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub.publish(topic, b"probe", qos=0)
        try:
            m = sub.inbox.get(timeout=0.1)
            if m.payload == b"probe":
                break
            sub.inbox.put(m)
        except queue.Empty:
            continue
    else:
        raise AssertionError(f"{sub.client_id} never received on {topic}")
    time.sleep(0.1)


# ---------------------------------------------------------------- basics
def test_publish_subscribe_round_trip(shared_mosquitto, nodes, prefix):
    sub = nodes(shared_mosquitto, subscriptions=[(f"{prefix}/+", 1)])
    pub = nodes(shared_mosquitto)
    ensure_subscribed(sub, pub, f"{prefix}/x")
    payloads = [b"", b"\x00\xffbinary", b"x" * 200_000] + [f"m{i}".encode() for i in range(20)]
    for i, p in enumerate(payloads):
        pub.publish(f"{prefix}/t{i % 3}", p, qos=1)
    got = take(sub, len(payloads))
    assert [m.payload for m in got] == payloads  # QoS 1 from one publisher: in order
    assert [m.topic for m in got] == [f"{prefix}/t{i % 3}" for i in range(len(payloads))]
    assert not any(m.retain for m in got)
    assert sub.protocol == pub.protocol == mqtt.MQTTv5  # mosquitto speaks MQTT 5
    assert pub.dropped == {} and sub.inbox_dropped == 0
    assert nothing_more(sub, 0.2) == []


def test_subscriber_does_not_get_other_topics(shared_mosquitto, nodes, prefix):
    sub = nodes(shared_mosquitto, subscriptions=[(f"{prefix}/a", 1)])
    pub = nodes(shared_mosquitto)
    ensure_subscribed(sub, pub, f"{prefix}/a")
    pub.publish(f"{prefix}/b", b"not for you")
    pub.publish(f"{prefix}/a", b"for you")
    assert [m.payload for m in take(sub, 1)] == [b"for you"]
    assert nothing_more(sub, 0.3) == []


def test_retained_message_reaches_late_subscriber(shared_mosquitto, nodes, prefix):
    pub = nodes(shared_mosquitto)
    pub.publish(f"{prefix}/config", b"v1", retain=True)
    pub.publish(f"{prefix}/config", b"v2", retain=True)  # only the newest is kept
    pub.publish(f"{prefix}/plain", b"gone", retain=False)
    pub.stop()  # flushes
    late = nodes(shared_mosquitto, subscriptions=[(f"{prefix}/#", 1)])
    got = take(late, 1, timeout=5)
    assert got == [Message(f"{prefix}/config", b"v2", True)]
    assert nothing_more(late, 0.3) == []


def test_birth_messages_published_on_connect(shared_mosquitto, nodes, prefix):
    obs = nodes(shared_mosquitto, subscriptions=[(f"{prefix}/state", 1)])
    nodes(shared_mosquitto, birth=lambda: [Outgoing(f"{prefix}/state", b"online", 1, True, "state")])
    got = take(obs, 1)
    assert got and got[0].payload == b"online"


# ---------------------------------------------------------------- outages
def test_outbox_drops_oldest_of_same_kind(mosquitto, nodes, prefix):
    node = nodes(mosquitto, subscriptions=[(f"{prefix}/#", 1)], outbox_limit=6)
    ensure_subscribed(node, node, f"{prefix}/probe")
    mosquitto.stop()
    assert wait_until(lambda: not node.connected, 10), "node did not notice the broker going away"
    for i in range(3):
        node.publish(f"{prefix}/state", f"state{i}".encode(), kind="state")
    for i in range(10):
        node.publish(f"{prefix}/samples", f"samples{i}".encode(), kind="samples")
    assert node.outbox_size == 6
    assert node.dropped == {"samples": 7}  # samples0..6 went, the states were kept
    # a kind with nothing queued: the oldest message of any kind makes room
    node.publish(f"{prefix}/metrics", b"metrics0", kind="metrics")
    assert node.outbox_size == 6
    assert node.dropped == {"samples": 7, "state": 1}

    mosquitto.start()
    expected = [b"state1", b"state2", b"samples7", b"samples8", b"samples9", b"metrics0"]
    got = take(node, len(expected), timeout=20)
    assert [m.payload for m in got] == expected
    assert nothing_more(node, 0.5) == []  # nothing dropped comes back, nothing twice
    assert node.outbox_size == 0
    assert node.dropped == {"samples": 7, "state": 1}


def test_queued_messages_delivered_after_broker_restart(mosquitto, nodes, prefix):
    node = nodes(mosquitto, subscriptions=[(f"{prefix}/self", 1)])
    observer = nodes(mosquitto, subscriptions=[(f"{prefix}/obs", 1)])
    ensure_subscribed(node, node, f"{prefix}/self")
    ensure_subscribed(observer, node, f"{prefix}/obs")
    connects = (node.connects, observer.connects)

    restart = threading.Thread(target=mosquitto.restart, kwargs={"down_for": 1.0})
    restart.start()
    try:
        assert wait_until(lambda: not node.connected, 10)
        for i in range(5):
            node.publish(f"{prefix}/self", f"queued{i}".encode())
        assert node.outbox_size == 5  # held, not lost, while the broker is down
    finally:
        restart.join()

    # the node reconnects by itself, re-subscribes, then flushes its outbox
    got = take(node, 5, timeout=20)
    assert [m.payload for m in got] == [f"queued{i}".encode() for i in range(5)]
    assert node.connected and node.disconnects >= 1 and node.connects > connects[0]
    # a subscription made before the outage still receives after it
    assert wait_until(lambda: observer.connected and observer.connects > connects[1], 20)
    ensure_subscribed(observer, node, f"{prefix}/obs")
    node.publish(f"{prefix}/obs", b"after")
    assert [m.payload for m in take(observer, 1)] == [b"after"]
    assert node.dropped == {}


def test_message_sent_in_the_disconnect_window_arrives_once(tmp_path, nodes, prefix):
    """The publisher thread can hand paho a message after the socket closed but before
    on_disconnect ran. paho keeps a QoS 1 message it could not send and resends it after
    the reconnect, so the node must not queue it a second time."""
    # as root, mosquitto switches to the "mosquitto" account, which cannot write pytest's
    # private tmp dirs: sessions would silently not survive the restart
    broker = Mosquitto(tmp_path / "persistent-broker", persistence=True)
    broker.workdir.mkdir()
    broker.start()
    try:
        # a persistent observer on a persistent broker keeps its subscription across the restart
        observer = nodes(broker, f"obs-{uuid.uuid4().hex[:8]}", persistent=True, subscriptions=[(f"{prefix}/#", 1)])
        node = nodes(broker)
        ensure_subscribed(observer, node, f"{prefix}/probe")
        broker.stop()
        assert wait_until(lambda: not node.connected, 10)
        node._send(Outgoing(f"{prefix}/x", b"exactly once", 1, False, "samples"))  # the race, made deterministic
        broker.start()
        assert [m.payload for m in take(observer, 1, timeout=20)] == [b"exactly once"]
        assert nothing_more(observer, 1.5) == []
    finally:
        broker.stop()
    assert "Error" not in (broker.workdir / "mosquitto.log").read_text()


# ---------------------------------------------------------------- last will and clean stop
CHILD = textwrap.dedent(
    """
    import sys, time
    from mqttrl.transport.client import BrokerSettings, MqttNode, Outgoing
    url, topic = sys.argv[1:3]
    MqttNode(
        BrokerSettings(url=url), "will-child-" + topic.rsplit("/", 2)[-2],
        will=Outgoing(topic, b"WILL: connection lost", 1, True, "state"),
        birth=lambda: [Outgoing(topic, b"online", 1, True, "state")],
    ).start()
    print("ready", flush=True)
    time.sleep(120)
    """
)


def test_last_will_fires_when_client_dies(shared_mosquitto, nodes, prefix):
    topic = f"{prefix}/state"
    obs = nodes(shared_mosquitto, subscriptions=[(topic, 1)])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, shared_mosquitto.url, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=node_env(),
    )
    try:
        got = take(obs, 1, timeout=20)
        assert [m.payload for m in got] == [b"online"], (
            child.stdout.read1().decode() if child.poll() is not None else ""
        )
        child.kill()  # SIGKILL: no DISCONNECT packet, the socket just closes
        child.wait(10)
        got = take(obs, 1, timeout=10)
        assert [m.payload for m in got] == [b"WILL: connection lost"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    late = nodes(shared_mosquitto, subscriptions=[(topic, 1)])
    assert take(late, 1, timeout=5) == [Message(topic, b"WILL: connection lost", True)]


def test_clean_stop_publishes_final_and_not_will(shared_mosquitto, nodes, prefix):
    topic = f"{prefix}/state"
    obs = nodes(shared_mosquitto, subscriptions=[(topic, 1)])
    node = nodes(
        shared_mosquitto,
        will=Outgoing(topic, b"WILL", 1, True, "state"),
        birth=lambda: [Outgoing(topic, b"online", 1, True, "state")],
    )
    assert [m.payload for m in take(obs, 1)] == [b"online"]
    for i in range(50):  # the outbox is flushed before the final message
        node.publish(f"{prefix}/data", f"d{i}".encode())
    node.stop(final=[Outgoing(topic, b"offline: stopped", 1, True, "state")])
    assert not node.connected
    assert [m.payload for m in take(obs, 1)] == [b"offline: stopped"]
    assert nothing_more(obs, 1.0) == []  # no will after a clean disconnect
    late = nodes(shared_mosquitto, subscriptions=[(topic, 1), (f"{prefix}/data", 1)])
    assert take(late, 1, timeout=5) == [Message(topic, b"offline: stopped", True)]
    node.stop()  # a second stop is harmless


# ---------------------------------------------------------------- persistent sessions
@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_session_receives_what_was_published_while_away(shared_mosquitto, nodes, prefix, persistent):
    topic = f"{prefix}/cmd"
    cid = f"persist-{uuid.uuid4().hex[:8]}"
    pub = nodes(shared_mosquitto)
    first = nodes(shared_mosquitto, cid, persistent=persistent, subscriptions=[(topic, 1)])
    ensure_subscribed(first, pub, topic)
    first.stop()
    assert nothing_more(first, 0.1) == []
    for i in range(5):
        pub.publish(topic, f"while-away-{i}".encode(), qos=1)
    assert wait_until(lambda: pub.outbox_size == 0, 5)
    time.sleep(0.3)  # the broker has them before we come back
    again = nodes(shared_mosquitto, cid, persistent=persistent, subscriptions=[(topic, 1)])
    if persistent:
        got = take(again, 5, timeout=10)
        assert [m.payload for m in got] == [f"while-away-{i}".encode() for i in range(5)]
    else:  # control: a clean session starts empty
        assert nothing_more(again, 1.0) == []
    pub.publish(topic, b"live")
    assert [m.payload for m in take(again, 1)] == [b"live"]


# ---------------------------------------------------------------- protocol negotiation
def test_mosquitto_negotiates_mqtt5(shared_mosquitto):
    assert negotiate_protocol(BrokerSettings(url=shared_mosquitto.url)) == mqtt.MQTTv5


def test_forced_mqtt311_works_against_mosquitto(shared_mosquitto, prefix):
    s = BrokerSettings(url=shared_mosquitto.url, protocol="3.1.1")
    node = MqttNode(s, f"v311-{uuid.uuid4().hex[:8]}", subscriptions=[(f"{prefix}/#", 1)]).start()
    try:
        assert node.protocol == mqtt.MQTTv311
        ensure_subscribed(node, node, f"{prefix}/x")
        node.publish(f"{prefix}/x", b"hello 3.1.1")
        assert [m.payload for m in take(node, 1)] == [b"hello 3.1.1"]
    finally:
        node.stop()


def test_amqtt_falls_back_to_mqtt311():
    pytest.importorskip("amqtt")
    with EmbeddedBroker("amqtt") as broker:
        assert broker.kind == "amqtt"
        s = BrokerSettings(url=broker.url)
        sub = MqttNode(s, "amqtt-sub", subscriptions=[("amqtt/+/x", 1)]).start()
        pub = MqttNode(s, "amqtt-pub").start()
        try:
            assert sub.protocol == pub.protocol == mqtt.MQTTv311
            ensure_subscribed(sub, pub, "amqtt/p/x")
            pub.publish("amqtt/a/x", b"over 3.1.1", qos=1)
            pub.publish("amqtt/b/y", b"not subscribed", qos=1)
            got = take(sub, 1)
            assert got == [Message("amqtt/a/x", b"over 3.1.1", False)]
            assert nothing_more(sub, 0.3) == []
        finally:
            pub.stop(flush_timeout=1)
            sub.stop(flush_timeout=1)


def test_unreachable_broker_raises_helpful_error():
    port = free_port()  # nothing listens here
    url = f"mqtt://127.0.0.1:{port}"
    with pytest.raises(BrokerUnavailable) as ei:
        negotiate_protocol(BrokerSettings(url=url), timeout=2)
    msg = str(ei.value)
    assert url in msg and "unreachable" in msg and "host and port" in msg
    with pytest.raises(BrokerUnavailable):
        MqttNode(BrokerSettings(url=url), "nobody")
    assert issubclass(BrokerUnavailable, ConnectionError)


def test_start_times_out_with_helpful_error():
    url = f"mqtt://127.0.0.1:{free_port()}"
    node = MqttNode(BrokerSettings(url=url, protocol="5"), "impatient")  # no probe with a fixed protocol
    try:
        with pytest.raises(BrokerUnavailable, match="no connection to .* after 1s"):
            node.start(wait=1)
    finally:
        node.stop(flush_timeout=0.2)


def test_bad_protocol_setting():
    with pytest.raises(ValueError, match="protocol"):
        negotiate_protocol(BrokerSettings(protocol="4"))


@pytest.mark.parametrize(
    "url,host,port,tls,user,secret",
    [
        ("mqtt://10.0.0.5:1884", "10.0.0.5", 1884, False, None, None),
        ("mqtt://gpu-box", "gpu-box", 1883, False, None, None),
        ("mqtts://gpu-box", "gpu-box", 8883, True, None, None),
        ("gpu-box:1999", "gpu-box", 1999, False, None, None),
        ("mqtt://al%40ice:p%3Ass@h:1", "h", 1, False, "al@ice", "p:ss"),
    ],
)
def test_broker_settings_parse(url, host, port, tls, user, secret):
    s = BrokerSettings(url=url)
    assert (s.host, s.port, s.tls, s.user, s.secret) == (host, port, tls, user, secret)


def test_broker_settings_explicit_credentials_and_bad_scheme():
    s = BrokerSettings(url="mqtt://u:p@h", username="other", password="pw")
    assert (s.user, s.secret) == ("other", "pw")
    assert BrokerSettings(url="mqtt://h", tls_ca="/ca.pem").tls
    with pytest.raises(ValueError, match="scheme"):
        BrokerSettings(url="http://h").host


# ---------------------------------------------------------------- audit: acks and manual acks
def test_tagged_messages_report_the_brokers_ack(shared_mosquitto, nodes, prefix):
    pub = nodes(shared_mosquitto)
    for seq in range(5):
        pub.publish(f"{prefix}/samples", f"b{seq}".encode(), qos=1, tag=seq)
    pub.publish(f"{prefix}/other", b"untagged", qos=1)
    acked: list[object] = []
    assert wait_until(lambda: acked.extend(pub.take_acked()) or len(acked) == 5, 10), acked
    assert sorted(acked) == [0, 1, 2, 3, 4] and pub.take_acked() == []


def test_tags_of_messages_the_full_outbox_dropped_are_reported(mosquitto, nodes, prefix):
    node = nodes(mosquitto, outbox_limit=4)
    mosquitto.stop()
    assert wait_until(lambda: not node.connected, 10)
    for seq in range(7):
        node.publish(f"{prefix}/samples", b"x", kind="samples", tag=seq)
    assert node.take_dropped() == [0, 1, 2] and node.take_dropped() == []
    mosquitto.start()
    acked: list[object] = []
    assert wait_until(lambda: acked.extend(node.take_acked()) or len(acked) == 4, 20), acked
    assert sorted(acked) == [3, 4, 5, 6]


def test_manual_ack_gets_unhandled_messages_again_after_a_crash(shared_mosquitto, nodes, prefix):
    """A learner killed with batches in its inbox: what it had not acknowledged comes again."""
    topic, cid = f"{prefix}/samples", f"t-manual-{uuid.uuid4().hex[:8]}"
    first = nodes(shared_mosquitto, cid, subscriptions=[(topic, 1)], persistent=True, manual_ack=True)
    pub = nodes(shared_mosquitto)
    ensure_subscribed(first, pub, topic)
    for p in (b"m1", b"m2", b"m3"):
        pub.publish(topic, p, qos=1)
    got = take(first, 3)
    assert [m.payload for m in got] == [b"m1", b"m2", b"m3"]
    first.ack(got[0])  # handled m1 only, then the process dies: no DISCONNECT, no more acks
    time.sleep(0.2)
    first._client.loop_stop()
    first._client.socket().close()
    first._started = False  # nothing left to stop cleanly
    second = nodes(shared_mosquitto, cid, subscriptions=[(topic, 1)], persistent=True, manual_ack=True)
    again = take(second, 2, timeout=10)
    assert [m.payload for m in again] == [b"m2", b"m3"]
    for m in again:
        second.ack(m)
    assert nothing_more(second, 0.3) == []
