"""A keepalive timeout is one disconnect: paho reports the first one twice (from its keepalive
check and again from its loop), which used to log two "disconnected" lines and count two
disconnects for one lost connection. And after a reconnect, the birth's retained values are the
broker's last word: older ones queued while away do not follow them."""

from __future__ import annotations

import logging
import time

import paho.mqtt.client as mqtt

from benchmarks.harness.link import Link
from mqttrl.transport.client import BrokerSettings, MqttClient, Outgoing


def test_a_keepalive_timeout_is_logged_and_counted_once(mosquitto, caplog):
    link = Link(mosquitto.port)
    node = MqttClient(BrokerSettings(f"mqtt://127.0.0.1:{link.port}", keepalive=1), "keepalive-w0")
    try:
        node.start(wait=10)
        caplog.set_level(logging.WARNING, logger="mqttrl.transport")
        link.freeze()  # the broker's PINGRESPs never come: paho's keepalive gives up
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (node.connects >= 2 and node.connected):
            time.sleep(0.05)
        assert node.connects >= 2 and node.connected, "no reconnect after the keepalive timeout"
        time.sleep(0.3)
        lines = [r.getMessage() for r in caplog.records if "disconnected from broker" in r.getMessage()]
        assert len(lines) == 1, lines
        assert node.disconnects == 1
    finally:
        node.stop(flush_timeout=1)
        link.close()


def test_a_birth_supersedes_the_older_retained_values_queued_while_away(mosquitto):
    """Retained values queued while the node had no connection (a learner's weights v1, v2) would
    go out after its birth (v3, the newest) and replace it on the broker: they are dropped."""
    topic = "t/birth/weights"
    node = MqttClient(
        BrokerSettings(mosquitto.url), "birth-w0", birth=lambda: [Outgoing(topic, b"v3", 1, True, "weights")]
    )
    got: list[bytes] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    sub.on_message = lambda _c, _u, m: got.append(m.payload)
    try:
        for v in (b"v1", b"v2"):  # not started: queued in the outbox
            node.publish(topic, v, qos=1, retain=True, kind="weights")
        node.start(wait=10)
        time.sleep(0.5)
        sub.connect("127.0.0.1", mosquitto.port)
        sub.subscribe(topic, qos=1)
        sub.loop_start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not got:
            time.sleep(0.05)
        assert got == [b"v3"]  # the broker's retained value is the birth's, the newest
        assert node.dropped == {}  # superseded, not counted as lost
    finally:
        sub.loop_stop()
        node.stop(flush_timeout=1)
