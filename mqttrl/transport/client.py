"""MQTT transport: paho-mqtt 2.x, v2 callbacks, MQTT 5 with a 3.1.1 fallback.

Rules this module enforces for every node:

* network callbacks only enqueue (inbox) or set events;
* one thread (the publisher) owns all publishing and subscribing;
* the outbox is bounded and counts what it drops, per topic kind;
* reconnects use paho's backoff; on every (re)connect the publisher thread
  re-subscribes and re-publishes the node's birth messages;
* a subscription the broker refuses (a failure code in its SUBACK) is made again, after
  0.5 s doubling up to 8 s, until granted: NATS's MQTT refuses a QoS 1 subscription when
  creating its JetStream consumer times out, as it does on a cluster that lost a node;
* with several broker URLs (``mqtt://a:1883,mqtt://b:1883``) a failed connect attempt
  moves to the next broker of the list (a dropped connection first gets one retry on
  the same broker); paho's own reconnect loop does the work, so the unacknowledged QoS 1
  messages it holds are sent again on the new broker;
* the last will is set on every connect; a clean stop publishes the "offline"
  state itself and disconnects without triggering the will;
* with ``manual_ack`` a received QoS 1 message is acknowledged only when the node
  calls :meth:`MqttNode.ack` after handling it, so a node killed with messages in
  its inbox gets them again from its persistent session instead of losing them;
* a message published with a ``tag`` reports the tag from :meth:`MqttNode.take_acked`
  once the broker acknowledged it (an audit of what really left the process).
"""

from __future__ import annotations

import collections
import logging
import queue
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable

import attrs
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

log = logging.getLogger("mqttrl.transport")


class BrokerUnavailable(ConnectionError):
    """The broker could not be reached or refused us; the message says what to check."""


def _join_urls(value: str | Iterable[str]) -> str:
    return value if isinstance(value, str) else ",".join(value)


def _check_url(url: str) -> urllib.parse.SplitResult:
    """One broker URL, parsed; a ValueError naming it when its scheme, host or port is wrong."""
    if not url:
        raise ValueError("an empty broker URL (two commas in a row, or one at the end?)")
    if any(c.isspace() for c in url):
        raise ValueError(f"{url!r} is not a broker URL (it holds a space; separate several URLs with commas)")
    u = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
    if u.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        raise ValueError(f"{url!r} is not a broker URL (scheme must be mqtt:// or mqtts://)")
    try:
        u.port  # noqa: B018  (urllib checks the port only when asked)
    except ValueError as e:
        raise ValueError(f"{url!r} is not a broker URL ({e})") from None
    return u


def _shown(url: str) -> str:
    """``url`` with its password, if any, left out (for logs)."""
    u = urllib.parse.urlsplit(url if "://" in url else f"mqtt://{url}")
    if u.password is None:
        return url
    return u._replace(netloc=u.netloc.replace(f":{u.password}@", ":***@", 1)).geturl()


@attrs.frozen
class BrokerSettings:
    """How to reach the broker. Credentials never travel in the run config.

    ``url`` is one broker URL or an ordered, comma-separated list of them (a list or tuple
    of URLs is joined): the client connects to the first that answers and fails over
    to the next when its broker is gone (:attr:`urls`, :meth:`at`)."""

    url: str = attrs.field(default="mqtt://127.0.0.1:1883", converter=_join_urls)
    username: str | None = None
    password: str | None = None
    #: CA bundle for TLS (mqtts://); None uses the system store
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: skip hostname verification (self-signed test setups only)
    tls_insecure: bool = False
    #: "auto" tries MQTT 5 and falls back to 3.1.1; or "5" / "3.1.1"
    protocol: str = "auto"
    keepalive: int = 15
    #: how long the broker keeps a persistent session while we are away
    session_expiry_s: int = 3600

    @property
    def urls(self) -> tuple[str, ...]:
        """The broker URLs in failover order, each checked (scheme, host, port); a ValueError
        naming the first bad one, a repeated one, or a list mixing TLS and plain brokers."""
        urls = tuple(u.strip() for u in self.url.split(","))
        schemes = {_check_url(u).scheme in ("mqtts", "ssl") for u in urls}
        if len(schemes) > 1:
            raise ValueError(
                f"{self.url!r} mixes mqtts:// and mqtt:// brokers; a failover list is all TLS or all plain"
            )
        seen = set()
        for u in urls:
            if u in seen:
                raise ValueError(f"{u!r} is listed twice in {self.url!r}")
            seen.add(u)
        return urls

    def at(self, index: int) -> BrokerSettings:
        """These settings for the ``index``-th broker of the list alone."""
        urls = self.urls
        return self if len(urls) == 1 else attrs.evolve(self, url=urls[index])

    @property
    def shown(self) -> str:
        """The URL(s) for logs and messages, passwords left out."""
        return ",".join(_shown(u) for u in self.urls)

    @property
    def parsed(self) -> urllib.parse.SplitResult:
        """The first broker's URL, parsed (every URL of a list is checked)."""
        return _check_url(self.urls[0])

    @property
    def host(self) -> str:
        return self.parsed.hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return self.parsed.port or (8883 if self.tls else 1883)

    @property
    def tls(self) -> bool:
        return self.parsed.scheme in ("mqtts", "ssl") or self.tls_ca is not None

    @property
    def user(self) -> str | None:
        return self.username or (urllib.parse.unquote(self.parsed.username) if self.parsed.username else None)

    @property
    def secret(self) -> str | None:
        return self.password or (urllib.parse.unquote(self.parsed.password) if self.parsed.password else None)


@attrs.frozen
class Message:
    topic: str
    payload: bytes
    retain: bool = False
    #: with manual acks: what :meth:`MqttNode.ack` needs (not part of a message's identity)
    mid: int = attrs.field(default=0, eq=False)
    qos: int = attrs.field(default=0, eq=False)
    #: which broker of a failover list sent it (:attr:`MqttNode.moves` when it arrived)
    broker_gen: int = attrs.field(default=0, eq=False)


@attrs.frozen
class Outgoing:
    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False
    #: topic kind used for drop accounting ("samples", "weights", ...)
    kind: str = "other"
    #: returned by ``MqttNode.take_acked`` once the broker acknowledged the message (QoS 1)
    tag: object = None
    #: MQTT 5 message expiry (seconds): the broker forgets the message, a retained one
    #: included, after this long (None: never). Ignored over MQTT 3.1.1, which has no expiry
    expiry_s: int | None = None


def _expiry(msg: Outgoing, protocol: int, packet: int = PacketTypes.PUBLISH) -> Properties | None:
    """The PUBLISH (or will) properties that carry ``msg``'s expiry, if it has one and MQTT 5 is spoken."""
    if msg.expiry_s is None or protocol != mqtt.MQTTv5:
        return None
    props = Properties(packet)
    props.MessageExpiryInterval = int(msg.expiry_s)
    return props


_PROTOCOLS = {"5": mqtt.MQTTv5, "3.1.1": mqtt.MQTTv311}
_negotiated: dict[tuple[str, int], int] = {}


def _configure(client: mqtt.Client, settings: BrokerSettings) -> None:
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


def _probe(settings: BrokerSettings, protocol: int, timeout: float) -> tuple[bool, str]:
    """Connect once with a throwaway clean session; report whether the broker accepted."""
    result: dict = {}
    done = threading.Event()
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=f"mqttrl-probe-{socket.gethostname()[:20]}-{time.monotonic_ns() % 10**9}",
        protocol=protocol,
    )
    _configure(c, settings)

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


def _negotiate_one(settings: BrokerSettings, timeout: float) -> int:
    """MQTT 5 or 3.1.1 for one broker (``settings`` holds one URL)."""
    key = (settings.host, settings.port)
    if key in _negotiated:
        return _negotiated[key]
    url = settings.shown
    ok5, why5 = _probe(settings, mqtt.MQTTv5, timeout)
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
    ok3, why3 = _probe(settings, mqtt.MQTTv311, timeout)
    if ok3:
        _negotiated[key] = mqtt.MQTTv311
        log.info("broker %s speaks MQTT 3.1.1 only; using it", url)
        return mqtt.MQTTv311
    raise BrokerUnavailable(
        f"broker at {url} refused us (MQTT 5: {why5}; MQTT 3.1.1: {why3}). "
        "Check username/password, TLS settings and the broker's ACL"
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


class MqttNode:
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
    ):
        self.settings = settings
        self.client_id = client_id
        self.subscriptions = list(subscriptions)
        self.persistent = persistent
        self.will = will
        self.birth = birth or (lambda: [])
        self.inbox: queue.Queue[Message] = queue.Queue(maxsize=inbox_limit)
        self._inbox_block_s = inbox_block_s
        self._outbox: collections.deque[Outgoing] = collections.deque()
        self._outbox_limit = outbox_limit
        self._cv = threading.Condition()
        self._connected = threading.Event()
        self._need_setup = False
        self._stopping = False
        self.dropped: collections.Counter[str] = collections.Counter()
        self.inbox_dropped = 0
        self.refused = 0
        self.connects = 0
        self.disconnects = 0
        self.manual_ack = manual_ack
        #: (paho's message info, tag) of tagged messages handed to paho and not yet acknowledged
        self._tagged: collections.deque[tuple[mqtt.MQTTMessageInfo, object]] = collections.deque()
        self._tag_lock = threading.Lock()
        #: tags of tagged messages the full outbox dropped (see :meth:`take_dropped`)
        self._dropped_tags: collections.deque[object] = collections.deque()
        #: subscriptions of this connection: paho's mid -> (filter, qos) of a SUBSCRIBE awaiting
        #: its SUBACK, the reason codes of the SUBACKs (paho's thread), the refused ones' next try
        self._sub_lock = threading.Lock()
        self._sub_sent: dict[int, tuple[str, int]] = {}
        self._sub_acks: dict[int, list] = {}
        self._sub_retry: dict[tuple[str, int], tuple[float, int]] = {}
        #: when the publisher thread next has subscription work (a SUBACK to read, a retry due):
        #: one float read per message keeps the lock off the publishing hot path
        self._sub_check_at = float("inf")
        #: mids of this connection's first SUBSCRIBEs still awaiting their SUBACK
        self._setup_mids: set[int] = set()
        #: every subscription of this connection has its SUBACK (granted, or refused and retried)
        self._subscribed = threading.Event()
        #: SUBSCRIBEs the broker refused (each is tried again until granted)
        self.subs_refused = 0
        self.protocol, self._index = negotiate(settings)
        #: one BrokerSettings per broker of the failover list, in order
        self._brokers = [settings.at(i) for i in range(len(settings.urls))]
        #: a connect attempt is under way or failed: the next attempt goes to the next broker
        self._attempt_pending = False
        self.moves = 0
        self._client = self._make_client(inflight)
        self._thread = threading.Thread(target=self._publisher, name=f"mqtt-pub-{client_id}", daemon=True)
        self._started = False
        self._last_drop_log = 0.0

    # ---- setup -------------------------------------------------------------
    def _make_client(self, inflight: int) -> mqtt.Client:
        kwargs = {}
        if self.protocol == mqtt.MQTTv311:
            kwargs["clean_session"] = not self.persistent
        c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=self.protocol,
            manual_ack=self.manual_ack,
            **kwargs,
        )
        _configure(c, self._brokers[self._index])
        c.reconnect_delay_set(min_delay=0.25, max_delay=8)
        c.max_inflight_messages_set(inflight)
        c.max_queued_messages_set(inflight * 4)
        if self.will is not None:
            c.will_set(
                self.will.topic,
                self.will.payload,
                qos=self.will.qos,
                retain=self.will.retain,
                properties=_expiry(self.will, self.protocol, PacketTypes.WILLMESSAGE),
            )
        c.on_pre_connect = self._on_pre_connect
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_publish = self._on_publish
        c.on_subscribe = self._on_subscribe
        return c

    def start(self, wait: float | None = 10.0) -> MqttNode:
        """Connect in the background; with ``wait``, block until connected or raise."""
        props = None
        clean_start: bool | int = mqtt.MQTT_CLEAN_START_FIRST_ONLY
        if self.protocol == mqtt.MQTTv5:
            props = Properties(PacketTypes.CONNECT)
            if self.persistent:
                props.SessionExpiryInterval = self.settings.session_expiry_s
                clean_start = False
            else:
                clean_start = True
        first = self._brokers[self._index]
        self._client.connect_async(
            first.host,
            first.port,
            keepalive=self.settings.keepalive,
            clean_start=clean_start if self.protocol == mqtt.MQTTv5 else mqtt.MQTT_CLEAN_START_FIRST_ONLY,
            properties=props,
        )
        self._client.loop_start()
        self._thread.start()
        self._started = True
        if wait and not self.wait_connected(wait):
            raise BrokerUnavailable(
                f"{self.client_id}: no connection to {self.settings.shown} after {wait:.0f}s; "
                "check that the broker runs and accepts this client's credentials"
            )
        return self

    @property
    def broker(self) -> str:
        """The broker this node is connected to, or trying to reach (password left out)."""
        return self._brokers[self._index].shown

    # ---- callbacks: enqueue only ------------------------------------------
    def _on_pre_connect(self, client, userdata):
        """paho's network thread, before every connect attempt. If the previous attempt failed
        (no socket, no CONNACK, or a refusal) move on to the next broker of the list; after a
        connection that worked and dropped, the first attempt goes to the same broker again."""
        if self._attempt_pending and len(self._brokers) > 1 and not self._stopping:
            gone = self._brokers[self._index]
            self._index = (self._index + 1) % len(self._brokers)
            nxt = self._brokers[self._index]
            # paho's host/port setters refuse while it is connecting, and reconnect() reads these
            client._host, client._port = nxt.host, nxt.port
            client.username_pw_set(nxt.user, nxt.secret)
            self.moves += 1
            log.warning("%s: broker %s gone; moving to %s", self.client_id, gone.shown, nxt.shown)
        self._attempt_pending = True

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            log.error("%s: broker %s refused connection: %s", self.client_id, self.broker, reason_code)
            return
        self._attempt_pending = False
        self.connects += 1
        sock = client.socket()
        if sock is not None and hasattr(sock, "setsockopt"):
            try:  # paho leaves Nagle on: small messages would wait for delayed ACKs (~40 ms on loopback)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        with self._cv:
            self._need_setup = True
            self._cv.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self._connected.clear()
        self._subscribed.clear()
        if not self._stopping:
            self.disconnects += 1
            log.warning("%s: disconnected from broker %s (%s); reconnecting", self.client_id, self.broker, reason_code)

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
        with self._sub_lock:
            self._sub_acks[mid] = list(reason_code_list)
            self._sub_check_at = 0.0
            if mid in self._setup_mids:
                self._setup_mids.discard(mid)
                if not self._setup_mids:
                    self._subscribed.set()
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

    def take_acked(self) -> list[object]:
        """Tags of the tagged messages the broker acknowledged since the last call."""
        with self._tag_lock:
            if not self._tagged:
                return []
            done, waiting = [], collections.deque()
            for info, tag in self._tagged:  # one look per message: an ack landing now is seen next time
                (done.append(tag) if info.is_published() else waiting.append((info, tag)))
            self._tagged = waiting
        return done

    def take_dropped(self) -> list[object]:
        """Tags of tagged messages the full outbox dropped since the last call."""
        out = []
        while self._dropped_tags:
            out.append(self._dropped_tags.popleft())
        return out

    def ack(self, msg: Message) -> None:
        """With ``manual_ack``: the node handled ``msg``; the broker may forget it now.

        A message that came from a broker this node has since moved away from is not
        acknowledged: the new broker never sent it, and the same message id there means
        another message."""
        if self.manual_ack and msg.qos > 0 and msg.broker_gen == self.moves:
            self._client.ack(msg.mid, msg.qos)

    # ---- the publisher thread ---------------------------------------------
    def publish(
        self, topic: str, payload: bytes, qos: int = 1, retain: bool = False, kind: str = "other", tag: object = None
    ) -> None:
        """Queue a message; if the outbox is full the oldest message of the same kind is dropped.
        A ``tag`` comes back from :meth:`take_acked` once the broker acknowledged the message."""
        msg = Outgoing(topic, payload, qos, retain, kind, tag)
        with self._cv:
            if len(self._outbox) >= self._outbox_limit:
                self._drop_one(kind)
            self._outbox.append(msg)
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

    def _drop_one(self, kind: str) -> None:
        for i, m in enumerate(self._outbox):
            if m.kind == kind:
                del self._outbox[i]
                break
        else:
            m = self._outbox.popleft()
        self.dropped[m.kind] += 1
        if m.tag is not None:
            self._dropped_tags.append(m.tag)
        now = time.monotonic()
        if now - self._last_drop_log > 5:
            self._last_drop_log = now
            log.warning(
                "%s: outbox full (%d messages; broker slow or unreachable); dropped oldest %s messages so far: %s",
                self.client_id,
                self._outbox_limit,
                m.kind,
                dict(self.dropped),
            )

    @property
    def outbox_size(self) -> int:
        with self._cv:
            return len(self._outbox)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until connected and the broker answered every subscription (its SUBACKs are in),
        so that a message published to this node's topics from now on reaches it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._connected.wait(timeout):
            return False
        return self._subscribed.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _setup(self) -> None:
        """Runs on the publisher thread after each connect: subscribe, then birth messages."""
        with self._sub_lock:  # a new connection: every subscription is made again below
            self._sub_sent.clear()
            self._sub_acks.clear()
            self._sub_retry.clear()
            self._setup_mids = set()
            self._subscribed.clear()
            self._sub_check_at = float("inf")
        mids = [self._subscribe(topic, qos) for topic, qos in self.subscriptions]
        with self._sub_lock:  # SUBACKs that already came are in _sub_acks
            self._setup_mids = {m for m in mids if m is not None and m not in self._sub_acks}
            if not self._setup_mids:
                self._subscribed.set()
        for m in self.birth():
            self._paho_publish(m)
        self._connected.set()
        log.info("%s: connected to %s", self.client_id, self.broker)

    def _paho_publish(self, m: Outgoing) -> mqtt.MQTTMessageInfo:
        """Hand ``m`` to paho, with its MQTT 5 expiry where it has one."""
        return self._client.publish(
            m.topic, m.payload, qos=m.qos, retain=m.retain, properties=_expiry(m, self.protocol)
        )

    def _subscribe(self, topic: str, qos: int) -> int | None:
        """Send a SUBSCRIBE; its mid, or None when the connection is gone (the next connect
        subscribes again)."""
        with self._sub_lock:  # held while paho sends, so the SUBACK finds its mid registered
            rc, mid = self._client.subscribe(topic, qos)
            if rc == mqtt.MQTT_ERR_SUCCESS:
                self._sub_sent[mid] = (topic, qos)
                return mid
            return None

    def _subscriptions_due(self) -> bool:
        """A SUBACK to check or a refused subscription to try again (publisher thread)."""
        return self._connected.is_set() and time.monotonic() >= self._sub_check_at

    def _check_subscriptions(self) -> None:
        """Schedule a refused subscription again (0.5 s doubling up to 8 s); make the due ones."""
        now = time.monotonic()
        due = []
        with self._sub_lock:
            for mid in list(self._sub_acks.keys() & self._sub_sent.keys()):
                topic, qos = self._sub_sent.pop(mid)
                codes = self._sub_acks.pop(mid)
                failed = [rc for rc in codes if getattr(rc, "is_failure", False) or rc == 0x80]
                if not failed:
                    self._sub_retry.pop((topic, qos), None)
                    continue
                tries = self._sub_retry.get((topic, qos), (0.0, 0))[1] + 1
                delay = min(8.0, 0.5 * 2 ** (tries - 1))
                self._sub_retry[(topic, qos)] = (now + delay, tries)
                self.subs_refused += 1
                if tries <= 3 or tries % 10 == 0:
                    log.warning(
                        "%s: broker %s refused the subscription to %s (%s, try %d); trying again in %.1fs",
                        self.client_id,
                        self.broker,
                        topic,
                        failed[0],
                        tries,
                        delay,
                    )
            for key, (when, tries) in list(self._sub_retry.items()):
                if when <= now:
                    due.append(key)
                    self._sub_retry[key] = (float("inf"), tries)  # until its SUBACK comes
            # the next look: a SUBACK in meanwhile (on_subscribe sets 0), else the next retry due
            pending_acks = bool(self._sub_acks.keys() & self._sub_sent.keys())
            next_retry = min((when for when, _ in self._sub_retry.values()), default=float("inf"))
            self._sub_check_at = 0.0 if pending_acks else next_retry
        for topic, qos in due:
            self._subscribe(topic, qos)

    def _publisher(self) -> None:
        while True:
            with self._cv:
                while (
                    not self._stopping
                    and not self._need_setup
                    and not self._subscriptions_due()
                    and (not self._outbox or not self._connected.is_set())
                ):
                    self._cv.wait(0.2)
                if self._stopping and (not self._outbox or not self._connected.is_set()):
                    return
                setup = self._need_setup
                self._need_setup = False
                subs = not setup and self._subscriptions_due()
                msg = None if setup or subs or not self._outbox else self._outbox.popleft()
            if setup:
                try:
                    self._setup()
                except Exception:  # never let the publisher die
                    log.exception("%s: setup after connect failed", self.client_id)
                continue
            if subs:
                try:
                    self._check_subscriptions()
                except Exception:
                    log.exception("%s: re-subscribing failed", self.client_id)
                continue
            if msg is not None:
                self._send(msg)

    def _send(self, msg: Outgoing) -> None:
        while True:
            info = self._paho_publish(msg)
            if info.rc == mqtt.MQTT_ERR_SUCCESS:
                if msg.tag is not None and msg.qos > 0:
                    with self._tag_lock:
                        self._tagged.append((info, msg.tag))
                return
            if info.rc == mqtt.MQTT_ERR_QUEUE_SIZE:  # paho's inflight window is full: wait for acks
                time.sleep(0.002)
                continue
            if info.rc == mqtt.MQTT_ERR_NO_CONN and msg.qos > 0:
                # the connection dropped just before on_disconnect ran: paho has kept this
                # QoS>0 message and resends it after the reconnect (re-queueing it here would
                # deliver it twice), and its info is marked published when that resend is
                # acknowledged, so the tag is tracked like any other
                if msg.tag is not None:
                    # paho left the error code of this call on the info; it flags the info published
                    # once the resend is acknowledged, but is_published() raises while rc says failed
                    info.rc = mqtt.MQTT_ERR_SUCCESS
                    with self._tag_lock:
                        self._tagged.append((info, msg.tag))
                self._connected.clear()
                return
            # not connected: put it back at the front and wait for the reconnect
            with self._cv:
                self._outbox.appendleft(msg)
                self._connected.clear()
            return

    # ---- shutdown ------------------------------------------------------------
    def stop(self, final: Iterable[Outgoing] = (), flush_timeout: float = 5.0) -> None:
        """Flush the outbox (bounded wait), publish ``final`` messages, disconnect cleanly."""
        if not self._started:
            return
        deadline = time.monotonic() + flush_timeout
        while self.outbox_size and self.connected and time.monotonic() < deadline:
            time.sleep(0.01)
        infos = []
        if self.connected:
            for m in final:
                infos.append(self._paho_publish(m))
        for info in infos:
            try:
                info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            except (RuntimeError, ValueError):
                pass
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        # wait for paho to finish sending what it holds
        while self._client.want_write() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._client.disconnect()
        self._client.loop_stop()
        self._thread.join(timeout=2)
