"""One handler table per node, and the one place where a handler's refusal is counted.

A node declares ``{Kind.SAMPLES: self.on_samples, ...}``; :class:`Dispatcher`
parses each received topic with the run's topic table, calls the handler for
its kind with ``(name, payload)``, and turns a :class:`~mqttrl.wire.Rejected`
(or an unexpected exception, logged with its traceback) into a count by reason.
Kinds without a handler are ignored: a node may subscribe to a topic only to
read it elsewhere (the learner reads the retained weights once at start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import Rejected, RejectionCounter

Handler = Callable[[str, bytes], None]


class Dispatcher:
    def __init__(self, topics: Topics, handlers: Mapping[Kind, Handler], log: logging.Logger):
        self.topics = topics
        self.handlers = dict(handlers)
        self.log = log
        self.rejections = RejectionCounter(log)

    def __call__(self, topic: str, payload: bytes) -> Kind | None:
        """Handle one message; returns its kind (None for topics outside the table)."""
        try:
            kind, name = self.topics.parse(topic)
        except ValueError:
            return None
        handler = self.handlers.get(kind)
        if handler is None:
            return kind
        try:
            handler(name, payload)
        except Rejected as r:
            self.rejections.add(r, f"{kind} from {name}" if name else str(kind))
        except Exception as exc:  # never let one message take the node down
            if getattr(exc, "ends_node", False):  # unless the node cannot go on (a full disk: DiskFull)
                raise
            self.log.exception("handling a message on %s failed", topic)
            self.rejections.add(Rejected("internal_error", f"{type(exc).__name__}: {exc}"), str(kind))
        return kind
