"""No library class over 300 lines, but the ones listed here, which may shrink and never grow.

Beside tests/test_function_length.py (60 lines a function). Why 300: a class of this code base that
does one job (the worker's and learner's pure cores, the screen env, the inference server, the
replay) stays under it, 20-25 methods; the review of issue 35 found every class past it holding
several (the worker node: MQTT, heartbeats, weights, both game loops, evaluation, building). The
classes over it today are pinned at their size: each is to be split (issue 35), and none may grow
meanwhile. A class's length runs from its ``class`` line to its last line (scripts/code_shape.py
counts the same way).
"""

from __future__ import annotations

import ast

from helpers.paths import REPO

MAX_LINES = 300
ROOTS = ("mqttrl", "plugins")

#: the classes over MAX_LINES today (2026-11-28), each at most this long: to be split, never to grow.
#: Issue 35 took two under the bound (DQNLearner, LearnerCore) and these four down; what each still
#: holds is said beside it
PINNED = {
    ("mqttrl/nodes/worker/node.py", "WorkerNode"): 545,  # MQTT, heartbeats, weights, sync; evaluation, building
    ("mqttrl/nodes/learner/node.py", "LearnerNode"): 345,  # MQTT, messages and commands, metrics, its loop
    ("mqttrl/transport/client.py", "MqttClient"): 418,  # the facade over the transport's modules
    ("mqttrl/nodes/telemetry.py", "TelemetryNode"): 382,  # records to points, the best model, the storages' loop
}


def class_sizes(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every class in ``source``, nested ones too."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    ]


def test_the_walk_measures_classes_from_class_line_to_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(10))
    assert class_sizes(f"class A:\n{body}\n") == [("A", 11)]
    nested = "class A:\n    class B:\n        x = 1\n"
    assert class_sizes(nested) == [("A", 3), ("B", 2)]


def test_no_class_over_300_lines_but_the_pinned_ones_which_never_grow():
    over, grown, seen = [], [], set()
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for name, lines in class_sizes(path.read_text(encoding="utf-8")):
                pinned = PINNED.get((rel, name))
                if pinned is not None:
                    seen.add((rel, name))
                    if lines > pinned:
                        grown.append(f"{rel}: {name} is {lines} lines, pinned at {pinned}: split it, do not grow it")
                elif lines > MAX_LINES:
                    over.append(
                        f"{rel}: {name} is {lines} lines (the bound is {MAX_LINES}): give its jobs classes of their own"
                    )
    assert not over and not grown, "\n".join(over + grown)
    assert seen == set(PINNED), f"pinned classes that are gone or renamed (unpin them): {set(PINNED) - seen}"
