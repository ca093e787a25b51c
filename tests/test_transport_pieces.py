"""The transport's pure pieces, each alone with plain objects (no broker, no paho loop):
failover rotation, backoff, the outbox's drop rule, the acknowledgement ledger and the
subscription bookkeeping."""

from __future__ import annotations

import logging
import threading

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from mqttrl.transport.acks import AckLedger
from mqttrl.transport.backoff import RECONNECT, SUBSCRIBE_RETRY, Backoff
from mqttrl.transport.connection import ConnectOptions, point_at
from mqttrl.transport.failover import Failover
from mqttrl.transport.messages import Outgoing
from mqttrl.transport.outbox import Outbox
from mqttrl.transport.settings import BrokerSettings
from mqttrl.transport.subscriptions import SubscriptionBook, is_refusal


# ---------------------------------------------------------------- backoff
def test_backoff_doubles_from_its_first_wait_up_to_its_cap():
    b = Backoff(first=0.5, cap=8.0)
    assert [b.delay(t) for t in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert b.delay(0) == 0.5  # never less than the first wait
    assert (RECONNECT.first, RECONNECT.cap) == (0.25, 8.0)
    assert (SUBSCRIBE_RETRY.first, SUBSCRIBE_RETRY.cap) == (0.5, 8.0)


# ---------------------------------------------------------------- failover
def test_a_failed_attempt_moves_to_the_next_broker_and_wraps_around():
    f = Failover(["a", "b", "c"])
    moves = []
    for _ in range(4):
        f.attempt_started()
        moves.append(f.attempt_failed())
    assert moves == [("a", "b"), ("b", "c"), ("c", "a"), ("a", "b")]
    assert f.current == "b" and f.moves == 4


def test_a_dropped_connection_is_retried_once_on_the_same_broker():
    f = Failover(["a", "b"], start=1)
    f.attempt_started()
    f.connected()
    assert f.attempt_failed() is None and f.current == "b"  # the drop: retry here
    f.attempt_started()
    assert f.attempt_failed() == ("b", "a")  # the retry failed: move on
    assert f.moves == 1


def test_one_failure_reported_twice_moves_once():
    f = Failover(["a", "b", "c"])
    f.attempt_started()
    assert f.attempt_failed() == ("a", "b")
    assert f.attempt_failed() is None  # e.g. a refused CONNACK, then the socket closing
    assert f.current == "b" and f.moves == 1


def test_no_move_with_one_broker_or_while_stopping():
    one = Failover(["a"])
    one.attempt_started()
    assert one.attempt_failed() is None and one.moves == 0
    two = Failover(["a", "b"])
    two.attempt_started()
    assert two.attempt_failed(stopping=True) is None and two.current == "a"


def test_failover_refuses_an_empty_list_or_a_start_outside_it():
    with pytest.raises(ValueError, match="at least one broker"):
        Failover([])
    with pytest.raises(ValueError, match="outside"):
        Failover(["a"], start=1)


def test_point_at_moves_a_paho_client_with_public_api_only():
    """connect_async is allowed while paho is between attempts; the next attempt reads the
    new address and credentials from paho's public properties."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="t", protocol=mqtt.MQTTv5)
    a = BrokerSettings(url="mqtt://alice:pw-a@127.0.0.1:1883")
    b = BrokerSettings(url="mqtt://bob:pw-b@localhost:1884")
    opts = ConnectOptions.of(a, mqtt.MQTTv5, persistent=True)
    point_at(c, a, opts)
    assert (c.host, c.port) == ("127.0.0.1", 1883)
    point_at(c, b, opts, login=True)
    assert (c.host, c.port, c.username, c.password) == ("localhost", 1884, "bob", "pw-b")
    assert c.keepalive == a.keepalive


def test_connect_options_ask_for_a_persistent_session_only_when_told():
    s = BrokerSettings(session_expiry_s=77)
    kept = ConnectOptions.of(s, mqtt.MQTTv5, persistent=True)
    assert kept.clean_start is False and kept.properties.SessionExpiryInterval == 77
    clean = ConnectOptions.of(s, mqtt.MQTTv5, persistent=False)
    assert clean.clean_start is True and not hasattr(clean.properties, "SessionExpiryInterval")
    v3 = ConnectOptions.of(s, mqtt.MQTTv311, persistent=True)
    assert v3.clean_start == mqtt.MQTT_CLEAN_START_FIRST_ONLY and v3.properties is None


# ---------------------------------------------------------------- outbox
def _msg(kind: str, n: int, tag: object = None) -> Outgoing:
    return Outgoing(f"t/{kind}", str(n).encode(), kind=kind, tag=tag)


def test_a_full_outbox_drops_the_oldest_of_the_same_kind():
    box = Outbox(3, clock=lambda: 0.0)
    for m in (_msg("samples", 1), _msg("state", 1), _msg("samples", 2)):
        assert box.put(m) is None
    dropped = box.put(_msg("samples", 3))
    assert dropped == _msg("samples", 1)
    assert [box.take() for _ in range(3)] == [_msg("state", 1), _msg("samples", 2), _msg("samples", 3)]
    assert box.take() is None and len(box) == 0
    assert box.dropped == {"samples": 1}


def test_a_full_outbox_without_that_kind_drops_the_oldest_of_all():
    box = Outbox(2, clock=lambda: 0.0)
    box.put(_msg("samples", 1))
    box.put(_msg("state", 1))
    assert box.put(_msg("heartbeat", 1)) == _msg("samples", 1)
    assert box.dropped == {"samples": 1} and len(box) == 2


def test_the_outbox_reports_the_tags_it_dropped_once():
    box = Outbox(1, clock=lambda: 0.0)
    for n in range(4):
        box.put(_msg("samples", n, tag=n))
    assert box.take_dropped() == [0, 1, 2] and box.take_dropped() == []
    box.put(_msg("samples", 9))  # drops tagged 3
    assert box.take_dropped() == [3]
    box.put(_msg("samples", 10))  # drops untagged 9: counted, no tag to report
    assert box.take_dropped() == [] and box.dropped == {"samples": 5}


def test_a_message_put_back_goes_first_even_when_full():
    box = Outbox(1, clock=lambda: 0.0)
    box.put(_msg("samples", 1))
    sent = box.take()
    box.put(_msg("samples", 2))
    box.put_back(sent)
    assert [box.take(), box.take()] == [_msg("samples", 1), _msg("samples", 2)]
    assert box.dropped == {}


def test_outbox_warnings_are_throttled(caplog):
    caplog.set_level(logging.WARNING, logger="mqttrl.transport")
    now = [0.0]
    box = Outbox(1, name="w1", clock=lambda: now[0])
    for n in range(5):
        box.put(_msg("samples", n))
    now[0] = 6.0
    box.put(_msg("samples", 9))
    warnings = [r.getMessage() for r in caplog.records if "outbox full" in r.getMessage()]
    assert len(warnings) == 2 and warnings[0].startswith("w1: outbox full (1 messages")


def test_an_outbox_that_holds_nothing_is_refused():
    with pytest.raises(ValueError, match="at least one message"):
        Outbox(0)


# ---------------------------------------------------------------- acknowledgement ledger
class FakeInfo:
    """Stands in for paho's MQTTMessageInfo: flagged published when its PUBACK comes."""

    def __init__(self) -> None:
        self.acked = False

    def is_published(self) -> bool:
        return self.acked


def test_take_acked_reports_each_acknowledged_tag_once_in_send_order():
    ledger = AckLedger()
    infos = [FakeInfo() for _ in range(4)]
    for i, info in enumerate(infos):
        ledger.track(info, f"tag{i}", now=float(i))
    assert ledger.take_acked() == [] and len(ledger) == 4
    infos[2].acked = infos[0].acked = True
    assert ledger.take_acked() == ["tag0", "tag2"]
    assert ledger.take_acked() == [] and len(ledger) == 2
    infos[1].acked = infos[3].acked = True
    assert ledger.take_acked() == ["tag1", "tag3"] and len(ledger) == 0


def test_oldest_unacked_age_skips_acknowledged_messages():
    ledger = AckLedger()
    assert ledger.oldest_unacked_age(now=100.0) == 0.0  # nothing waits
    first, second = FakeInfo(), FakeInfo()
    ledger.track(first, "a", now=10.0)
    ledger.track(second, "b", now=12.5)
    assert ledger.oldest_unacked_age(now=20.0) == 10.0
    first.acked = True  # acked, not yet taken: no longer waiting
    assert ledger.oldest_unacked_age(now=20.0) == 7.5
    second.acked = True
    assert ledger.oldest_unacked_age(now=20.0) == 0.0
    assert ledger.take_acked() == ["a", "b"]


# ---------------------------------------------------------------- subscriptions
GRANTED = ReasonCode(PacketTypes.SUBACK, identifier=1)
REFUSED = ReasonCode(PacketTypes.SUBACK, identifier=0x87)  # not authorized


class FakeBroker:
    """A send function that hands out message ids and records every SUBSCRIBE."""

    def __init__(self, connected: bool = True) -> None:
        self.connected = connected
        self.sent: list[tuple[str, int, int]] = []

    def __call__(self, topic: str, qos: int) -> int | None:
        if not self.connected:
            return None
        mid = len(self.sent) + 1
        self.sent.append((topic, qos, mid))
        return mid


def test_refusal_codes():
    assert is_refusal(REFUSED) and is_refusal(0x80)
    assert not is_refusal(GRANTED) and not is_refusal(1)


def test_setup_is_settled_once_every_suback_came():
    book, send = SubscriptionBook(), FakeBroker()
    book.new_connection()
    book.setup([("a", 1), ("b", 0)], send)
    assert not book.settled.is_set() and not book.due(0.0)
    book.acked(1, [GRANTED])
    assert not book.settled.is_set() and book.due(0.0)
    book.acked(2, [GRANTED])
    assert book.settled.is_set()
    assert book.review(now=0.0) == ([], []) and not book.due(1e9)


def test_a_setup_with_nothing_sent_is_settled_at_once():
    book = SubscriptionBook()
    book.setup([], FakeBroker())
    assert book.settled.is_set()
    book.new_connection()
    book.setup([("a", 1)], FakeBroker(connected=False))  # no connection: the next connect subscribes
    assert book.settled.is_set()


def _setup_acked_from_another_thread() -> SubscriptionBook:
    book, send, threads = SubscriptionBook(), FakeBroker(), []

    def send_then_ack(topic, qos):
        mid = send(topic, qos)
        threads.append(threading.Thread(target=book.acked, args=(mid, [GRANTED])))
        threads[-1].start()  # blocks on the book's lock until this SUBSCRIBE is registered
        return mid

    book.new_connection()
    book.setup([("a", 1), ("b", 1)], send_then_ack)
    for t in threads:
        t.join(5)
    return book


def test_subacks_on_another_thread_settle_the_setup_in_any_order():
    """paho's thread records a SUBACK while the setup is still sending: whether it lands before
    or after the setup counts what it awaits, the setup is settled."""
    for _ in range(50):
        book = _setup_acked_from_another_thread()
        assert book.settled.is_set()
        assert book.review(0.0) == ([], [])


def test_a_refused_subscription_is_made_again_with_a_doubling_wait_until_granted():
    book, send = SubscriptionBook(), FakeBroker()
    book.new_connection()
    book.setup([("t/x", 1)], send)
    now, waits = 100.0, []
    for tries in range(1, 5):
        book.acked(send.sent[-1][2], [REFUSED])
        assert book.settled.is_set()  # answered, even if refused
        due, refusals = book.review(now)
        assert due == [] and [(r.topic, r.reason, r.tries) for r in refusals] == [("t/x", REFUSED, tries)]
        waits.append(refusals[0].delay)
        assert not book.due(now + refusals[0].delay - 0.01) and book.due(now + refusals[0].delay)
        now += refusals[0].delay
        due, _ = book.review(now)
        assert due == [("t/x", 1)] and not book.due(now + 100)  # none again until its SUBACK
        book.subscribe("t/x", 1, send)
    assert waits == [0.5, 1.0, 2.0, 4.0] and book.refused == 4
    book.acked(send.sent[-1][2], [GRANTED])
    assert book.review(now) == ([], []) and not book.due(now + 100)
    assert len(send.sent) == 5


def test_a_new_connection_forgets_the_old_ones_retries():
    book, send = SubscriptionBook(), FakeBroker()
    book.setup([("t/x", 1)], send)
    book.acked(1, [REFUSED])
    book.review(0.0)
    book.new_connection()
    assert not book.settled.is_set() and not book.due(1e9)
    assert book.refused == 1  # the count is the node's whole life


def test_only_a_few_refusals_are_logged():
    book, send = SubscriptionBook(), FakeBroker()
    logged = []
    for _ in range(30):
        mid = book.subscribe("t/x", 1, send)
        book.acked(mid, [REFUSED])
        _, refusals = book.review(0.0)
        logged += [r.tries for r in refusals if r.worth_logging]
    assert logged == [1, 2, 3, 10, 20, 30]
