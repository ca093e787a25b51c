"""Which definition each topic's messages have, and the docs written from them.

Every kind of topic (:mod:`mqttrl.transport.topics`) is encoded and decoded by one class; this
catalogue names it, and writes two things from the declarations: the table of message schemas in
docs/architecture.md and the field tables of the JSON records in docs/telemetry.md, between
``<!-- records:NAME -->`` and ``<!-- /records:NAME -->`` markers. A test holds both files equal to
what this writes; ``python -m mqttrl.wire_catalog docs/telemetry.md docs/architecture.md``
rewrites them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import attrs

from mqttrl.config import RunConfig
from mqttrl.config.env_spec import EnvSpec
from mqttrl.transport.topics import SPECS, Kind
from mqttrl.wire.commands import Quicksave, QuicksaveReply
from mqttrl.wire.episodes import EpisodeReport, EpisodeStats
from mqttrl.wire.evaluation import Evaluation
from mqttrl.wire.flow import Flow
from mqttrl.wire.heartbeat import Heartbeat
from mqttrl.wire.inference import InferenceReply, InferenceRequest
from mqttrl.wire.metrics import InferenceMetrics, LearnerMetrics
from mqttrl.wire.record import fields_table
from mqttrl.wire.samples import SampleBatch
from mqttrl.wire.states import InferenceState, LearnerState, WorkerState
from mqttrl.wire.weights import WeightsMessage

#: each topic kind's one definition
DEFINITIONS: dict[Kind, type] = {
    Kind.CONFIG: RunConfig,
    Kind.WEIGHTS: WeightsMessage,
    Kind.FLOW: Flow,
    Kind.LEARNER_STATE: LearnerState,
    Kind.LEARNER_METRICS: LearnerMetrics,
    Kind.SAMPLES: SampleBatch,
    Kind.EPISODES: EpisodeReport,
    Kind.HEARTBEAT: Heartbeat,
    Kind.WORKER_STATE: WorkerState,
    Kind.EVAL: Evaluation,
    Kind.COMMAND: Quicksave,
    Kind.REPLY: QuicksaveReply,
    Kind.INFER_REQUEST: InferenceRequest,
    Kind.INFER_REPLY: InferenceReply,
    Kind.INFERENCE_STATE: InferenceState,
    Kind.INFERENCE_METRICS: InferenceMetrics,
    Kind.ENV_SPEC: EnvSpec,
}

#: the JSON records whose fields docs/telemetry.md lists, in its order (EpisodeStats: one
#: episode of an EpisodeReport; Evaluation is kept by hand, its record predates wire_field)
FIELD_TABLES: tuple[type, ...] = (
    Heartbeat,
    EpisodeStats,
    WorkerState,
    LearnerState,
    LearnerMetrics,
    Flow,
    Quicksave,
    QuicksaveReply,
    InferenceState,
    InferenceMetrics,
)

MARKER = re.compile(r"(<!-- records:(\w+) -->\n)(.*?)(<!-- /records:\2 -->)", re.S)


def schemas_table() -> str:
    """Topic, its definition and the module that holds it: docs/architecture.md's table."""
    rows = ["| kind | topic | defined by | in |", "|---|---|---|---|"]
    for kind, cls in DEFINITIONS.items():
        topic = SPECS[kind].pattern.replace("{name}", f"<{SPECS[kind].name_is}>")
        rows.append(f"| `{kind}` | `{topic}` | `{cls.__qualname__}` | `{cls.__module__}` |")
    return "\n".join(rows)


def render(name: str) -> str:
    """The text between the markers named ``name``: ``schemas`` or a record's class name."""
    if name == "schemas":
        return schemas_table()
    for cls in FIELD_TABLES:
        if cls.__name__ == name:
            return fields_table(cls)
    raise KeyError(f"no table named {name!r}; known: schemas, {', '.join(c.__name__ for c in FIELD_TABLES)}")


def render_doc(text: str) -> str:
    """``text`` with every marked table written anew."""
    return MARKER.sub(lambda m: f"{m.group(1)}{render(m.group(2))}\n{m.group(4)}", text)


def _check_definitions() -> None:
    """Every kind has a definition (a new topic without one fails here, and in the tests)."""
    missing = set(Kind) - set(DEFINITIONS)
    if missing:
        raise AssertionError(f"topic kinds without a definition: {sorted(missing)}")
    for cls in FIELD_TABLES:
        if not attrs.has(cls):
            raise AssertionError(f"{cls.__name__} is not a record")


def main(paths: list[str]) -> int:
    _check_definitions()
    for path in paths:
        p = Path(path)
        text = p.read_text()
        new = render_doc(text)
        if new != text:
            p.write_text(new)
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
