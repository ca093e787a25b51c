"""The topic tree, built here and nowhere else.

Every topic of a run lives under ``mqttrl/<run>/``. Builders return strings;
:func:`parse` turns a received topic back into ``(kind, name)`` so nodes never
split topic strings themselves.
"""

from __future__ import annotations

import re

ROOT = "mqttrl"
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def check_name(kind: str, value: str) -> str:
    """Validate a run, worker or command name: no MQTT wildcards or separators."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):  # fullmatch: "$" would let a trailing newline through
        raise ValueError(f"invalid {kind} name {value!r}: use 1-64 characters from A-Z a-z 0-9 _ . -")
    return value


class Topics:
    """All topics of one run."""

    def __init__(self, run: str):
        self.run = check_name("run", run)
        self.base = f"{ROOT}/{run}"

    # retained, learner-owned
    @property
    def config(self) -> str:
        return f"{self.base}/config"

    @property
    def weights(self) -> str:
        return f"{self.base}/weights"

    @property
    def flow(self) -> str:
        """Retained flow-control signal from the learner (JSON)."""
        return f"{self.base}/flow"

    @property
    def learner_state(self) -> str:
        return f"{self.base}/state/learner"

    @property
    def learner_metrics(self) -> str:
        return f"{self.base}/metrics/learner"

    # worker-owned
    def samples(self, worker: str) -> str:
        return f"{self.base}/samples/{check_name('worker', worker)}"

    def episodes(self, worker: str) -> str:
        return f"{self.base}/episodes/{check_name('worker', worker)}"

    def heartbeat(self, worker: str) -> str:
        return f"{self.base}/heartbeat/{check_name('worker', worker)}"

    def worker_state(self, worker: str) -> str:
        return f"{self.base}/state/workers/{check_name('worker', worker)}"

    # evaluation results (published by evaluators, e.g. `mqttrl train`)
    def evaluation(self, evaluator: str) -> str:
        return f"{self.base}/eval/{check_name('evaluator', evaluator)}"

    # commands
    def command(self, command: str) -> str:
        return f"{self.base}/cmd/learner/{check_name('command', command)}"

    # central inference (SEED style)
    #: server name reserved for the shared request topic that every server consumes from
    POOL = "pool"

    def infer_request(self, server: str = POOL) -> str:
        """Requests to one server, or to the pool (MQTT 5 shared subscription over all servers)."""
        return f"{self.base}/infer/{check_name('server', server)}/request"

    def infer_reply(self, worker: str) -> str:
        return f"{self.base}/infer/{check_name('worker', worker)}/reply"

    def shared_infer_requests(self, group: str = "mqttrl-infer") -> str:
        """The shared-subscription filter through which the broker spreads pool requests over servers."""
        return f"$share/{check_name('group', group)}/{self.infer_request(self.POOL)}"

    def inference_state(self, server: str) -> str:
        return f"{self.base}/state/inference/{check_name('server', server)}"

    @property
    def all_inference_states(self) -> str:
        return f"{self.base}/state/inference/+"

    def inference_metrics(self, server: str) -> str:
        return f"{self.base}/metrics/inference/{check_name('server', server)}"

    def reply(self, request_id: str) -> str:
        """Where a node answers a command that asked for a reply."""
        return f"{self.base}/reply/{check_name('request id', request_id)}"

    # subscription filters
    @property
    def all_samples(self) -> str:
        return f"{self.base}/samples/+"

    @property
    def all_episodes(self) -> str:
        return f"{self.base}/episodes/+"

    @property
    def all_heartbeats(self) -> str:
        return f"{self.base}/heartbeat/+"

    @property
    def all_worker_states(self) -> str:
        return f"{self.base}/state/workers/+"

    @property
    def all_commands(self) -> str:
        return f"{self.base}/cmd/learner/+"

    @property
    def all_evaluations(self) -> str:
        return f"{self.base}/eval/+"

    def parse(self, topic: str) -> tuple[str, str]:
        """Map a topic of this run to ``(kind, name)``.

        kind is one of: config, weights, flow, learner_state, learner_metrics,
        samples, episodes, heartbeat, worker_state, command, eval. ``name`` is
        the worker/command/evaluator name, or "" for singleton topics.
        Raises ValueError for topics outside this run's tree.
        """
        prefix = self.base + "/"
        if not topic.startswith(prefix):
            raise ValueError(f"topic {topic!r} is not under {prefix!r}")
        parts = topic[len(prefix) :].split("/")
        singles = {
            ("config",): "config",
            ("weights",): "weights",
            ("flow",): "flow",
            ("state", "learner"): "learner_state",
            ("metrics", "learner"): "learner_metrics",
        }
        if tuple(parts) in singles:
            return singles[tuple(parts)], ""
        if len(parts) == 2 and parts[0] in ("samples", "episodes", "heartbeat", "eval", "reply"):
            return parts[0], parts[1]
        if len(parts) == 3 and parts[:2] == ["state", "workers"]:
            return "worker_state", parts[2]
        if len(parts) == 3 and parts[:2] == ["state", "inference"]:
            return "inference_state", parts[2]
        if len(parts) == 3 and parts[:2] == ["metrics", "inference"]:
            return "inference_metrics", parts[2]
        if len(parts) == 3 and parts[0] == "infer" and parts[2] in ("request", "reply"):
            return f"infer_{parts[2]}", parts[1]
        if len(parts) == 3 and parts[:2] == ["cmd", "learner"]:
            return "command", parts[2]
        raise ValueError(f"unknown topic {topic!r}")
