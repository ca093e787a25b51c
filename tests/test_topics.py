"""The topic tree: builders, parse() and name validation."""

from __future__ import annotations

import pathlib
import re

import paho.mqtt.client as mqtt
import pytest

from mqttrl.transport.topics import ROOT, SPECS, TABLE, Kind, Topics, check_name, markdown_table

RUN = "run-1.a_b"


@pytest.fixture
def t():
    return Topics(RUN)


def test_singleton_topics(t):
    base = f"{ROOT}/{RUN}"
    assert t.base == base
    assert t.config == f"{base}/config"
    assert t.weights == f"{base}/weights"
    assert t.flow == f"{base}/flow"
    assert t.learner_state == f"{base}/state/learner"
    assert t.learner_metrics == f"{base}/metrics/learner"


def test_named_topics(t):
    base = f"{ROOT}/{RUN}"
    assert t.samples("w0") == f"{base}/samples/w0"
    assert t.episodes("w0") == f"{base}/episodes/w0"
    assert t.heartbeat("w0") == f"{base}/heartbeat/w0"
    assert t.worker_state("w0") == f"{base}/state/workers/w0"
    assert t.evaluation("eval") == f"{base}/eval/eval"
    assert t.command("quicksave") == f"{base}/cmd/learner/quicksave"


SINGLES = ["config", "weights", "flow", "learner_state", "learner_metrics"]
NAMED = [
    ("samples", "samples"),
    ("episodes", "episodes"),
    ("heartbeat", "heartbeat"),
    ("worker_state", "worker_state"),
    ("evaluation", "eval"),
    ("command", "command"),
]


@pytest.mark.parametrize("prop", SINGLES)
def test_parse_singletons(t, prop):
    assert t.parse(getattr(t, prop)) == (prop, "")


@pytest.mark.parametrize("builder,kind", NAMED)
@pytest.mark.parametrize("name", ["w0", "gpu-box-1234", "a", "x" * 64, "A.b_c-9"])
def test_parse_round_trip(t, builder, kind, name):
    topic = getattr(t, builder)(name)
    assert t.parse(topic) == (kind, name)


def test_distinct_topics(t):
    topics = [getattr(t, p) for p in SINGLES] + [getattr(t, b)("w0") for b, _ in NAMED]
    assert len(set(topics)) == len(topics)


def test_subscription_filters_match_builders(t):
    """Each wildcard filter matches exactly the topics its builder makes (MQTT '+' semantics)."""
    import paho.mqtt.client as mqtt

    pairs = [
        (t.all_samples, t.samples),
        (t.all_episodes, t.episodes),
        (t.all_heartbeats, t.heartbeat),
        (t.all_worker_states, t.worker_state),
        (t.all_commands, t.command),
        (t.all_evaluations, t.evaluation),
    ]
    for flt, builder in pairs:
        assert "+" in flt
        assert mqtt.topic_matches_sub(flt, builder("w7"))
        for other_flt, other_builder in pairs:
            if other_builder is not builder:
                assert not mqtt.topic_matches_sub(flt, other_builder("w7"))
        assert not mqtt.topic_matches_sub(flt, Topics("other").__getattribute__(builder.__name__)("w7"))
        assert not mqtt.topic_matches_sub(flt, t.learner_state)


@pytest.mark.parametrize(
    "topic",
    [
        "mqttrl/other/config",
        f"mqttrl/{RUN}",
        f"mqttrl/{RUN}/",
        f"mqttrl/{RUN}/nope",
        f"mqttrl/{RUN}/samples",
        f"mqttrl/{RUN}/samples/w0/extra",
        f"mqttrl/{RUN}/state",
        f"mqttrl/{RUN}/state/workers",
        f"mqttrl/{RUN}/cmd/worker/x",
        f"mqttrl/{RUN}x/config",
        f"{RUN}/config",
        f"other/{RUN}/config",
        "",
    ],
)
def test_parse_rejects_foreign_topics(t, topic):
    with pytest.raises(ValueError):
        t.parse(topic)


def test_parse_ignores_other_runs_with_common_prefix():
    a, b = Topics("run"), Topics("run2")
    with pytest.raises(ValueError):
        a.parse(b.samples("w0"))


BAD_NAMES = ["", "a/b", "/", "w+", "+", "#", "w#", "a b", "x" * 65, "é", "a\x00b", "tab\t", "new\nline", "w0\n", "$SYS"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_names_rejected_everywhere(name):
    with pytest.raises(ValueError, match="invalid"):
        Topics(name)
    t = Topics("ok")
    for builder in (t.samples, t.episodes, t.heartbeat, t.worker_state, t.evaluation, t.command):
        with pytest.raises(ValueError) as ei:
            builder(name)
        assert repr(name) in str(ei.value)


@pytest.mark.parametrize("value", [None, 3, b"w0", ["w0"]])
def test_non_string_names_rejected(value):
    with pytest.raises(ValueError):
        check_name("worker", value)


def test_check_name_returns_valid_names_and_names_the_kind():
    assert check_name("worker", "w-1.x_y") == "w-1.x_y"
    assert check_name("worker", "x" * 64) == "x" * 64
    with pytest.raises(ValueError, match="invalid evaluator name"):
        check_name("evaluator", "a/b")


# ---- the declarative table ------------------------------------------------------


def test_every_kind_has_exactly_one_row():
    assert sorted(s.kind for s in TABLE) == sorted(Kind)
    assert len({s.pattern for s in TABLE}) == len(TABLE)


@pytest.mark.parametrize("kind", list(Kind))
def test_table_round_trip_for_every_kind(t, kind):
    """topic() and parse() are inverse for every row; filter() matches exactly that row's topics."""
    name = "w-7" if SPECS[kind].named else ""
    topic = t.topic(kind, name)
    assert t.parse(topic) == (kind, name)
    assert mqtt.topic_matches_sub(t.filter(kind), topic)
    for other in TABLE:
        if other.kind != kind:
            assert not mqtt.topic_matches_sub(t.filter(other.kind), topic), (other.kind, topic)
    assert t.subscription(kind) == (t.filter(kind), SPECS[kind].qos)


def test_named_kinds_refuse_bad_names(t):
    with pytest.raises(ValueError, match="invalid worker name"):
        t.topic(Kind.SAMPLES, "a/b")
    with pytest.raises(ValueError, match="invalid worker name"):
        t.topic(Kind.SAMPLES, "")


def test_architecture_doc_shows_the_table():
    """docs/architecture.md carries the topic table generated from TABLE, so the two cannot drift."""
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
    shown = re.search(r"<!-- topic-table -->\n(.*?)\n<!-- /topic-table -->", doc, re.S)
    assert shown, "docs/architecture.md lost its topic-table markers"
    assert shown.group(1) == markdown_table(), "regenerate the table: mqttrl.transport.topics.markdown_table()"
