"""MQTT transport against real brokers: round trips, retained messages, the bounded
outbox, reconnects, last will, clean stop, persistent sessions and protocol fallback."""

from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from helpers.procs import node_env
from helpers.servers import Mosquitto

import mqttrl.transport.client as transport
from mqttrl.broker.embedded import EmbeddedBroker, free_port
from mqttrl.transport.client import (
    BrokerSettings,
    BrokerUnavailable,
    Message,
    MqttClient,
    Outgoing,
    negotiate,
    negotiate_protocol,
)


# ---------------------------------------------------------------- helpers
@pytest.fixture
def nodes():
    """Make started nodes; all are stopped at the end of the test."""
    made: list[MqttClient] = []

    def make(broker, client_id: str | None = None, start: bool = True, **kwargs) -> MqttClient:
        n = MqttClient(BrokerSettings(url=broker.url), client_id or f"t-{uuid.uuid4().hex[:10]}", **kwargs)
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


def take(node: MqttClient, n: int, timeout: float = 10.0, skip_probes: bool = True) -> list[Message]:
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


def nothing_more(node: MqttClient, wait: float, skip_probes: bool = True) -> list[Message]:
    return take(node, 10**6, timeout=wait, skip_probes=skip_probes)


def ensure_subscribed(sub: MqttClient, pub: MqttClient, topic: str, timeout: float = 10.0) -> None:
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
    from mqttrl.transport.client import BrokerSettings, MqttClient, Outgoing
    url, topic = sys.argv[1:3]
    expiry = int(sys.argv[3]) if len(sys.argv) > 3 else None
    MqttClient(
        BrokerSettings(url=url), "will-child-" + topic.rsplit("/", 2)[-2],
        will=Outgoing(topic, b"WILL: connection lost", 1, True, "state", expiry_s=expiry),
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


@pytest.mark.slow
def test_a_retained_will_and_final_message_with_an_expiry_are_forgotten(shared_mosquitto, nodes, prefix):
    """MQTT 5 message expiry on retained states (a worker's offline state): the broker hands them
    to subscribers until they expire, then forgets them, so dead workers' names do not pile up."""
    will_topic, final_topic = f"{prefix}/will-state", f"{prefix}/final-state"
    obs = nodes(shared_mosquitto, subscriptions=[(will_topic, 1)])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, shared_mosquitto.url, will_topic, "2"], stdout=subprocess.DEVNULL, env=node_env()
    )
    try:
        assert [m.payload for m in take(obs, 1, timeout=20)] == [b"online"]
        child.kill()
        child.wait(10)
        assert [m.payload for m in take(obs, 1, timeout=10)] == [b"WILL: connection lost"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    node = nodes(shared_mosquitto)
    node.stop(final=[Outgoing(final_topic, b"offline: stopped", 1, True, "state", expiry_s=2)])
    both = [(will_topic, 1), (final_topic, 1)]
    assert sorted(m.payload for m in take(nodes(shared_mosquitto, subscriptions=both), 2, timeout=5)) == [
        b"WILL: connection lost",
        b"offline: stopped",
    ]
    time.sleep(3)
    assert nothing_more(nodes(shared_mosquitto, subscriptions=both), 1.0) == []


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
    node = MqttClient(s, f"v311-{uuid.uuid4().hex[:8]}", subscriptions=[(f"{prefix}/#", 1)]).start()
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
        sub = MqttClient(s, "amqtt-sub", subscriptions=[("amqtt/+/x", 1)]).start()
        pub = MqttClient(s, "amqtt-pub").start()
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
        MqttClient(BrokerSettings(url=url), "nobody")
    assert issubclass(BrokerUnavailable, ConnectionError)


def test_start_times_out_with_helpful_error():
    url = f"mqtt://127.0.0.1:{free_port()}"
    node = MqttClient(BrokerSettings(url=url, protocol="5"), "impatient")  # no probe with a fixed protocol
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


# ---------------------------------------------------------------- failover between brokers
def test_broker_url_list_parses_in_order():
    s = BrokerSettings(url="mqtt://a:1883, mqtt://u:p%40ss@b ,c:1999")
    assert s.urls == ("mqtt://a:1883", "mqtt://u:p%40ss@b", "c:1999")
    assert [(s.at(i).host, s.at(i).port, s.at(i).user, s.at(i).secret) for i in range(3)] == [
        ("a", 1883, None, None),
        ("b", 1883, "u", "p@ss"),
        ("c", 1999, None, None),
    ]
    assert (s.host, s.port) == ("a", 1883)  # the first broker is the one a plain reader sees
    assert s.shown == "mqtt://a:1883,mqtt://u:***@b,c:1999"  # no password in logs
    assert BrokerSettings(url=["mqtt://a:1", "mqtt://b:2"]).urls == ("mqtt://a:1", "mqtt://b:2")  # a list is joined
    assert BrokerSettings(url="mqtt://a:1").at(0) == BrokerSettings(url="mqtt://a:1")
    one = BrokerSettings(url=["mqtts://a", "mqtts://b"], username="x")
    assert one.at(1).tls and one.at(1).port == 8883 and one.at(1).user == "x"


@pytest.mark.parametrize(
    "url, says",
    [
        ("mqtt://a:1883,mqtt://b:x", "'mqtt://b:x' is not a broker URL"),
        ("mqtt://a:1883,http://b:1883", "'http://b:1883' is not a broker URL (scheme must be mqtt"),
        ("mqtt://a:1883,,mqtt://b:1883", "empty broker URL"),
        ("mqtt://a:1883,", "empty broker URL"),
        ("mqtt://a:1883 mqtt://b:1883", "separate several URLs with commas"),
        ("mqtt://a:1883,mqtts://b:8883", "mixes mqtts:// and mqtt://"),
        ("mqtt://a:1883,mqtt://a:1883", "listed twice"),
    ],
)
def test_a_bad_url_in_the_list_is_named(url, says):
    with pytest.raises(ValueError) as ei:
        BrokerSettings(url=url).urls
    assert says in str(ei.value) and "\n" not in str(ei.value)


def _kill(broker: Mosquitto) -> None:
    """SIGKILL: the broker is gone without a word to its clients."""
    broker.proc.kill()
    broker.proc.wait()
    broker.log.close()
    broker.proc = None


@pytest.fixture
def two_brokers(tmp_path):
    made = []
    for name in ("a", "b"):
        m = Mosquitto(tmp_path / f"broker-{name}")
        m.workdir.mkdir()
        made.append(m.start())
    yield made
    for m in made:
        if m.proc is not None:
            m.stop()


class _Urls:
    def __init__(self, *brokers):
        self.url = ",".join(b.url if hasattr(b, "url") else b for b in brokers)


def test_negotiation_starts_on_the_first_broker_that_answers(two_brokers):
    a, b = two_brokers
    dead = f"mqtt://127.0.0.1:{free_port()}"
    assert negotiate(BrokerSettings(url=f"{dead},{b.url},{a.url}")) == (mqtt.MQTTv5, 1)
    dead2 = f"mqtt://127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnavailable) as ei:
        negotiate(BrokerSettings(url=f"{dead},{dead2}"), timeout=2)
    msg = str(ei.value)
    assert "none of the 2 brokers answered" in msg and dead in msg and dead2 in msg and "\n" not in msg


def test_failover_rotates_in_list_order_and_wraps_around(tmp_path, nodes, prefix, caplog):
    """[dead1, A, dead2]: start on dead1 -> A; A dies: one retry on A, then dead2, dead1 (wrap
    around), A again once it is back."""
    caplog.set_level(logging.WARNING, logger="mqttrl.transport")
    a = Mosquitto(tmp_path / "broker-a")
    a.workdir.mkdir()
    a.start()
    dead1, dead2 = f"mqtt://127.0.0.1:{free_port()}", f"mqtt://127.0.0.1:{free_port()}"
    try:
        # a fixed protocol: nothing is probed, so the node really tries dead1 first
        n = MqttClient(BrokerSettings(url=f"{dead1},{a.url},{dead2}", protocol="5"), f"t-{uuid.uuid4().hex[:10]}")
        try:
            n.start(wait=20)
            assert n.broker == a.url and n.moves == 1
            a.stop()
            assert wait_until(lambda: n.moves >= 3, 20), n.moves  # A retried, then dead2, then dead1
            a.start()  # same port
            assert wait_until(lambda: n.connected and n.broker == a.url, 30)
            moves = [r.getMessage().split("broker ", 1)[1] for r in caplog.records if "moving to" in r.getMessage()]
            assert moves[:4] == [
                f"{dead1} gone; moving to {a.url}",
                f"{a.url} gone; moving to {dead2}",
                f"{dead2} gone; moving to {dead1}",
                f"{dead1} gone; moving to {a.url}",
            ]
        finally:
            n.stop(flush_timeout=0.5)
    finally:
        a.stop()


def test_failover_to_the_second_broker_keeps_subscriptions_birth_and_qos1(two_brokers, nodes, prefix):
    """A client on A; A is killed; the client reaches B, where its subscriptions work, its birth
    message is published, B's retained messages arrive, and what a publisher queued while moving
    (QoS 1) is delivered on B exactly once, in order."""
    a, b = two_brokers
    both = _Urls(a, b)
    # B holds its own retained config (two brokers share no retained messages)
    seed_b = nodes(b)
    seed_b.publish(f"{prefix}/config", b"config on B", retain=True)
    seed_b.stop()
    seed_a = nodes(a)
    seed_a.publish(f"{prefix}/config", b"config on A", retain=True)
    seed_a.stop()

    client = nodes(
        both,
        subscriptions=[(f"{prefix}/config", 1), (f"{prefix}/to-client", 1)],
        persistent=True,
        birth=lambda: [Outgoing(f"{prefix}/state", b"online", 1, True, "state")],
    )
    pub = nodes(both)
    assert client.broker == a.url and pub.broker == a.url
    assert [m.payload for m in take(client, 1)] == [b"config on A"]
    on_b = nodes(b, subscriptions=[(f"{prefix}/samples", 1), (f"{prefix}/state", 1)])
    ensure_subscribed(on_b, on_b, f"{prefix}/samples")
    assert nothing_more(on_b, 0.3) == []  # no birth on B yet: the client is on A

    _kill(a)
    for i in range(20):  # queued (or handed to paho) while the publisher moves
        pub.publish(f"{prefix}/samples", f"s{i}".encode(), qos=1, tag=i)

    assert wait_until(lambda: client.connected and client.broker == b.url, 20), client.broker
    assert wait_until(lambda: pub.connected and pub.broker == b.url, 20), pub.broker
    assert client.moves == 1 and pub.moves == 1
    got = take(on_b, 21, timeout=20)
    assert [m.payload for m in got if m.topic.endswith("/samples")] == [f"s{i}".encode() for i in range(20)]
    assert [m.payload for m in got if m.topic.endswith("/state")] == [b"online"]  # birth re-published on B
    assert nothing_more(on_b, 0.5) == []  # nothing twice
    assert pub.dropped == {}

    # the client's subscriptions were made again on B: B's retained config, then a live message
    assert [m.payload for m in take(client, 1)] == [b"config on B"]
    nodes(b).publish(f"{prefix}/to-client", b"hello from B", qos=1)
    assert [m.payload for m in take(client, 1)] == [b"hello from B"]

    acked: list[object] = []
    wait_until(lambda: acked.extend(pub.take_acked()) or len(acked) >= 20, 10)
    # every one acknowledged once, including one handed to paho in the instant A died (paho keeps
    # it and resends it on B; its tag used to be forgotten)
    assert sorted(acked) == list(range(20)), sorted(set(range(20)) - set(acked))


def test_after_a_move_a_message_from_the_old_broker_is_not_acknowledged_on_the_new(two_brokers, nodes, prefix):
    """A learner (persistent, manual acks) got m_a from A, moved to B and got m_b there under the
    same message id. Acknowledging m_a must not acknowledge m_b: killed now, it gets m_b again."""
    a, b = two_brokers
    topic, cid = f"{prefix}/samples", f"t-move-ack-{uuid.uuid4().hex[:8]}"
    learner = nodes(_Urls(a, b), cid, subscriptions=[(topic, 1)], persistent=True, manual_ack=True)
    pub_a, pub_b = nodes(a), nodes(b)
    ensure_subscribed(learner, pub_a, topic)
    pub_a.publish(topic, b"m_a", qos=1)
    (m_a,) = take(learner, 1)
    _kill(a)
    assert wait_until(lambda: learner.connected and learner.broker == b.url, 20)
    ensure_subscribed(learner, pub_b, topic)
    pub_b.publish(topic, b"m_b", qos=1)
    (m_b,) = take(learner, 1)
    assert (m_a.payload, m_b.payload) == (b"m_a", b"m_b")
    assert m_a.mid == m_b.mid  # the collision this test is about
    learner.ack(m_a)  # handled late, after the move
    time.sleep(0.3)
    learner._client.loop_stop()  # killed before handling m_b
    learner._client.socket().close()
    learner._started = False
    again = nodes(b, cid, subscriptions=[(topic, 1)], persistent=True, manual_ack=True)
    got = take(again, 1, timeout=10)
    assert [m.payload for m in got] == [b"m_b"]
    again.ack(got[0])


def test_a_tagged_message_published_while_paho_has_no_connection_is_reported_acked_once_sent(
    shared_mosquitto, nodes, prefix
):
    """The instant a connection dies, paho's publish says "not connected" yet keeps a QoS 1
    message and sends it after the reconnect. Its tag must come back from take_acked once the
    broker acknowledges it (it used to be forgotten, or to raise from paho's is_published)."""
    topic = f"{prefix}/samples"
    sub = nodes(shared_mosquitto, subscriptions=[(topic, 1)])
    ensure_subscribed(sub, nodes(shared_mosquitto), topic)
    pub = nodes(shared_mosquitto, start=False)
    pub._send(Outgoing(topic, b"kept by paho", 1, False, "samples", tag=7))  # no socket yet: NO_CONN
    assert pub.take_acked() == []
    pub.start()
    acked: list[object] = []
    assert wait_until(lambda: acked.extend(pub.take_acked()) or acked, 10), "no ack reported"
    assert acked == [7]
    assert [m.payload for m in take(sub, 1)] == [b"kept by paho"]
    assert nothing_more(sub, 0.5) == []


def test_oldest_unacked_age_counts_from_the_hand_over_until_the_brokers_ack(shared_mosquitto, nodes, prefix):
    """A tagged QoS 1 message paho holds without a connection ages; once the broker
    acknowledged it nothing waits (the next issue bounds this age)."""
    pub = nodes(shared_mosquitto, start=False)
    assert pub.oldest_unacked_age() == 0.0
    handed = time.monotonic()
    pub._send(Outgoing(f"{prefix}/samples", b"held", 1, False, "samples", tag="t"))  # no socket: NO_CONN
    assert pub.oldest_unacked_age(handed + 3.0) == pytest.approx(3.0, abs=0.5)
    pub.start()
    acked: list[object] = []
    assert wait_until(lambda: acked.extend(pub.take_acked()) or acked, 10)
    assert acked == ["t"] and pub.oldest_unacked_age() == 0.0


class SlowSubscribeLink:
    """A TCP forwarder to a broker that holds each client's SUBSCRIBE for ``delay`` seconds
    (and what follows it, keeping the order): a broker slow to take subscriptions, made
    deterministic."""

    def __init__(self, target_port: int, delay: float):
        self.target_port, self.delay, self.port = target_port, delay, free_port()
        self.subscribes = 0
        self._srv = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._srv.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._client_to_broker, args=(down, up), daemon=True).start()
            threading.Thread(target=self._raw, args=(up, down), daemon=True).start()

    @staticmethod
    def _raw(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(1 << 16):
                b.sendall(data)
        except OSError:
            pass

    @staticmethod
    def _packet_end(buf: bytes) -> int | None:
        """Where the first whole MQTT packet in ``buf`` ends (fixed header, varint length, body)."""
        length, shift = 0, 0
        for i in range(1, min(len(buf), 5)):
            length |= (buf[i] & 0x7F) << shift
            shift += 7
            if not buf[i] & 0x80:
                end = i + 1 + length
                return end if len(buf) >= end else None
        return None

    def _client_to_broker(self, a: socket.socket, b: socket.socket) -> None:
        buf = b""
        try:
            while data := a.recv(1 << 16):
                buf += data
                while (end := self._packet_end(buf)) is not None:
                    packet, buf = buf[:end], buf[end:]
                    if packet[0] >> 4 == 8:  # SUBSCRIBE
                        self.subscribes += 1
                        time.sleep(self.delay)
                    b.sendall(packet)
        except OSError:
            pass

    def close(self) -> None:
        self._srv.close()


def test_start_returns_once_the_broker_has_taken_the_subscriptions(shared_mosquitto, nodes, prefix):
    """A node that says it is connected gets what is published to its topics from then on:
    start() (and wait_connected) wait for the SUBACKs, not only for the SUBSCRIBEs to be sent.
    (Telemetry used to lose the first episodes a learner published right after it started.)"""
    topic = f"{prefix}/episodes"
    link = SlowSubscribeLink(shared_mosquitto.port, delay=1.0)
    try:
        node = MqttClient(
            BrokerSettings(url=f"mqtt://127.0.0.1:{link.port}"),
            f"slow-{uuid.uuid4().hex[:8]}",
            subscriptions=[(topic, 1), (f"{prefix}/other", 1)],
        )
        t0 = time.monotonic()
        node.start(wait=10)
        try:
            assert link.subscribes == 2 and time.monotonic() - t0 >= 1.0
            pub = nodes(shared_mosquitto)
            pub.publish(topic, b"first episode", qos=1)
            assert [m.payload for m in take(node, 1, timeout=5, skip_probes=False)] == [b"first episode"]
        finally:
            node.stop(flush_timeout=0.5)
    finally:
        link.close()


def _scripted_probe(answers: list[tuple[bool, str]]):
    """A probe that answers from a script (pure retry logic, no broker): records its calls."""
    calls = []

    def probe(settings, protocol, timeout):
        calls.append(protocol)
        return answers.pop(0)

    return probe, calls


def test_a_busy_broker_is_asked_again_until_it_accepts():
    # a NATS node whose JetStream is electing leaders refuses both versions for a while
    busy = [(False, "Unsupported protocol version"), (False, "Unspecified error")]
    probe, calls = _scripted_probe(busy * 2 + [(False, "Unsupported protocol version"), (True, "ok")])
    s = BrokerSettings(url=f"mqtt://127.0.0.1:{free_port()}")
    try:
        assert transport._negotiate_one(s, 1.0, busy_s=10, probe=probe) == mqtt.MQTTv311
        assert calls == [mqtt.MQTTv5, mqtt.MQTTv311] * 3
    finally:
        transport._negotiated.pop((s.host, s.port), None)


def test_wrong_credentials_fail_at_once_and_a_busy_broker_fails_after_its_window():
    s = BrokerSettings(url=f"mqtt://127.0.0.1:{free_port()}")
    probe, calls = _scripted_probe([(False, "Bad user name or password"), (False, "Not authorized")])
    with pytest.raises(BrokerUnavailable, match="refused us .*Not authorized.*Check username/password"):
        transport._negotiate_one(s, 1.0, busy_s=10, probe=probe)
    assert len(calls) == 2  # no second try
    probe, calls = _scripted_probe([(False, "Server unavailable")] * 100)
    t0 = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="Server unavailable"):
        transport._negotiate_one(s, 1.0, busy_s=1.2, probe=probe)
    assert time.monotonic() - t0 < 3 and 4 <= len(calls) <= 6  # 0.5 s, then 1 s would pass the window
    assert not transport.is_transient_refusal("Not authorized")
    assert transport.is_transient_refusal("Server unavailable")


def test_a_first_answer_from_something_that_went_away_is_still_unreachable():
    # CI: the MQTT 5 try read "Protocol error" (its socket connected to itself), the 3.1.1 try
    # found nothing listening: that is an unreachable broker, not a refusal of our credentials
    s = BrokerSettings(url=f"mqtt://127.0.0.1:{free_port()}")
    probe, calls = _scripted_probe(
        [(False, "Protocol error"), (False, f"cannot connect to 127.0.0.1:{s.port} ([Errno 111] Connection refused)")]
    )
    with pytest.raises(BrokerUnavailable, match="unreachable: cannot connect.*Connection refused") as raised:
        transport._negotiate_one(s, 1.0, busy_s=10, probe=probe)
    assert "username/password" not in str(raised.value)
    assert len(calls) == 2


def test_a_socket_connected_to_itself_is_told_from_a_real_connection():
    # TCP's simultaneous open: connecting from port P to port P where nothing listens succeeds
    port = free_port()
    with socket.socket() as itself:
        itself.bind(("127.0.0.1", port))
        itself.connect(("127.0.0.1", port))
        assert transport._connected_to_itself(itself)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            assert not transport._connected_to_itself(client)
    assert not transport._connected_to_itself(None)
