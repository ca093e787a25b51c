"""What travels: a received :class:`Message`, an :class:`Outgoing` one, and the MQTT 5
properties that carry an outgoing message's expiry."""

from __future__ import annotations

import attrs
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


@attrs.frozen
class Message:
    topic: str
    payload: bytes
    retain: bool = False
    #: with manual acks: what :meth:`MqttClient.ack` needs (not part of a message's identity)
    mid: int = attrs.field(default=0, eq=False)
    qos: int = attrs.field(default=0, eq=False)
    #: which broker of a failover list sent it (:attr:`MqttClient.moves` when it arrived)
    broker_gen: int = attrs.field(default=0, eq=False)


@attrs.frozen
class Outgoing:
    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False
    #: topic kind used for drop accounting ("samples", "weights", ...)
    kind: str = "other"
    #: returned by ``MqttClient.take_acked`` once the broker acknowledged the message (QoS 1)
    tag: object = None
    #: MQTT 5 message expiry (seconds): the broker forgets the message, a retained one
    #: included, after this long (None: never). Ignored over MQTT 3.1.1, which has no expiry
    expiry_s: int | None = None


def expiry_properties(msg: Outgoing, protocol: int, packet: int = PacketTypes.PUBLISH) -> Properties | None:
    """The PUBLISH (or will) properties that carry ``msg``'s expiry, if it has one and MQTT 5 is spoken."""
    if msg.expiry_s is None or protocol != mqtt.MQTTv5:
        return None
    props = Properties(packet)
    props.MessageExpiryInterval = int(msg.expiry_s)
    return props
