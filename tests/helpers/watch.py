"""A test-side observer: subscribes to a run's topics on a real broker and keeps what it sees."""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as mqtt

from mqttrl.transport.topics import Topics
from mqttrl.wire import EpisodeReport, decode_batch, decode_weights


class Watcher:
    def __init__(
        self,
        url_port: int,
        run: str,
        username: str | None = None,
        password: str | None = None,
        protocol: int = mqtt.MQTTv5,
    ):
        self.topics = Topics(run)
        self.weights_versions: list[int] = []
        #: each version's weights info (the learner's export info and the keys the node adds)
        self.weights_info: dict[int, dict] = {}
        self.metrics: list[dict] = []
        self.first_batch: dict[str, dict] = {}
        self.batches: dict[str, int] = {}
        #: the last sample batch seen from each worker, decoded
        self.last_batch: dict[str, object] = {}
        #: every sample batch seen, decoded, in arrival order
        self.sample_batches: list = []
        #: transitions in all sample batches seen, and the frames they carried (DQN's image batches)
        self.transitions_seen = 0
        self.frames_seen = 0
        #: transitions seen per model version they were made with
        self.transitions_by_version: dict[int, int] = {}
        self.heartbeats: dict[str, dict] = {}
        self.states: dict[str, dict] = {}
        self.episodes: list[dict] = []
        self._lock = threading.Lock()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"watch-{run}-{time.monotonic_ns()}", protocol=protocol
        )
        if username:
            self.c.username_pw_set(username, password)
        self.c.on_message = self._on_message
        self.c.on_connect = lambda c, *a: c.subscribe(f"{self.topics.base}/#", 1)
        self.c.connect("127.0.0.1", url_port)
        self.c.loop_start()

    def _on_message(self, c, u, msg):
        kind, name = self.topics.parse(msg.topic)
        with self._lock:
            if kind == "weights" and msg.payload:
                w = decode_weights(msg.payload)
                self.weights_versions.append(w.version)
                self.weights_info[w.version] = dict(w.info)
            elif kind == "learner_metrics":
                self.metrics.append(json.loads(msg.payload))
            elif kind == "samples":
                try:
                    b = decode_batch(msg.payload)
                except Exception:
                    return
                self.first_batch.setdefault(name, {"model_version": b.model_version, "seq": b.seq, "at": time.time()})
                self.batches[name] = self.batches.get(name, 0) + 1
                self.last_batch[name] = b
                self.sample_batches.append(b)
                self.transitions_seen += b.count
                v = self.transitions_by_version
                v[b.model_version] = v.get(b.model_version, 0) + b.count
                self.frames_seen += len(b.arrays["frames"]) if "frames" in b.arrays else 0
            elif kind == "heartbeat":
                self.heartbeats[name] = json.loads(msg.payload)
            elif kind in ("worker_state", "learner_state") and msg.payload:
                self.states[name or "learner"] = json.loads(msg.payload)
            elif kind == "episodes":
                self.episodes.extend(e.to_json() for e in EpisodeReport.decode(msg.payload).episodes)

    @property
    def latest(self) -> dict:
        with self._lock:
            return self.metrics[-1] if self.metrics else {}

    @property
    def version(self) -> int:
        with self._lock:
            return self.weights_versions[-1] if self.weights_versions else -1

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate(self):
                    return
            except (KeyError, IndexError, TypeError):
                pass
            time.sleep(0.2)
        raise AssertionError(
            f"timed out after {timeout:.0f}s waiting for {what}; last metrics: {json.dumps(self.latest)[:2000]}"
        )

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()
