"""The settings reference, written from the declarations in :mod:`mqttrl.config`.

One source, three readers: the tables of docs/configuration.md (between
``<!-- settings:SECTION -->`` and ``<!-- /settings:SECTION -->`` markers, rewritten by
``python -m mqttrl.config.reference docs/configuration.md``), ``mqttrl settings [SECTION]``, and
the help of CLI flags that mirror a setting (:func:`lookup`).
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from mqttrl.config import (
    AlgorithmSection,
    ConfigError,
    DemosConfig,
    EnvConfig,
    InferenceConfig,
    LearnerConfig,
    RunConfig,
    TrainConfig,
    WorkerConfig,
    did_you_mean,
)
from mqttrl.config.settings import Described, describe, toml_value, type_name

#: the name of the top-level keys (``run``) in ``mqttrl settings`` and the doc markers
TOP = "top"
#: RunConfig's fields that are sections, not keys
SECTIONS = ("env", "algorithm", "worker", "learner", "train", "inference", "demos")


def sections() -> dict[str, list[Described]]:
    """Every declared setting by section, in the order the docs and ``mqttrl settings`` show them
    (``algorithm`` is its ``name``: the hyperparameters are the plugin's own class)."""
    return {
        TOP: describe(RunConfig, skip=SECTIONS),
        "env": describe(EnvConfig),
        "worker": describe(WorkerConfig),
        "learner": describe(LearnerConfig),
        "inference": describe(InferenceConfig),
        "train": describe(TrainConfig),
        "demos": describe(DemosConfig),
        "algorithm": describe(AlgorithmSection, skip=("params",)),
    }


def lookup(key: str) -> Described:
    """The declaration of ``section.key`` (``run`` for a top-level key); one line naming what
    exists when there is no such setting."""
    section, _, name = key.rpartition(".")
    table = sections().get(section or TOP)
    if table is None:
        raise ConfigError(f"no settings section {section!r}{did_you_mean(section, sections())}")
    by_name = {d.name: d for d in table}
    if name not in by_name:
        raise ConfigError(f"no setting {key!r}{did_you_mean(name, by_name)}; [{section}] has {', '.join(by_name)}")
    return by_name[name]


def type_text(d: Described) -> str:
    """The type with what the validator allows: "integer > 0", 'string: "auto" | "torch"'."""
    if not d.allowed:
        return type_name(d.type)
    if d.allowed.startswith('"'):  # a choice of strings says its type itself
        return d.allowed
    sep = " " if d.allowed[0] in "<>=" else ": "
    return f"{type_name(d.type)}{sep}{d.allowed}"


# ---- docs/configuration.md ----------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown(section: str) -> str:
    """The markdown table of one section's settings (``top`` for the top-level keys)."""
    return markdown_table(sections()[section])


def markdown_table(settings: list[Described]) -> str:
    """A markdown table of settings: key, type, default (as TOML), unit, meaning."""
    rows = ["| key | type | default | unit | meaning |", "|---|---|---|---|---|"]
    for d in settings:
        default = _cell(toml_value(d.default))
        rows.append(f"| `{d.name}` | {_cell(type_text(d))} | `{default}` | {d.unit or ''} | {_cell(d.doc)} |")
    return "\n".join(rows)


MARKER = re.compile(r"(<!-- settings:(\w+) -->\n)(.*?)(<!-- /settings:\2 -->)", re.DOTALL)


def render_doc(text: str) -> str:
    """``text`` with the table between each pair of section markers written afresh."""

    def table(m: re.Match) -> str:
        if m.group(2) not in sections():
            raise ConfigError(f"doc marker names no settings section: {m.group(2)!r}")
        return f"{m.group(1)}{reference_markdown(m.group(2))}\n{m.group(4)}"

    return MARKER.sub(table, text)


# ---- mqttrl settings ----------------------------------------------------------------------------
def plain(doc: str) -> str:
    """A doc for a terminal: markdown's backticks left out."""
    return doc.replace("`", "")


def heading(section: str) -> str:
    """How ``mqttrl settings`` titles a section: ``[worker]``, ``# top level``."""
    return f"[{section}]" if section != TOP else "# top level"


def settings_text(section: str, settings: list[Described], width: int = 100) -> str:
    """One section as ``mqttrl settings`` prints it: ``key = default`` (TOML), then its type,
    unit and what is allowed, then its doc."""
    lines = [heading(section)]
    for d in settings:
        lines.append(f"  {d.name} = {toml_value(d.default)}")
        lines.append(f"      type: {type_text(d)}" + (f", unit: {d.unit}" if d.unit else ""))
        if d.doc:
            lines += textwrap.wrap(plain(d.doc), width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m mqttrl.config.reference FILE [--check]``: rewrite FILE's settings tables
    (``--check``: exit 1 if they are out of date instead)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m mqttrl.config.reference FILE [--check]", file=sys.stderr)
        return 2
    path = Path(args[0])
    old = path.read_text()
    new = render_doc(old)
    if "--check" in args:
        if new != old:
            print(f"{path}: settings tables are out of date; run python -m mqttrl.config.reference {path}")
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
