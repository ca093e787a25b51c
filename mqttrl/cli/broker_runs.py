"""``mqttrl status`` for a run the broker holds nothing of (a typo): one line naming the runs it does.

Every run's learner leaves its state retained on ``mqttrl/<run>/state/learner``, so one subscription
with ``+`` for the run lists the runs on a broker. :class:`AbsentRun` watches that beside the run's
own view: once ``wait_s`` pass with nothing of the run, the line says so and names those runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from mqttrl.config import did_you_mean
from mqttrl.transport.topics import ROOT, SPECS, Kind
from mqttrl.wire import LearnerState, Rejected


class WatchedView(Protocol):
    """What :class:`AbsentRun` reads of the view it watches beside (``mqttrl.cli.fleet.FleetView``)."""

    topics: Any  # its ``run``

    @property
    def heard(self) -> bool: ...

    def handle(self, topic: str, payload: bytes) -> None: ...


_STATE = SPECS[Kind.LEARNER_STATE]
#: every run's retained learner state
LEARNER_STATES = f"{ROOT}/+/{_STATE.pattern}"


class RunNotOnBroker(Exception):
    """``mqttrl status --once``: nothing of the run on the broker (the command exits 2 with the line)."""


class BrokerRuns:
    """The runs whose learner state the broker holds, each with its status (``online``, ``offline``...)."""

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}

    @staticmethod
    def subscription() -> tuple[str, int]:
        return LEARNER_STATES, _STATE.qos

    def handle(self, topic: str, payload: bytes) -> None:
        """A learner state of any run (other topics are ignored; a cleared state removes the run)."""
        parts = topic.split("/", 2)
        if len(parts) != 3 or parts[0] != ROOT or parts[2] != _STATE.pattern:
            return
        if not payload:
            self.runs.pop(parts[1], None)
            return
        try:
            self.runs[parts[1]] = LearnerState.decode(payload).status
        except Rejected:
            self.runs[parts[1]] = "unreadable"


def not_on_broker(run: str, runs: Mapping[str, str], broker: str, waited_s: float) -> str:
    """The line: nothing of ``run`` on ``broker``, and the runs it holds (a close name first)."""
    held = ", ".join(f"{name} ({status})" for name, status in sorted(runs.items()))
    there = f"runs on this broker: {held}" if runs else "no run's learner state is on this broker"
    return f"nothing of run {run!r} on {broker} after {waited_s:g}s{did_you_mean(run, runs)}; {there}"


class AbsentRun:
    """Whether anything of the view's run came within ``wait_s`` of connecting (0: never asked), and
    the runs the broker holds (every message goes through :meth:`handle`)."""

    def __init__(
        self,
        view: WatchedView,
        broker: str,
        wait_s: float,
        live: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.view = view
        self.broker = broker
        self.wait_s = wait_s
        #: live mode says the line itself (:meth:`say_once`); ``--once`` raises it instead
        self.live = live
        self.clock = clock
        self.runs = BrokerRuns()
        self.started = clock()
        self.said = False

    def handle(self, topic: str, payload: bytes) -> None:
        self.runs.handle(topic, payload)
        self.view.handle(topic, payload)

    def left_s(self) -> float:
        """Seconds still to wait before the run counts as absent."""
        return max(0.0, self.wait_s - (self.clock() - self.started))

    def line(self) -> str | None:
        """The line once ``wait_s`` passed with nothing of the run, else None."""
        if not self.wait_s or self.view.heard or self.left_s() > 0:
            return None
        return not_on_broker(self.view.topics.run, self.runs.runs, self.broker, self.wait_s)

    def say_once(self) -> None:
        """Live mode: the line on stderr, once (the table keeps watching: the run may start later)."""
        line = self.line() if self.live and not self.said else None
        if line is not None:
            self.said = True
            print(f"mqttrl status: {line} (still watching)", file=sys.stderr, flush=True)
