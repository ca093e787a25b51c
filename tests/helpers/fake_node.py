"""What WorkerNode uses of MqttClient, for the tests of the worker shell that need no broker.

One copy for every such test: when the worker starts using another MqttClient method, it is added
here once (a missing one shows up as a thread exception in every test that drives the shell).
"""

from __future__ import annotations

import collections
import queue

from mqttrl.transport.client import BrokerSettings, Message


class FakeNode:
    """An inbox to fill, a list of what was published, and the ledger hooks (nothing acknowledged,
    dropped or left unsent unless a test says so)."""

    def __init__(self, settings: BrokerSettings):
        self.settings = settings
        self.inbox: queue.Queue[Message] = queue.Queue()
        self.published: list[tuple[str, bytes]] = []
        self.outbox_size = 0
        self.dropped: collections.Counter[str] = collections.Counter()
        self.stopped = False
        self.unsent: list[object] = []
        #: the link is up (a real-time worker pauses its games while it is down)
        self.connected = True
        self.outbox_limit = 2000
        #: seconds the oldest batch has waited for the broker's acknowledgement (a test may set it)
        self.unacked_age = 0.0

    def start(self, wait=None):
        return self

    def publish(self, topic, payload, qos=1, retain=False, kind="other", tag=None):
        self.published.append((topic, payload))

    def stop(self, final=(), flush_timeout=5.0):
        self.published.extend((m.topic, m.payload) for m in final)
        self.stopped = True

    def oldest_unacked_age(self, now=None) -> float:
        return self.unacked_age

    def take_acked(self) -> list[object]:
        return []

    def take_dropped(self) -> list[object]:
        return []

    def take_unsent(self) -> list[object]:
        unsent, self.unsent = self.unsent, []
        return unsent
