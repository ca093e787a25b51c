"""The paho client of a node: made, configured, pointed at a broker, with public API only.

Failover moves the client with :func:`point_at` from paho's own callbacks (on a failed
attempt or a drop): ``connect_async`` is paho's public way to change the address at any
time (its ``host``/``port`` setters refuse while a connection is being opened or is
lost), and it keeps the QoS 1 messages paho holds, which its reconnect loop then sends to
the new broker.
"""

from __future__ import annotations

import socket
import ssl

import attrs
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqttrl.transport.backoff import RECONNECT
from mqttrl.transport.messages import Outgoing, expiry_properties
from mqttrl.transport.settings import BrokerSettings


def configure(client: mqtt.Client, settings: BrokerSettings) -> None:
    """Credentials and TLS of ``settings`` on ``client``."""
    if settings.user:
        client.username_pw_set(settings.user, settings.secret)
    if settings.tls:
        client.tls_set(
            ca_certs=settings.tls_ca,
            certfile=settings.tls_cert,
            keyfile=settings.tls_key,
            cert_reqs=ssl.CERT_REQUIRED,
        )
        if settings.tls_insecure:
            client.tls_insecure_set(True)


@attrs.frozen
class ClientSpec:
    """What a node's paho client is made of (everything but the broker's address)."""

    client_id: str
    protocol: int
    persistent: bool = False
    manual_ack: bool = False
    inflight: int = 64
    will: Outgoing | None = None


def make_client(spec: ClientSpec, first: BrokerSettings) -> mqtt.Client:
    """A paho client for ``spec``, with ``first``'s credentials and TLS (callbacks not set)."""
    kwargs = {}
    if spec.protocol == mqtt.MQTTv311:
        kwargs["clean_session"] = not spec.persistent
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=spec.client_id,
        protocol=spec.protocol,
        manual_ack=spec.manual_ack,
        **kwargs,
    )
    configure(c, first)
    c.reconnect_delay_set(min_delay=RECONNECT.first, max_delay=RECONNECT.cap)
    c.max_inflight_messages_set(spec.inflight)
    c.max_queued_messages_set(spec.inflight * 4)
    if spec.will is not None:
        w = spec.will
        props = expiry_properties(w, spec.protocol, PacketTypes.WILLMESSAGE)
        c.will_set(w.topic, w.payload, qos=w.qos, retain=w.retain, properties=props)
    return c


@attrs.frozen
class ConnectOptions:
    """The CONNECT options every attempt uses, on every broker of the list."""

    keepalive: int
    clean_start: bool | int
    properties: Properties | None = None

    @classmethod
    def of(cls, settings: BrokerSettings, protocol: int, persistent: bool) -> ConnectOptions:
        """MQTT 5: a persistent session (clean start off, session expiry) or a clean one; MQTT
        3.1.1 says it with the client's ``clean_session`` instead."""
        if protocol != mqtt.MQTTv5:
            return cls(settings.keepalive, mqtt.MQTT_CLEAN_START_FIRST_ONLY)
        props = Properties(PacketTypes.CONNECT)
        if persistent:
            props.SessionExpiryInterval = settings.session_expiry_s
        return cls(settings.keepalive, not persistent, props)


def point_at(client: mqtt.Client, broker: BrokerSettings, options: ConnectOptions, login: bool = False) -> None:
    """Make ``broker`` the address of ``client``'s next connect attempt (``login``: with its
    credentials). Safe from paho's callbacks: nothing is sent until paho's loop connects."""
    if login:
        client.username_pw_set(broker.user, broker.secret)
    client.connect_async(
        broker.host,
        broker.port,
        keepalive=options.keepalive,
        clean_start=options.clean_start,
        properties=options.properties,
    )


def no_delay(sock: object) -> None:
    """Turn Nagle off: paho leaves it on, and small messages would wait for delayed ACKs
    (~40 ms on loopback)."""
    if sock is not None and hasattr(sock, "setsockopt"):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
