"""``mqttrl status``: a live table of the learner and every worker of a run, and ``mqttrl quicksave``."""

from __future__ import annotations

import logging
import queue
import time
import uuid

from rich.console import Console
from rich.live import Live
from rich.table import Table

from mqttrl.transport.client import BrokerSettings, MqttNode
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import SPECS, Kind, Topics
from mqttrl.wire import StepRate, decode_episodes, decode_json, encode_json

log = logging.getLogger("mqttrl.status")


class FleetView:
    """What an operator wants to see, built from retained states, heartbeats, episodes and metrics."""

    def __init__(self, run: str):
        self.topics = Topics(run)
        self.learner: dict = {}
        self.metrics: dict = {}
        self.workers: dict[str, dict] = {}
        #: the handler table; its counter holds every refused message by reason
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.LEARNER_STATE: self.on_learner_state,
                Kind.LEARNER_METRICS: self.on_learner_metrics,
                Kind.WORKER_STATE: self.on_worker_state,
                Kind.HEARTBEAT: self.on_heartbeat,
                Kind.EPISODES: self.on_episodes,
            },
            log,
        )
        self.rejections = self.dispatch.rejections

    def _w(self, name: str) -> dict:
        return self.workers.setdefault(
            name,
            {
                "status": "?",
                "last_hb": None,
                "steps": None,
                "rate": None,
                "version": None,
                "last_return": None,
                "env_restarts": None,
                "_rate": StepRate(),
            },
        )

    def handle(self, topic: str, payload: bytes) -> None:
        """Handle one received message through the handler table (refusals are counted, not raised)."""
        self.dispatch(topic, payload)

    def on_learner_state(self, name: str, payload: bytes) -> None:
        if payload:
            self.learner = decode_json(payload, {"status": str})

    def on_learner_metrics(self, name: str, payload: bytes) -> None:
        self.metrics = decode_json(payload)

    def on_worker_state(self, name: str, payload: bytes) -> None:
        if payload:
            self._w(name)["status"] = decode_json(payload, {"status": str})["status"]

    def on_heartbeat(self, name: str, payload: bytes) -> None:
        hb = decode_json(payload, {"env_steps": int, "model_version": int})
        w = self._w(name)
        w["rate"] = w["_rate"].update(hb, time.time())
        w.update(last_hb=time.time(), steps=hb["env_steps"], version=hb["model_version"], status="online")
        if isinstance(hb.get("env_restarts"), int):  # games that crashed and were made afresh
            w["env_restarts"] = hb["env_restarts"]

    def on_episodes(self, name: str, payload: bytes) -> None:
        episodes = decode_episodes(payload)
        if episodes:
            self._w(name)["last_return"] = episodes[-1]["return"]

    def subscriptions(self) -> list[tuple[str, int]]:
        """One filter per kind in the handler table; episodes at QoS 0 (a viewer may miss some)."""
        qos = {Kind.EPISODES: 0}
        return [(self.topics.filter(k), qos.get(k, SPECS[k].qos)) for k in self.dispatch.handlers]

    def table(self) -> Table:
        version = self.metrics.get("model_version", self.learner.get("model_version"))
        t = Table(title=f"mqttrl run {self.topics.run}")
        cols = (
            "node",
            "status",
            "last heartbeat",
            "env steps/s",
            "model version",
            "lag",
            "last return",
            "env restarts",
        )
        for col in cols:
            t.add_column(col, justify="right" if col not in ("node", "status") else "left")
        ls = self.learner.get("status", "unknown")
        t.add_row(
            "learner",
            _status(ls),
            "-",
            f"{self.metrics.get('updates_per_s', 0):.0f} upd/s" if self.metrics else "-",
            str(version if version is not None else "-"),
            "-",
            "-",
            str(self.metrics["env_restarts"]) if isinstance(self.metrics.get("env_restarts"), int) else "-",
        )
        now = time.time()
        for name in sorted(self.workers):
            w = self.workers[name]
            lag = version - w["version"] if isinstance(version, int) and isinstance(w["version"], int) else None
            t.add_row(
                name,
                _status(w["status"]),
                f"{now - w['last_hb']:.1f}s ago" if w["last_hb"] else "-",
                f"{w['rate']:,.0f}" if w["rate"] is not None else "-",
                str(w["version"]) if w["version"] is not None else "-",
                str(lag) if lag is not None else "-",
                f"{w['last_return']:.1f}" if w["last_return"] is not None else "-",
                str(w["env_restarts"]) if w["env_restarts"] is not None else "-",
            )
        return t

    def rows(self) -> list[dict]:
        """Plain data for --json."""
        out = [
            {
                "node": "learner",
                "status": self.learner.get("status", "unknown"),
                "model_version": self.metrics.get("model_version"),
            }
        ]
        for name in sorted(self.workers):
            w = {k: v for k, v in self.workers[name].items() if not k.startswith("_")}
            out.append({"node": name, **w})
        return out


def _status(s: str) -> str:
    return {"online": "[green]online[/]", "offline": "[red]offline[/]"}.get(s, s)


def watch_status(broker: BrokerSettings, run: str, once_after: float | None = None) -> FleetView:
    view = FleetView(run)
    node = MqttNode(
        broker, client_id=f"mqttrl-status-{uuid.uuid4().hex[:8]}", subscriptions=view.subscriptions()
    ).start(wait=10)
    console = Console()
    try:
        if once_after is not None:
            deadline = time.monotonic() + once_after
            while time.monotonic() < deadline:
                try:
                    m = node.inbox.get(timeout=0.1)
                    view.handle(m.topic, m.payload)
                except queue.Empty:
                    pass
            return view
        with Live(view.table(), console=console, refresh_per_second=2) as live:
            while True:
                try:
                    m = node.inbox.get(timeout=0.25)
                    view.handle(m.topic, m.payload)
                except queue.Empty:
                    pass
                live.update(view.table())
    except KeyboardInterrupt:
        return view
    finally:
        node.stop(flush_timeout=1)


def quicksave(broker: BrokerSettings, run: str, timeout: float = 30.0, name: str | None = None) -> dict:
    """Ask the learner for a checkpoint and return its reply (path, model version, updates)."""
    tp = Topics(run)
    request = uuid.uuid4().hex[:12]
    node = MqttNode(
        broker, client_id=f"mqttrl-quicksave-{request}", subscriptions=[(tp.reply(request), 1), (tp.learner_state, 1)]
    ).start(wait=10)
    try:
        time.sleep(0.2)  # let the subscription settle before asking
        body = {"reply_to": tp.reply(request), "from": "mqttrl quicksave"}
        if name:
            body["name"] = name
        node.publish(tp.command("quicksave"), encode_json(body), qos=1, kind="cmd")
        deadline = time.monotonic() + timeout
        learner = "unknown"
        while time.monotonic() < deadline:
            try:
                m = node.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            if m.topic == tp.learner_state and m.payload:
                learner = decode_json(m.payload).get("status", "unknown")
            elif m.topic == tp.reply(request):
                return decode_json(m.payload, {"path": str})
        raise TimeoutError(
            f"no answer from the learner of run {run!r} in {timeout:.0f}s (its last state: {learner}). "
            "Check that it is running on this broker and that these credentials may send commands"
        )
    finally:
        node.stop(flush_timeout=1)
