"""Doubling waits between tries, capped: one rule for reconnects and for refused subscriptions."""

from __future__ import annotations

import attrs


@attrs.frozen
class Backoff:
    """Wait ``first`` seconds before the first retry, double it at each further try, never more
    than ``cap``."""

    first: float
    cap: float

    def delay(self, tries: int) -> float:
        """The wait after the ``tries``-th failed try (1 for the first failure)."""
        return min(self.cap, self.first * 2 ** max(0, tries - 1))


#: between connect attempts (paho's reconnect loop applies it, across a failover list too)
RECONNECT = Backoff(first=0.25, cap=8.0)
#: before a subscription the broker refused is made again (NATS refuses while electing leaders)
SUBSCRIBE_RETRY = Backoff(first=0.5, cap=8.0)
