"""The topic tree of a run, declared once in :data:`TABLE`.

Every topic lives under ``mqttrl/<run>/``. The table gives each :class:`Kind`
its path pattern, QoS, whether it is retained and what its payload is; the
builders, the subscription filters and the parser are all derived from it, so
nodes never build or split topic strings themselves. docs/architecture.md
shows the same table (a test keeps them equal).
"""

from __future__ import annotations

import re
from enum import StrEnum

import attrs

ROOT = "mqttrl"
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def check_name(kind: str, value: str) -> str:
    """Validate a run, worker or command name: no MQTT wildcards or separators."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):  # fullmatch: "$" would let a trailing newline through
        raise ValueError(f"invalid {kind} name {value!r}: use 1-64 characters from A-Z a-z 0-9 _ . -")
    return value


class Kind(StrEnum):
    """What a topic carries. Values equal the strings :meth:`Topics.parse` returned before the enum."""

    CONFIG = "config"
    WEIGHTS = "weights"
    FLOW = "flow"
    LEARNER_STATE = "learner_state"
    LEARNER_METRICS = "learner_metrics"
    SAMPLES = "samples"
    EPISODES = "episodes"
    HEARTBEAT = "heartbeat"
    WORKER_STATE = "worker_state"
    EVAL = "eval"
    COMMAND = "command"
    REPLY = "reply"
    INFER_REQUEST = "infer_request"
    INFER_REPLY = "infer_reply"
    INFERENCE_STATE = "inference_state"
    INFERENCE_METRICS = "inference_metrics"
    ENV_SPEC = "env_spec"


@attrs.frozen
class TopicSpec:
    """One row of the table. ``pattern`` is relative to ``mqttrl/<run>/``; ``{name}`` is one level."""

    kind: Kind
    pattern: str
    qos: int
    retained: bool
    publisher: str
    payload: str
    #: what ``{name}`` names, for the error of a bad name
    name_is: str = ""

    @property
    def named(self) -> bool:
        return "{name}" in self.pattern


TABLE: tuple[TopicSpec, ...] = (
    TopicSpec(Kind.CONFIG, "config", 1, True, "learner", "JSON: resolved config + protocol version"),
    TopicSpec(Kind.WEIGHTS, "weights", 1, True, "learner", "safetensors; metadata: version, algorithm, run, checksum"),
    TopicSpec(Kind.FLOW, "flow", 1, True, "learner", "JSON: pause/resume (flow control)"),
    TopicSpec(
        Kind.LEARNER_STATE, "state/learner", 1, True, "learner", "JSON birth message; the last will sets it offline"
    ),
    TopicSpec(Kind.LEARNER_METRICS, "metrics/learner", 0, False, "learner", "JSON"),
    TopicSpec(Kind.SAMPLES, "samples/{name}", 1, False, "worker", "sample batch (MQSB)", "worker"),
    TopicSpec(
        Kind.EPISODES, "episodes/{name}", 1, False, "worker", "JSON list of the batch's finished episodes", "worker"
    ),
    TopicSpec(Kind.HEARTBEAT, "heartbeat/{name}", 0, False, "worker", "JSON counters", "worker"),
    TopicSpec(
        Kind.WORKER_STATE,
        "state/workers/{name}",
        1,
        True,
        "worker",
        "JSON birth message; the last will sets it offline",
        "worker",
    ),
    TopicSpec(Kind.EVAL, "eval/{name}", 1, False, "evaluator, worker", "JSON", "evaluator"),
    TopicSpec(Kind.COMMAND, "cmd/learner/{name}", 1, False, "telemetry, operators", "JSON", "command"),
    TopicSpec(Kind.REPLY, "reply/{name}", 1, False, "learner", "JSON", "request id"),
    TopicSpec(
        Kind.INFER_REQUEST,
        "infer/{name}/request",
        0,
        False,
        "worker",
        "observations (MQSB), answered on this worker's reply topic",
        "worker",
    ),
    TopicSpec(Kind.INFER_REPLY, "infer/{name}/reply", 0, False, "inference server", "network outputs (MQSB)", "worker"),
    TopicSpec(
        Kind.INFERENCE_STATE,
        "state/inference/{name}",
        1,
        True,
        "inference server",
        "JSON birth message; the last will sets it offline",
        "server",
    ),
    TopicSpec(Kind.INFERENCE_METRICS, "metrics/inference/{name}", 0, False, "inference server", "JSON", "server"),
    TopicSpec(
        Kind.ENV_SPEC,
        "env_spec",
        1,
        True,
        "worker, learner",
        "JSON: the env's spaces where the game is, for a learner that waits (which clears it first)",
    ),
)
SPECS: dict[Kind, TopicSpec] = {s.kind: s for s in TABLE}
# parse: (number of levels, fixed levels with None where the name goes) -> kind
_PARSE = [(tuple(None if p == "{name}" else p for p in s.pattern.split("/")), s.kind) for s in TABLE]


class Topics:
    """All topics of one run, built from :data:`TABLE`."""

    #: server name reserved for the shared request topic that every server consumes from
    POOL = "pool"

    def __init__(self, run: str):
        self.run = check_name("run", run)
        self.base = f"{ROOT}/{run}"

    # ---- derived from the table ----------------------------------------------
    def topic(self, kind: Kind, name: str = "") -> str:
        """The topic of ``kind`` (for ``name`` where the pattern has one)."""
        spec = SPECS[kind]
        if spec.named:
            return f"{self.base}/" + spec.pattern.replace("{name}", check_name(spec.name_is, name))
        return f"{self.base}/{spec.pattern}"

    def filter(self, kind: Kind) -> str:
        """The subscription filter for every topic of ``kind`` (``+`` where the name goes)."""
        return f"{self.base}/" + SPECS[kind].pattern.replace("{name}", "+")

    def subscription(self, kind: Kind) -> tuple[str, int]:
        """``(filter, qos)`` as the table says, for ``MqttClient(subscriptions=...)``."""
        return self.filter(kind), SPECS[kind].qos

    def parse(self, topic: str) -> tuple[Kind, str]:
        """Map a topic of this run to ``(kind, name)``; ``name`` is "" for singleton topics.

        Raises ValueError for topics outside this run's tree or not in the table.
        """
        prefix = self.base + "/"
        if not topic.startswith(prefix):
            raise ValueError(f"topic {topic!r} is not under {prefix!r}")
        parts = topic[len(prefix) :].split("/")
        for fixed, kind in _PARSE:
            if len(fixed) != len(parts):
                continue
            name = ""
            for want, got in zip(fixed, parts):
                if want is None:
                    name = got
                elif want != got:
                    break
            else:
                return kind, name
        raise ValueError(f"unknown topic {topic!r}")

    # ---- named builders, for readable call sites -----------------------------
    @property
    def config(self) -> str:
        return self.topic(Kind.CONFIG)

    @property
    def weights(self) -> str:
        return self.topic(Kind.WEIGHTS)

    @property
    def env_spec(self) -> str:
        return self.topic(Kind.ENV_SPEC)

    @property
    def flow(self) -> str:
        """Retained flow-control signal from the learner (JSON)."""
        return self.topic(Kind.FLOW)

    @property
    def learner_state(self) -> str:
        return self.topic(Kind.LEARNER_STATE)

    @property
    def learner_metrics(self) -> str:
        return self.topic(Kind.LEARNER_METRICS)

    def samples(self, worker: str) -> str:
        return self.topic(Kind.SAMPLES, worker)

    def episodes(self, worker: str) -> str:
        return self.topic(Kind.EPISODES, worker)

    def heartbeat(self, worker: str) -> str:
        return self.topic(Kind.HEARTBEAT, worker)

    def worker_state(self, worker: str) -> str:
        return self.topic(Kind.WORKER_STATE, worker)

    def evaluation(self, evaluator: str) -> str:
        """Evaluation results (published by evaluators, e.g. `mqttrl train`)."""
        return self.topic(Kind.EVAL, evaluator)

    def command(self, command: str) -> str:
        return self.topic(Kind.COMMAND, command)

    def reply(self, request_id: str) -> str:
        """Where a node answers a command that asked for a reply."""
        return self.topic(Kind.REPLY, request_id)

    def infer_request(self, worker: str) -> str:
        """Where ``worker`` sends its inference requests: the servers answer on its own
        :meth:`infer_reply`, so the broker's ACL on this topic decides who gets the answers."""
        return self.topic(Kind.INFER_REQUEST, worker)

    def infer_reply(self, worker: str) -> str:
        return self.topic(Kind.INFER_REPLY, worker)

    def shared_infer_requests(self, group: str = "mqttrl-infer") -> str:
        """The shared-subscription filter through which the broker spreads every worker's requests over servers."""
        return f"$share/{check_name('group', group)}/{self.all_infer_requests}"

    def inference_state(self, server: str) -> str:
        return self.topic(Kind.INFERENCE_STATE, server)

    def inference_metrics(self, server: str) -> str:
        return self.topic(Kind.INFERENCE_METRICS, server)

    # ---- subscription filters ------------------------------------------------
    @property
    def all_samples(self) -> str:
        return self.filter(Kind.SAMPLES)

    @property
    def all_episodes(self) -> str:
        return self.filter(Kind.EPISODES)

    @property
    def all_heartbeats(self) -> str:
        return self.filter(Kind.HEARTBEAT)

    @property
    def all_worker_states(self) -> str:
        return self.filter(Kind.WORKER_STATE)

    @property
    def all_commands(self) -> str:
        return self.filter(Kind.COMMAND)

    @property
    def all_evaluations(self) -> str:
        return self.filter(Kind.EVAL)

    @property
    def all_inference_states(self) -> str:
        return self.filter(Kind.INFERENCE_STATE)

    @property
    def all_infer_requests(self) -> str:
        return self.filter(Kind.INFER_REQUEST)


def markdown_table() -> str:
    """The table as docs/architecture.md shows it (a test keeps the doc equal to this)."""
    rows = ["| kind | topic | QoS | retained | published by | payload |", "|---|---|---|---|---|---|"]
    for s in TABLE:
        topic = s.pattern.replace("{name}", f"<{s.name_is}>")
        rows.append(
            f"| `{s.kind}` | `{topic}` | {s.qos} | {'yes' if s.retained else 'no'} | {s.publisher} | {s.payload} |"
        )
    return "\n".join(rows)
