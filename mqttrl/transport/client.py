"""MQTT transport: paho-mqtt 2.x, v2 callbacks, MQTT 5 with a 3.1.1 fallback.

Rules this module enforces for every node:

* network callbacks only enqueue (inbox) or set events;
* one thread (the publisher) owns all publishing and subscribing;
* the outbox is bounded and counts what it drops, per topic kind (:mod:`.outbox`);
* reconnects use paho's backoff (:data:`.backoff.RECONNECT`); on every (re)connect the
  publisher thread re-subscribes and re-publishes the node's birth messages;
* a subscription the broker refuses (a failure code in its SUBACK) is made again, after
  0.5 s doubling up to 8 s, until granted (:mod:`.subscriptions`): NATS's MQTT refuses a
  QoS 1 subscription when creating its JetStream consumer times out, as it does on a
  cluster that lost a node;
* with several broker URLs (``mqtt://a:1883,mqtt://b:1883``) a failed connect attempt
  moves to the next broker of the list (a dropped connection first gets one retry on
  the same broker; :mod:`.failover`); paho's own reconnect loop does the work, so the
  unacknowledged QoS 1 messages it holds are sent again on the new broker;
* the last will is set on every connect; a clean stop publishes the "offline"
  state itself and disconnects without triggering the will;
* with ``manual_ack`` a received QoS 1 message is acknowledged only when the node
  calls :meth:`MqttClient.ack` after handling it, so a node killed with messages in
  its inbox gets them again from its persistent session instead of losing them;
* a message published with a ``tag`` reports the tag from :meth:`MqttClient.take_acked`
  once the broker acknowledged it (an audit of what really left the process; :mod:`.acks`).

This module negotiates the protocol and composes those pieces in :class:`MqttClient`;
:mod:`.connection` is the only place that configures paho's client.
"""

from __future__ import annotations

import collections
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable

import paho.mqtt.client as mqtt

from mqttrl.transport.acks import AckLedger
from mqttrl.transport.connection import ClientSpec, ConnectOptions, configure, make_client, no_delay, point_at
from mqttrl.transport.failover import Failover
from mqttrl.transport.messages import Message, Outgoing, expiry_properties
from mqttrl.transport.outbox import Outbox
from mqttrl.transport.settings import BrokerSettings
from mqttrl.transport.subscriptions import SubscriptionBook

__all__ = [
    "BrokerSettings",
    "BrokerUnavailable",
    "Message",
    "MqttClient",
    "MqttNode",
    "Outgoing",
    "negotiate",
    "negotiate_protocol",
]

log = logging.getLogger("mqttrl.transport")


class BrokerUnavailable(ConnectionError):
    """The broker could not be reached or refused us; the message says what to check."""


_PROTOCOLS = {"5": mqtt.MQTTv5, "3.1.1": mqtt.MQTTv311}
_negotiated: dict[tuple[str, int], int] = {}


def _connected_to_itself(sock) -> bool:
    """TCP's simultaneous open: a local port nothing listens on, picked as the connection's own
    source port, "accepts" the connection, and the probe would read its own CONNECT back."""
    try:
        return sock is not None and sock.getsockname() == sock.getpeername()
    except OSError:
        return False


def _probe(settings: BrokerSettings, protocol: int, timeout: float) -> tuple[bool, str]:
    """Connect once with a throwaway clean session; report whether the broker accepted."""
    result: dict = {}
    done = threading.Event()
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=f"mqttrl-probe-{socket.gethostname()[:20]}-{time.monotonic_ns() % 10**9}",
        protocol=protocol,
    )
    configure(c, settings)

    def on_connect(client, userdata, flags, reason_code, properties):
        result["rc"] = reason_code
        done.set()

    def on_disconnect(client, userdata, flags, reason_code, properties):
        result.setdefault("rc", reason_code)
        done.set()

    c.on_connect = on_connect
    c.on_disconnect = on_disconnect
    try:
        c.connect(settings.host, settings.port, keepalive=5)
    except ssl.SSLError as exc:
        return (
            False,
            f"cannot connect to {settings.host}:{settings.port}: TLS handshake failed ({exc}); check --tls-ca and the server certificate's host name",
        )
    except OSError as exc:
        return False, f"cannot connect to {settings.host}:{settings.port} ({exc})"
    if _connected_to_itself(c.socket()):
        c.socket().close()
        return (
            False,
            f"cannot connect to {settings.host}:{settings.port} (nothing listens: the socket connected to itself)",
        )
    c.loop_start()
    try:
        done.wait(timeout)
    finally:
        c.disconnect()
        c.loop_stop()
    rc = result.get("rc")
    if rc is None:
        return False, "no answer from the broker"
    if getattr(rc, "is_failure", False):
        return False, str(rc)
    return True, "ok"


#: CONNACK refusals that say "not now" rather than "not you": a clustered broker (NATS,
#: EMQX) answers so while it elects new leaders after losing a node; worth asking again
TRANSIENT_REFUSALS = (
    "Server unavailable",
    "Server busy",
    "Unspecified error",
    "Quota exceeded",
    "Connection rate exceeded",
)


def is_transient_refusal(why: str) -> bool:
    """Whether a probe's refusal (``_probe``'s reason) may go away by itself."""
    return any(r in why for r in TRANSIENT_REFUSALS)


def _negotiate_one(settings: BrokerSettings, timeout: float, busy_s: float = 30.0, probe=None) -> int:
    """MQTT 5 or 3.1.1 for one broker (``settings`` holds one URL).

    A broker that refuses both versions for a transient reason (see ``TRANSIENT_REFUSALS``)
    is asked again with backoff for up to ``busy_s``; wrong credentials fail at once."""
    probe = probe or _probe
    deadline = time.monotonic() + busy_s
    delay = 0.5
    while True:
        try:
            return _negotiate_once(settings, timeout, probe)
        except BrokerRefused as refused:
            transient = is_transient_refusal(refused.why5) or is_transient_refusal(refused.why3)
            if not transient or time.monotonic() + delay > deadline:
                raise
            log.warning("broker %s is busy (%s); asking again in %.1f s", settings.shown, refused.why3, delay)
            time.sleep(delay)
            delay = min(delay * 2, 4.0)


class BrokerRefused(BrokerUnavailable):
    """The broker answered and refused both protocol versions; ``why5`` and ``why3`` say why."""

    def __init__(self, message: str, why5: str, why3: str):
        super().__init__(message)
        self.why5, self.why3 = why5, why3


def _negotiate_once(settings: BrokerSettings, timeout: float, probe) -> int:
    key = (settings.host, settings.port)
    if key in _negotiated:
        return _negotiated[key]
    url = settings.shown
    ok5, why5 = probe(settings, mqtt.MQTTv5, timeout)
    if ok5:
        _negotiated[key] = mqtt.MQTTv5
        return mqtt.MQTTv5
    if "TLS handshake" in why5:
        raise BrokerUnavailable(f"MQTT broker at {url}: {why5}")
    if "cannot connect" in why5:
        raise BrokerUnavailable(
            f"MQTT broker at {url} is unreachable: {why5}. Check the host and port, "
            "that the broker is running, and any firewall in between"
        )
    ok3, why3 = probe(settings, mqtt.MQTTv311, timeout)
    if ok3:
        _negotiated[key] = mqtt.MQTTv311
        log.info("broker %s speaks MQTT 3.1.1 only; using it", url)
        return mqtt.MQTTv311
    if "cannot connect" in why3:
        # the first try was answered by something that went away (or by the socket itself)
        raise BrokerUnavailable(
            f"MQTT broker at {url} is unreachable: {why3} (MQTT 5: {why5}). Check the host and port, "
            "that the broker is running, and any firewall in between"
        )
    raise BrokerRefused(
        f"broker at {url} refused us (MQTT 5: {why5}; MQTT 3.1.1: {why3}). "
        "Check username/password, TLS settings and the broker's ACL",
        why5,
        why3,
    )


def negotiate(settings: BrokerSettings, timeout: float = 5.0) -> tuple[int, int]:
    """``(protocol, index)``: the MQTT version to speak and the broker of the list to start on.

    With ``protocol="auto"`` the brokers are probed in order and the first that answers
    picks both (every broker of a failover list is spoken to in that version); with a
    fixed protocol nothing is probed and the client starts on the first broker."""
    urls = settings.urls
    if settings.protocol in _PROTOCOLS:
        return _PROTOCOLS[settings.protocol], 0
    if settings.protocol != "auto":
        raise ValueError(f"protocol {settings.protocol!r}: use auto, 5 or 3.1.1")
    if len(urls) == 1:
        return _negotiate_one(settings, timeout), 0
    failures = []
    for i in range(len(urls)):
        one = settings.at(i)
        try:
            return _negotiate_one(one, timeout), i
        except BrokerUnavailable as e:
            failures.append(str(e))
            if i + 1 < len(urls):
                log.warning("broker %s does not answer; trying %s", one.shown, settings.at(i + 1).shown)
    raise BrokerUnavailable(f"none of the {len(urls)} brokers answered: " + " | ".join(failures))


def negotiate_protocol(settings: BrokerSettings, timeout: float = 5.0) -> int:
    """Pick MQTT 5 when the broker speaks it, else 3.1.1 (amqtt speaks only 3.1.1); with a
    failover list, the version of the first broker that answers."""
    return negotiate(settings, timeout)[0]


class MqttClient:
    """One MQTT client with an inbox, a bounded outbox and a publisher thread.

    ``birth`` is a callable returning the messages to (re)publish on every
    connect (retained state, ...). ``will`` is the last-will message.
    With several broker URLs in ``settings`` it fails over between them (see the module
    docstring); ``moves`` counts the moves and ``broker`` names the current broker.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        client_id: str,
        *,
        subscriptions: Iterable[tuple[str, int]] = (),
        persistent: bool = False,
        will: Outgoing | None = None,
        birth: Callable[[], list[Outgoing]] | None = None,
        inbox_limit: int = 10000,
        inbox_block_s: float = 2.0,
        outbox_limit: int = 10000,
        inflight: int = 64,
        manual_ack: bool = False,
        ack_timeout_s: float = 0.0,
    ):
        self.settings = settings
        self.client_id = client_id
        self.subscriptions = list(subscriptions)
        self.persistent = persistent
        self.will = will
        self.birth = birth or (lambda: [])
        self.manual_ack = manual_ack
        self.inbox: queue.Queue[Message] = queue.Queue(maxsize=inbox_limit)
        self._inbox_block_s = inbox_block_s
        self.inbox_dropped = 0
        self.refused = 0
        self.connects = 0
        self.disconnects = 0
        #: connect attempts made, and the one whose drop was last reported: paho reports a
        #: keepalive timeout twice (its keepalive check, then its loop), one drop is one disconnect
        self._attempts = 0
        self._drop_reported = 0
        #: a QoS 1 message unacknowledged for this long means a frozen link: the connection is
        #: recycled (0: never). Keepalive cannot see it while incoming traffic keeps the link busy
        self.ack_timeout_s = ack_timeout_s
        #: connections dropped by this node because a PUBACK was overdue
        self.recycles = 0
        self._last_recycle = 0.0
        #: guards the outbox and the two flags below; the publisher thread waits on it
        self._cv = threading.Condition()
        self._outbox = Outbox(outbox_limit, name=client_id)
        self._need_setup = False
        self._stopping = False
        self._in_hand = False  # a message the publisher took from the outbox, not yet handed to paho
        self._connected = threading.Event()
        self._acks = AckLedger()
        self._subs = SubscriptionBook()
        self.protocol, first = negotiate(settings)
        self._failover = Failover([settings.at(i) for i in range(len(settings.urls))], first)
        self._connect_options = ConnectOptions.of(settings, self.protocol, persistent)
        spec = ClientSpec(client_id, self.protocol, persistent, manual_ack, inflight, will)
        self._client = self._wire(make_client(spec, self._failover.current))
        self._thread = threading.Thread(target=self._publisher, name=f"mqtt-pub-{client_id}", daemon=True)
        self._started = False

    def _wire(self, c: mqtt.Client) -> mqtt.Client:
        c.on_pre_connect = self._on_pre_connect
        c.on_connect = self._on_connect
        c.on_connect_fail = self._on_connect_fail
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_publish = self._on_publish
        c.on_subscribe = self._on_subscribe
        return c

    def start(self, wait: float | None = 10.0) -> MqttClient:
        """Connect in the background; with ``wait``, block until connected or raise."""
        point_at(self._client, self._failover.current, self._connect_options)
        self._client.loop_start()
        self._thread.start()
        self._started = True
        if wait and not self.wait_connected(wait):
            raise BrokerUnavailable(
                f"{self.client_id}: no connection to {self.settings.shown} after {wait:.0f}s; "
                "check that the broker runs and accepts this client's credentials"
            )
        return self

    # ---- state -----------------------------------------------------------------
    @property
    def broker(self) -> str:
        """The broker this node is connected to, or trying to reach (password left out)."""
        return self._failover.current.shown

    @property
    def moves(self) -> int:
        """How many times this node moved to another broker of its list."""
        return self._failover.moves

    @property
    def dropped(self) -> collections.Counter[str]:
        """Messages the full outbox dropped, per kind."""
        return self._outbox.dropped

    @property
    def subs_refused(self) -> int:
        """SUBSCRIBEs the broker refused (each is tried again until granted)."""
        return self._subs.refused

    @property
    def outbox_limit(self) -> int:
        """How many messages the outbox holds before it drops the oldest of a kind."""
        return self._outbox.limit

    @outbox_limit.setter
    def outbox_limit(self, limit: int) -> None:
        """A new bound (a worker's ``worker.outbox_limit``, known once the run's config arrived);
        an outbox over it drops the oldest of a kind at its next message."""
        if limit < 1:
            raise ValueError(f"outbox limit {limit}: it must hold at least one message")
        with self._cv:
            self._outbox.limit = limit

    @property
    def outbox_size(self) -> int:
        """Messages not in paho's hands yet, the one being handed over too (``stop`` waits for them)."""
        with self._cv:
            return len(self._outbox) + self._in_hand

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until connected and the broker answered every subscription (its SUBACKs are in),
        so that a message published to this node's topics from now on reaches it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._connected.wait(timeout):
            return False
        return self._subs.settled.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    # ---- callbacks (paho's network thread): record and wake, nothing more ----------
    def _on_pre_connect(self, client, userdata):
        self._attempts += 1
        self._failover.attempt_started()

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            log.error("%s: broker %s refused connection: %s", self.client_id, self.broker, reason_code)
            return
        self._failover.connected()
        self.connects += 1
        no_delay(client.socket())
        with self._cv:
            self._need_setup = True
            self._cv.notify_all()

    def _on_connect_fail(self, client, userdata):
        self._fail_over(client)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self._connected.clear()
        self._subs.settled.clear()
        first_report = self._drop_reported != self._attempts
        self._drop_reported = self._attempts
        if not self._stopping and first_report:
            self.disconnects += 1
            log.warning("%s: disconnected from broker %s (%s); reconnecting", self.client_id, self.broker, reason_code)
        self._fail_over(client)

    def _fail_over(self, client: mqtt.Client) -> None:
        """A connect attempt failed or a connection dropped: point paho's next attempt at the
        next broker of the list when :class:`Failover` says so."""
        moved = self._failover.attempt_failed(stopping=self._stopping)
        if moved is not None:
            gone, nxt = moved
            point_at(client, nxt, self._connect_options, login=True)
            log.warning("%s: broker %s gone; moving to %s", self.client_id, gone.shown, nxt.shown)

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        if getattr(reason_code, "is_failure", False):  # MQTT 5 tells us; 3.1.1 brokers drop silently
            self.refused += 1
            if self.refused == 1 or self.refused % 100 == 0:
                log.error(
                    "%s: the broker refused a publish (%s, %d so far): check this user's ACL rights "
                    "(a worker's MQTT username must equal its worker name)",
                    self.client_id,
                    reason_code,
                    self.refused,
                )

    def _on_subscribe(self, client, userdata, mid, reason_code_list, properties):
        self._subs.acked(mid, reason_code_list)
        with self._cv:
            self._cv.notify_all()

    def _on_message(self, client, userdata, msg):
        try:
            self.inbox.put(
                Message(msg.topic, msg.payload, bool(msg.retain), msg.mid, msg.qos, self.moves),
                timeout=self._inbox_block_s,
            )
        except queue.Full:
            # with manual acks it stays unacknowledged: the broker sends it again after a reconnect
            self.inbox_dropped += 1

    # ---- acknowledgements ---------------------------------------------------------
    def take_acked(self) -> list[object]:
        """Tags of the tagged messages the broker acknowledged since the last call."""
        return self._acks.take_acked()

    def oldest_unacked_age(self, now: float | None = None) -> float:
        """Seconds the oldest tagged QoS 1 message has waited for its acknowledgement (0.0:
        none waits); ``now`` is a :func:`time.monotonic` reading."""
        return self._acks.oldest_unacked_age(time.monotonic() if now is None else now)

    def take_unsent(self) -> list[object]:
        """After :meth:`stop`: the tags of tagged messages that never got the broker's acknowledgement
        (still in the outbox, or handed to paho and unacknowledged when the flush wait ended)."""
        with self._cv:
            left = []
            while (m := self._outbox.take()) is not None:
                if m.tag is not None:
                    left.append(m.tag)
        return self._acks.take_unacked() + left

    def take_dropped(self) -> list[object]:
        """Tags of tagged messages the full outbox dropped since the last call."""
        return self._outbox.take_dropped()

    def ack(self, msg: Message) -> None:
        """With ``manual_ack``: the node handled ``msg``; the broker may forget it now.

        A message that came from a broker this node has since moved away from is not
        acknowledged: the new broker never sent it, and the same message id there means
        another message."""
        if self.manual_ack and msg.qos > 0 and msg.broker_gen == self.moves:
            self._client.ack(msg.mid, msg.qos)

    # ---- publishing ------------------------------------------------------------------
    def publish(
        self, topic: str, payload: bytes, qos: int = 1, retain: bool = False, kind: str = "other", tag: object = None
    ) -> None:
        """Queue a message; if the outbox is full the oldest message of the same kind is dropped.
        A ``tag`` comes back from :meth:`take_acked` once the broker acknowledged the message."""
        with self._cv:
            self._outbox.put(Outgoing(topic, payload, qos, retain, kind, tag))
            self._cv.notify_all()

    def send_now(self, topic: str, payload: bytes, kind: str = "other") -> None:
        """QoS 0 from the calling thread, skipping the publisher thread's hop (for request/reply
        latency). Use it from one thread only (that thread then owns this client's QoS 0 traffic);
        while disconnected it falls back to the outbox."""
        if self._connected.is_set():
            info = self._client.publish(topic, payload, qos=0)
            if info.rc == mqtt.MQTT_ERR_SUCCESS:
                return
        self.publish(topic, payload, qos=0, kind=kind)

    def _paho_publish(self, m: Outgoing) -> mqtt.MQTTMessageInfo:
        """Hand ``m`` to paho, with its MQTT 5 expiry where it has one."""
        return self._client.publish(
            m.topic, m.payload, qos=m.qos, retain=m.retain, properties=expiry_properties(m, self.protocol)
        )

    def _paho_subscribe(self, topic: str, qos: int) -> int | None:
        """Send a SUBSCRIBE; its mid, or None when the connection is gone (the next connect
        subscribes again)."""
        rc, mid = self._client.subscribe(topic, qos)
        return mid if rc == mqtt.MQTT_ERR_SUCCESS else None

    # ---- the publisher thread -----------------------------------------------------
    def _publisher(self) -> None:
        while True:
            with self._cv:
                while (
                    not self._stopping
                    and not self._need_setup
                    and not self._subscriptions_due()
                    and not self._ack_overdue(time.monotonic())
                    and (not self._outbox or not self._connected.is_set())
                ):
                    self._cv.wait(0.2)
                if self._stopping and (not self._outbox or not self._connected.is_set()):
                    return
                setup = self._need_setup
                self._need_setup = False
                subs = not setup and self._subscriptions_due()
                msg = None if setup or subs else self._outbox.take()
                self._in_hand = msg is not None
            try:
                if setup:
                    self._setup()
                elif subs:
                    self._check_subscriptions()
            except Exception:  # never let the publisher die
                log.exception("%s: %s failed", self.client_id, "setup after connect" if setup else "re-subscribing")
            if msg is not None:
                self._send(msg)
                self._in_hand = False  # one store: outbox_size reads it under the lock
            self._recycle_if_frozen(time.monotonic())

    def _ack_overdue(self, now: float) -> bool:
        """Whether a PUBACK is overdue by ``ack_timeout_s`` (and no recycle came within that time)."""
        if not self.ack_timeout_s or not self._connected.is_set() or now - self._last_recycle < self.ack_timeout_s:
            return False
        return self._acks.oldest_unacked_age(now) > self.ack_timeout_s

    def _recycle_if_frozen(self, now: float) -> None:
        """Publisher thread: when the oldest unacknowledged message is older than ``ack_timeout_s``
        (and no recycle came within that time), shut the socket down; paho sees a lost connection,
        reconnects with its backoff and sends the unacknowledged messages again."""
        if not self._ack_overdue(now):
            return
        self._last_recycle = now  # at most one recycle per ack_timeout_s, whatever happens next
        age = self._acks.oldest_unacked_age(now)
        sock = self._client.socket()
        if sock is None:
            return
        self.recycles += 1
        what = (
            f"{len(self._acks)} message(s) unacknowledged by {self.broker} for {age:.1f}s (> {self.ack_timeout_s:.1f}s)"
        )
        log.warning("%s: %s: the link looks frozen; reconnecting", self.client_id, what)
        try:
            sock.shutdown(socket.SHUT_RDWR)  # paho's network thread reads the end and reconnects
        except OSError:
            pass

    def _setup(self) -> None:
        """Runs on the publisher thread after each connect: subscribe, then birth messages."""
        self._subs.new_connection()
        self._subs.setup(self.subscriptions, self._paho_subscribe)
        birth = self.birth()
        with self._cv:  # older values queued while away would follow the birth and replace it on the broker
            self._outbox.discard_retained({m.topic for m in birth if m.retain})
        for m in birth:
            self._paho_publish(m)
        # a new connection gets ack_timeout_s to acknowledge what it sends again: the messages' age counts
        # from their first send, across the outage, and would recycle the fresh link at once
        self._last_recycle = time.monotonic()
        self._connected.set()
        log.info("%s: connected to %s", self.client_id, self.broker)

    def _subscriptions_due(self) -> bool:
        """A SUBACK to check or a refused subscription to try again (publisher thread)."""
        return self._connected.is_set() and self._subs.due(time.monotonic())

    def _check_subscriptions(self) -> None:
        """Read the SUBACKs that came; make the refused subscriptions that are due again."""
        due, refusals = self._subs.review(time.monotonic())
        for r in refusals:
            if r.worth_logging:
                log.warning(
                    "%s: broker %s refused the subscription to %s (%s, try %d); trying again in %.1fs",
                    self.client_id,
                    self.broker,
                    r.topic,
                    r.reason,
                    r.tries,
                    r.delay,
                )
        for topic, qos in due:
            self._subs.subscribe(topic, qos, self._paho_subscribe)

    def _send(self, msg: Outgoing) -> None:
        while True:
            info = self._paho_publish(msg)
            if info.rc == mqtt.MQTT_ERR_SUCCESS:
                self._track(info, msg)
                return
            if info.rc == mqtt.MQTT_ERR_QUEUE_SIZE:  # paho's inflight window is full: wait for acks
                time.sleep(0.002)
                continue
            if info.rc == mqtt.MQTT_ERR_NO_CONN and msg.qos > 0:
                # the connection dropped just before on_disconnect ran: paho has kept this
                # QoS>0 message and resends it after the reconnect (re-queueing it here would
                # deliver it twice), and its info is marked published when that resend is
                # acknowledged, so the tag is tracked like any other. paho left this call's
                # error code on the info, and is_published() raises while rc says failed
                info.rc = mqtt.MQTT_ERR_SUCCESS
                self._track(info, msg)
                self._connected.clear()
                return
            # not connected: put it back at the front and wait for the reconnect
            with self._cv:
                self._outbox.put_back(msg)
                self._connected.clear()
            return

    def _track(self, info: mqtt.MQTTMessageInfo, msg: Outgoing) -> None:
        """A tagged QoS 1 message is in paho's hands: its tag comes back once acknowledged."""
        if msg.tag is not None and msg.qos > 0:
            self._acks.track(info, msg.tag, time.monotonic())

    # ---- shutdown ------------------------------------------------------------
    def stop(self, final: Iterable[Outgoing] = (), flush_timeout: float = 5.0) -> None:
        """Flush the outbox (bounded wait), publish ``final`` messages, disconnect cleanly."""
        if not self._started:
            return
        deadline = time.monotonic() + flush_timeout
        while self.outbox_size and self.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        infos = [self._paho_publish(m) for m in final] if self.connected else []
        for info in infos:
            try:
                info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            except (RuntimeError, ValueError):
                pass
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        # wait for paho to finish sending what it holds, and for the broker to acknowledge it
        while (self._client.want_write() or self._acks.unacked()) and self.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        self._client.disconnect()
        self._client.loop_stop()
        self._thread.join(timeout=2)


#: the client's name before issue 35 ("node" names a role: learner, worker, telemetry); kept so
#: code written against it goes on working
MqttNode = MqttClient
