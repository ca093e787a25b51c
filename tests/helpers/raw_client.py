"""A raw paho client for broker tests: records CONNACK, PUBACK reason codes, messages and disconnects."""

from __future__ import annotations

import queue
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from helpers.broker_kit import BROKER_USERS


class Client:
    """A raw paho client that records CONNACK, PUBACK reason codes, messages and disconnects."""

    def __init__(
        self,
        port: int,
        user: str | None,
        *,
        password: str | None = None,
        protocol=mqtt.MQTTv5,
        client_id: str | None = None,
        will: tuple[str, bytes, bool] | None = None,
        session_expiry: int | None = None,
        connect: bool = True,
    ):
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.acks: dict[int, object] = {}
        self.connack = None
        self._connected = threading.Event()
        self.disconnected = threading.Event()
        self._acked = threading.Condition()
        self._subscribed = threading.Event()
        self.protocol = protocol
        self.session_expiry = session_expiry
        self.port = port
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id or f"{user}-{time.monotonic_ns()}",
            protocol=protocol,
            **({"clean_session": True} if protocol == mqtt.MQTTv311 else {}),
        )
        if user:
            self.c.username_pw_set(user, BROKER_USERS.get(user) if password is None else password)
        if will:
            self.c.will_set(will[0], will[1], qos=1, retain=will[2])
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = self._on_disconnect
        self.c.on_message = lambda c, u, msg: self.messages.put(msg)
        self.c.on_publish = self._on_publish
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self._subscribed.set()
        if connect:
            self.connect()

    def connect(self) -> Client:
        props = None
        kwargs = {}
        if self.protocol == mqtt.MQTTv5:
            kwargs["clean_start"] = self.session_expiry is None
            if self.session_expiry is not None:
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = self.session_expiry
        self.c.connect("127.0.0.1", self.port, keepalive=10, properties=props, **kwargs)
        self.c.loop_start()
        assert self._connected.wait(5), "no CONNACK"
        return self

    def _on_connect(self, c, u, flags, rc, p):
        self.connack = rc
        self._connected.set()

    def _on_disconnect(self, c, u, flags, rc, p):
        self.disconnected.set()
        c.disconnect()  # no automatic reconnect: these clients observe a single connection

    def _on_publish(self, c, u, mid, rc, p):
        with self._acked:
            self.acks[mid] = rc
            self._acked.notify_all()

    def sub(self, *topics: str) -> Client:
        for t in topics:
            self._subscribed.clear()
            self.c.subscribe(t, 1)
            assert self._subscribed.wait(5), f"no SUBACK for {t}"
        return self

    def pub(self, topic: str, payload: bytes, retain: bool = False, timeout: float = 5):
        """Publish at QoS 1 and wait for the broker's PUBACK; returns its reason code."""
        info = self.c.publish(topic, payload, qos=1, retain=retain)
        with self._acked:
            assert self._acked.wait_for(lambda: info.mid in self.acks, timeout), f"no PUBACK for {topic}"
            return self.acks[info.mid]

    def until(self, pred, timeout: float = 5) -> list[mqtt.MQTTMessage]:
        """Collect messages until one satisfies ``pred``; returns all collected."""
        got, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            got.append(m)
            if pred(m):
                return got
        raise AssertionError(f"timed out; got {[(m.topic, m.payload[:40]) for m in got]}")

    def close(self) -> None:
        self.c.disconnect()
        # paho's network thread notices within its 1 s select timeout; don't wait for it
        threading.Thread(target=self.c.loop_stop, daemon=True).start()
