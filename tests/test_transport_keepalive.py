"""A keepalive timeout is one disconnect: paho reports the first one twice (from its keepalive
check and again from its loop), which used to log two "disconnected" lines and count two
disconnects for one lost connection."""

from __future__ import annotations

import logging
import time

from helpers.link import Link

from mqttrl.transport.client import BrokerSettings, MqttNode


def test_a_keepalive_timeout_is_logged_and_counted_once(mosquitto, caplog):
    link = Link(mosquitto.port)
    node = MqttNode(BrokerSettings(f"mqtt://127.0.0.1:{link.port}", keepalive=1), "keepalive-w0")
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
