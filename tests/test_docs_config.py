"""docs/configuration.md lists every config key, with its default, and no key that does not exist.

The format it enforces: each section has a heading that names it -- ``## `[learner]` ``
for a config section, ``### `algorithm.name = "dqn"` `` for a built-in algorithm's
hyperparameters, ``## Top level`` for keys outside any section -- and under it a table
whose header names a ``default`` and a ``meaning`` column (``| key | default | meaning |``,
or the generated ``| key | type | default | unit | meaning |``) and whose rows start with
``| `key` |``. The default is written as TOML (``none`` for an unset default) and must equal
the class's; the meaning must not be empty. The config sections' tables are generated from
the declarations (:mod:`mqttrl.config.reference`) and must equal what it writes.
"""

from __future__ import annotations

import re
import time
import tomllib
import typing
from pathlib import Path

import attrs
import pytest

from mqttrl.config import AlgorithmSection, RunConfig, parse_override

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
ROW = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|(.*)\|\s*$")
HEADER = re.compile(r"^\|\s*key\s*\|(.*)\|\s*$")
SECTION = re.compile(r"`\[([a-z_]+)\]`")
ALGORITHM = re.compile(r'`algorithm\.name\s*=\s*"([A-Za-z0-9_.\-]+)"`')
TOP = "top level"
BUILTIN_ALGORITHMS = {"dqn", "ppo"}


def _doc_sections() -> dict[str, dict[str, tuple[str, str]]]:
    """heading id -> {key: (default cell, meaning cell)} for each table row under that heading."""
    sections: dict[str, dict[str, tuple[str, str]]] = {}
    current: str | None = None
    columns: list[str] = ["default", "meaning"]
    for line in DOC.read_text().splitlines():
        header = HEADER.match(line)
        if header:
            columns = [c.strip() for c in header.group(1).split("|")]
            assert {"default", "meaning"} <= set(columns), f"docs/configuration.md: header {line!r}"
            continue
        h = HEADING.match(line)
        if h:
            title = h.group(2)
            m_alg, m_sec = ALGORITHM.search(title), SECTION.search(title)
            if m_alg:
                current = f"algorithm:{m_alg.group(1)}"
            elif m_sec:
                current = m_sec.group(1)
            elif title.strip().lower() == TOP:
                current = TOP
            else:
                current = None
            if current is not None:
                assert current not in sections, f"docs/configuration.md: two headings for {current}"
                sections[current] = {}
            continue
        r = ROW.match(line)
        if r and current is not None:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", r.group(2))]
            assert len(cells) == len(columns), f"docs/configuration.md: row {line!r} needs the header's columns"
            assert r.group(1) not in sections[current], f"[{current}] lists `{r.group(1)}` twice"
            cell = dict(zip(columns, cells, strict=True))
            sections[current][r.group(1)] = (cell["default"], cell["meaning"])
    return sections


def _config_sections() -> dict[str, type]:
    """Every attrs section class of RunConfig, by its TOML name (env, worker, learner, inference, train, algorithm)."""
    hints = typing.get_type_hints(RunConfig)
    return {f.name: hints[f.name] for f in attrs.fields(RunConfig) if attrs.has(hints[f.name])}


def _top_level_keys() -> set[str]:
    return {f.name for f in attrs.fields(RunConfig)} - set(_config_sections())


def _builtin_params() -> dict[str, type]:
    """Each built-in (mqttrl_plugins) algorithm's hyperparameter class, from the plugin registry."""
    from mqttrl.plugin.manager import get_registry

    for attempt in range(3):  # the built-in plugins may be mid-edit by a concurrent change; give them a moment
        get_registry.cache_clear()
        registry = get_registry()
        found = {
            name: reg.obj.params
            for name, reg in registry.algorithms.items()
            if reg.obj.params.__module__.split(".")[0] == "mqttrl_plugins"
        }
        if set(found) >= BUILTIN_ALGORITHMS or attempt == 2:
            break
        time.sleep(20)
    assert set(found) >= BUILTIN_ALGORITHMS, f"built-in algorithms not registered: {sorted(found)}"
    return found


def _expected() -> dict[str, type | set[str]]:
    """heading id -> the attrs class whose fields it must list (or the set of top-level keys)."""
    out: dict[str, type | set[str]] = {TOP: _top_level_keys()}
    out.update(_config_sections())
    out.update({f"algorithm:{name}": cls for name, cls in _builtin_params().items()})
    return out


def _keys(spec: type | set[str]) -> list[str]:
    if isinstance(spec, set):
        return sorted(spec)
    # [algorithm]'s "params" is where the hyperparameters (their own headings) land, not a key
    return [f.name for f in attrs.fields(spec) if not (spec is AlgorithmSection and f.name == "params")]


def _default(spec: type | set[str], key: str):
    if isinstance(spec, set):
        return getattr(RunConfig(), key)
    field = attrs.fields_dict(spec)[key]
    d = field.default
    return d.factory() if isinstance(d, attrs.Factory) else d


def _parse_default(cell: str):
    text = cell.strip().strip("`")
    if text == "none":
        return None
    return tomllib.loads(f"v = {text}")["v"]


@pytest.fixture(scope="module")
def doc():
    return _doc_sections()


@pytest.fixture(scope="module")
def expected():
    return _expected()


def test_every_section_has_a_heading(doc, expected):
    missing = sorted(set(expected) - set(doc))
    assert not missing, f"docs/configuration.md has no heading for {missing}"
    # a config class we did not think of would show up as a RunConfig field
    assert {"env", "worker", "learner", "inference", "train", "algorithm"} <= set(expected)


def test_every_key_is_documented_under_its_section(doc, expected):
    missing = [
        f"{section}.{key}"
        for section, spec in expected.items()
        for key in _keys(spec)
        if key not in doc.get(section, {})
    ]
    assert not missing, f"keys missing from docs/configuration.md (each under its section's heading): {missing}"


def test_documented_defaults_equal_the_code(doc, expected):
    wrong = []
    for section, spec in expected.items():
        for key in _keys(spec):
            if key not in doc.get(section, {}):
                continue  # reported by the test above
            cell, meaning = doc[section][key]
            want = _default(spec, key)
            try:
                got = _parse_default(cell)
            except tomllib.TOMLDecodeError:
                wrong.append(f"{section}.{key}: default {cell!r} is not TOML")
                continue
            if isinstance(want, tuple):
                want = list(want)
            if got != want or (type(got) is bool) != (type(want) is bool):
                wrong.append(f"{section}.{key}: docs say {cell}, the code says {want!r}")
            if not meaning:
                wrong.append(f"{section}.{key}: no meaning")
    assert not wrong, "docs/configuration.md is out of date:\n" + "\n".join(wrong)


def test_no_documented_key_is_stale(doc, expected):
    stale = []
    for section, rows in doc.items():
        spec = expected.get(section)
        if spec is None:
            stale.append(f"heading {section}: no such section or built-in algorithm")
            continue
        allowed = set(_keys(spec))
        stale += [f"{section}.{key}" for key in rows if key not in allowed]
    assert not stale, f"docs/configuration.md lists keys the config does not have: {stale}"


def test_algorithm_params_is_not_a_key():
    # [algorithm] is name + the plugin's hyperparameters flattened in; "params" is only the to_dict() nesting
    assert [f.name for f in attrs.fields(AlgorithmSection)] == ["name", "params"]


def test_every_set_example_in_the_doc_names_a_real_key(expected):
    """``--set section.key=value`` anywhere on the page must name a key of the config (``SECTION.KEY`` is the placeholder)."""
    text = DOC.read_text()
    examples = re.findall(r"--set\s+([a-z_][a-z0-9_.]*=\S+)", text)
    assert examples, "docs/configuration.md shows no --set example"
    bad = []
    for item in examples:
        parts, _ = parse_override(item.rstrip("`"))
        if len(parts) == 1:
            ok = parts[0] in expected[TOP]
        elif parts[0] == "algorithm":
            ok = parts[1] == "name" or any(
                parts[1] in attrs.fields_dict(cls) for key, cls in expected.items() if key.startswith("algorithm:")
            )
        else:
            spec = expected.get(parts[0])
            ok = len(parts) == 2 and isinstance(spec, type) and parts[1] in attrs.fields_dict(spec)
        if not ok:
            bad.append(item)
    assert not bad, f"--set examples in docs/configuration.md name keys that do not exist: {bad}"


def test_set_examples_load(expected, tmp_path):
    """The examples' overrides are accepted by the real loader, values included."""
    from mqttrl.config import load_config

    params = _builtin_params()
    text = DOC.read_text()
    for line in text.splitlines():
        items = [i.rstrip("`") for i in re.findall(r"--set\s+([a-z_][a-z0-9_.]*=\S+)", line)]
        if not items:
            continue
        algo = "ppo" if "ppo" in line else "dqn"
        load_config(None, [f"algorithm.name={algo}", *items], lambda n: params[n])


def test_the_settings_tables_are_generated_from_the_declarations():
    """Each config section's table sits between markers and equals what the declarations give."""
    from mqttrl.config.reference import MARKER, render_doc, sections

    text = DOC.read_text()
    marked = [m.group(2) for m in MARKER.finditer(text)]
    assert sorted(marked) == sorted(sections()), f"settings markers in docs/configuration.md: {marked}"
    assert text == render_doc(text), (
        "docs/configuration.md's settings tables are out of date: "
        "run python -m mqttrl.config.reference docs/configuration.md"
    )
