"""Failover when the first broker answers the TCP connect but not with a session: it refuses
the CONNECT (a CONNACK with a failure code) or closes the connection before any CONNACK.
paho reports those through on_disconnect (a dead port goes through on_connect_fail, which
tests/test_transport.py covers); either way the node must move to the next broker, through
paho's public API (its host and port say where it is)."""

from __future__ import annotations

import logging
import socket
import threading
import urllib.parse
import uuid

import pytest

from mqttrl.transport.client import BrokerSettings, MqttClient

#: MQTT 5 CONNACK: no session present, reason 0x87 (not authorized), no properties
REFUSAL = b"\x20\x03\x00\x87\x00"


class RudeBroker:
    """Accepts TCP connections and answers each with ``reply`` (maybe nothing), then closes it."""

    def __init__(self, reply: bytes):
        self.reply = reply
        self.accepted = 0
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.url = f"mqtt://127.0.0.1:{self._srv.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(4096)  # the CONNECT
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self._srv.close()


@pytest.mark.parametrize("reply", [REFUSAL, b""], ids=["connack-refused", "closed-before-connack"])
def test_a_broker_that_answers_without_a_session_is_left_for_the_next(shared_mosquitto, reply, caplog):
    caplog.set_level(logging.WARNING, logger="mqttrl.transport")
    rude = RudeBroker(reply)
    good = shared_mosquitto.url
    # a fixed protocol: nothing is probed, so the node really tries the rude broker first
    node = MqttClient(BrokerSettings(url=f"{rude.url},{good}", protocol="5"), f"t-{uuid.uuid4().hex[:10]}")
    try:
        node.start(wait=20)
        assert node.connected and node.broker == good and node.moves == 1
        assert rude.accepted >= 1
        u = urllib.parse.urlsplit(good)
        assert (node._client.host, node._client.port) == (u.hostname, u.port)  # paho's public view
        moves = [r.getMessage() for r in caplog.records if "moving to" in r.getMessage()]
        assert moves == [f"{node.client_id}: broker {rude.url} gone; moving to {good}"]
    finally:
        node.stop(flush_timeout=0.5)
        rude.close()
