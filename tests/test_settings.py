"""One declaration per setting: the helper, the typed views the cores read, ``mqttrl settings``,
and one test that holds every default to one value everywhere it shows."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from mqttrl import cli
from mqttrl.cli.common import DefaultsFormatter, setting_arg
from mqttrl.config import ConfigError, RunConfig, build, load_config
from mqttrl.config.reference import lookup, render_doc, sections, settings_text
from mqttrl.config.settings import (
    METADATA_KEY,
    describe,
    from_section,
    non_negative,
    positive,
    setting,
    toml_value,
    view,
)
from mqttrl.nodes.learner.core import LearnerRules
from mqttrl.nodes.worker.core import WorkerRules

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


# ---- the helper ------------------------------------------------------------------------------
def test_a_setting_keeps_its_doc_unit_and_validation_on_the_field():
    @attrs.define
    class Section:
        wait_s: float = setting(1.5, unit="s", doc="how long to wait", validator=positive)
        names: list = setting(factory=lambda: ["a"], doc="some names")  # noqa: RUF009

    wait, names = describe(Section)
    assert (wait.name, wait.type, wait.default, wait.unit, wait.doc, wait.allowed) == (
        "wait_s",
        float,
        1.5,
        "s",
        "how long to wait",
        "> 0",
    )
    assert names.default == ["a"] and Section().names is not Section().names  # a fresh list each time
    assert attrs.fields(Section).wait_s.metadata[METADATA_KEY].doc == "how long to wait"
    with pytest.raises(ConfigError, match=r"wait_s=-1: must be > 0"):
        Section(wait_s=-1)


def test_a_setting_doc_is_one_line():
    with pytest.raises(ValueError, match="one non-empty line"):
        setting(1, doc="two\nlines")
    with pytest.raises(ValueError, match="one non-empty line"):
        setting(1, doc=" ")


class Opaque:
    """A plugin's own type: the loader keeps a value of it as given."""


@attrs.define
class ThirdPartyParams:
    """A plugin's hyperparameters mixing the helper and plain attrs fields of assorted types."""

    lr: float = setting(1e-3, doc="learning rate", validator=positive)
    steps: int = attrs.field(default=5, validator=non_negative)
    layers: list[int] = attrs.field(factory=lambda: [8])
    shape: tuple[int, ...] = (2, 2)
    mode: Literal["fast", "slow"] = "fast"
    limit: int | None = None
    label: int | str = 0
    extra: Any = None
    path: Path = Path("x")
    thing: Opaque | None = None
    flag: bool = False


def test_plain_attrs_fields_of_a_third_party_plugin_still_load_and_describe():
    p = build(
        ThirdPartyParams,
        {"lr": 1, "steps": 2, "layers": [4, 4], "shape": [3, 3], "mode": "slow", "limit": "none", "label": "x"},
        "algorithm",
    )
    assert p.lr == 1.0 and type(p.lr) is float  # an integer widens to a number
    assert p.layers == [4, 4] and p.shape == (3, 3) and p.mode == "slow" and p.limit is None and p.label == "x"
    assert build(ThirdPartyParams, {"limit": 7, "extra": {"a": [1]}}, "algorithm").limit == 7
    assert build(ThirdPartyParams, {"path": "runs/a"}, "algorithm").path == Path("runs/a")
    thing = Opaque()
    assert build(ThirdPartyParams, {"thing": thing}, "algorithm").thing is thing
    by_name = {d.name: d for d in describe(ThirdPartyParams)}
    assert by_name["lr"].doc == "learning rate" and by_name["steps"].doc == "" and by_name["steps"].unit is None
    assert by_name["steps"].allowed == ">= 0" and by_name["layers"].default == [8]
    text = settings_text("algorithm.thirdparty", describe(ThirdPartyParams))
    assert "  steps = 5\n      type: integer >= 0\n" in text and "  limit = none\n" in text


@pytest.mark.parametrize(
    "data,needles",
    [
        ({"steps": 1.5}, ["algorithm.steps=1.5", "expected an integer"]),
        ({"steps": True}, ["algorithm.steps=True", "expected an integer"]),
        ({"steps": -1}, ["algorithm.steps=-1", "must be >= 0"]),
        ({"layers": [1, "a"]}, ["algorithm.layers=[1, 'a']", "expected a list of integer"]),
        ({"layers": "abc"}, ["algorithm.layers='abc'", "expected a list"]),
        ({"mode": "medium"}, ["algorithm.mode='medium'", "'fast', 'slow'"]),
        ({"limit": "lots"}, ["algorithm.limit='lots'", "expected an integer or none"]),
        ({"flag": 1}, ["algorithm.flag=1", "true or false"]),
        ({"lr": "fast"}, ["algorithm.lr='fast'", "expected a number"]),
        ({"stpes": 3}, ["unknown key algorithm.stpes", "did you mean steps?", "allowed keys in [algorithm]"]),
    ],
)
def test_bad_values_of_any_declared_type_are_one_line(data, needles):
    with pytest.raises(ConfigError) as e:
        build(ThirdPartyParams, data, "algorithm")
    msg = str(e.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_the_first_bad_key_in_the_data_is_the_one_named():
    with pytest.raises(ConfigError, match=r"^algorithm\.flag=2: expected true or false$"):
        build(ThirdPartyParams, {"flag": 2, "steps": "x"}, "algorithm")


@pytest.mark.parametrize(
    "item,message",
    [
        ("learner.publish_evry=5", "unknown key learner.publish_evry (did you mean publish_every?)"),
        ("worker.batch_sise=5", "unknown key worker.batch_sise (did you mean batch_size?)"),
        ("lerner.device=cpu", "unknown section or key 'lerner' (did you mean learner?)"),
        ("worker.inference=gpu", "worker.inference='gpu': allowed values are 'auto', 'torch', 'numpy', 'remote'"),
    ],
)
def test_misspelled_keys_get_a_suggestion(item, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_no_suggestion_for_a_key_like_none():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["worker.zzzzzz=1"])
    assert "did you mean" not in str(e.value)


# ---- typed views ------------------------------------------------------------------------------
@attrs.define
class Section:
    timeout_s: float = setting(3.0, unit="s", doc="a timeout", validator=positive)
    size_mb: float = setting(2.0, unit="MB", doc="a size")

    @property
    def size_bytes(self) -> int:
        return int(self.size_mb * 1024 * 1024)


def test_a_view_takes_defaults_and_docs_from_the_declaration_and_computes_derived_values():
    @view(Section)
    class Rules:
        name: str
        timeout_s: float
        size_bytes: int
        own: int = 7

    assert Rules(name="n") == Rules(name="n", timeout_s=3.0, size_bytes=2 * 1024 * 1024, own=7)
    assert attrs.fields(Rules).timeout_s.metadata[METADATA_KEY].doc == "a timeout"
    made = from_section(Rules, Section(timeout_s=9.0, size_mb=1.0), name="x")
    assert made == Rules(name="x", timeout_s=9.0, size_bytes=1024 * 1024)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.timeout_s = 1.0


def test_a_view_whose_type_disagrees_with_the_declaration_fails_at_once():
    with pytest.raises(TypeError, match="timeout_s"):

        @view(Section)
        class Rules:
            timeout_s: int


def test_the_cores_rules_are_views_of_their_sections():
    """No hand copy: each Rules field named like a setting has the declaration's default and doc."""
    for rules, section in ((LearnerRules, "learner"), (WorkerRules, "worker")):
        declared = {d.name: d for d in sections()[section]}
        shared = [f for f in attrs.fields(rules) if f.name in declared]
        assert len(shared) >= 4
        for f in shared:
            assert f.default == declared[f.name].default, f"{rules.__module__}.Rules.{f.name}"
            assert f.metadata[METADATA_KEY].doc == declared[f.name].doc


def test_rules_from_a_config_follow_its_values():
    cfg = load_config(None, ["learner.max_payload_mb=3", "learner.metrics_workers=9", "run=r1"])
    rules = LearnerRules.from_config(cfg)
    assert (rules.run, rules.max_payload_bytes, rules.metrics_workers) == ("r1", 3 * 1024 * 1024, 9)
    assert rules.max_payload_bytes == cfg.learner.max_payload_bytes


# ---- one value everywhere -----------------------------------------------------------------------
def _settings_output(capsys) -> dict[str, dict[str, Any]]:
    """``mqttrl settings`` parsed back: section -> {key: default (from its TOML)}."""
    cli.main(["settings"])
    out: dict[str, dict[str, Any]] = {}
    current = None
    for line in capsys.readouterr().out.splitlines():
        if m := re.fullmatch(r"\[(\w+)\]|# (top) level", line):
            current = out.setdefault(m.group(1) or m.group(2), {})
        elif m := re.fullmatch(r"  (\w+) = (.*)", line):
            text = m.group(2)
            current[m.group(1)] = None if text == "none" else tomllib.loads(f"v = {text}")["v"]
    return out


def _docs_tables() -> dict[str, dict[str, Any]]:
    """The generated tables of docs/configuration.md parsed back: section -> {key: default}."""
    out: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"<!-- settings:(\w+) -->\n(.*?)<!-- /settings:\1 -->", DOC.read_text(), re.DOTALL):
        rows = out.setdefault(m.group(1), {})
        for row in re.findall(r"^\| `(\w+)` \|(.*)\|$", m.group(2), re.MULTILINE):
            cell = re.split(r"(?<!\\)\|", row[1])[1].strip().strip("`").replace("\\|", "|")
            rows[row[0]] = None if cell == "none" else tomllib.loads(f"v = {cell}")["v"]
    return out


def _same(a: Any, b: Any) -> bool:
    a, b = (list(x) if isinstance(x, tuple) else x for x in (a, b))
    return a == b and type(a) is type(b)


def test_every_default_has_one_value_everywhere_it_shows(capsys):
    """The declaration, `mqttrl settings`, the docs table, the resolved config a node receives
    (RunConfig().to_dict() through JSON) and the cores' Rules made from a default config."""
    shown = _settings_output(capsys)
    documented = _docs_tables()
    resolved = RunConfig().to_dict()
    learner_rules = attrs.asdict(LearnerRules.from_config(RunConfig()))
    worker_rules = attrs.asdict(WorkerRules.from_config(RunConfig(), "async"))
    checked = 0
    for section, declared in sections().items():
        for d in declared:
            where = f"{section}.{d.name}"
            assert _same(shown[section][d.name], d.default), f"{where}: mqttrl settings shows {shown[section][d.name]}"
            assert _same(documented[section][d.name], d.default), f"{where}: the docs say {documented[section][d.name]}"
            value = resolved[d.name] if section == "top" else resolved[section][d.name]
            assert _same(value, d.default), f"{where}: a default RunConfig resolves to {value!r}"
            rules = {"learner": learner_rules, "worker": worker_rules}.get(section, {})
            if d.name in rules:
                assert _same(rules[d.name], d.default), f"{where}: the core's Rules hold {rules[d.name]!r}"
            checked += 1
    assert checked == sum(len(v) for v in sections().values()) > 40
    assert set(shown) == set(documented) == set(sections())
    # and what the cores make of an unconfigured node: Rules() equals Rules from a default config
    assert WorkerRules() == WorkerRules.from_config(RunConfig(), "async")
    assert LearnerRules(run=RunConfig().run) == LearnerRules.from_config(RunConfig())


def test_a_flag_mirroring_a_setting_names_its_declared_default():
    p = argparse.ArgumentParser(prog="x", formatter_class=DefaultsFormatter)
    setting_arg(p, "inference.max_delay_ms", "--max-delay-ms")
    setting_arg(p, "inference.backend", "--backend")
    setting_arg(p, "train.workers", "--workers", help="worker processes")
    text = " ".join(p.format_help().split())
    assert "(default: inference.max_delay_ms = 0.0 ms)" in text and "how long a server waits" in text
    assert '(default: inference.backend = "auto")' in text and "{auto,torch,numpy}" in text
    assert "worker processes (default: train.workers = 2)" in text
    args = p.parse_args(["--workers", "3"])
    assert args.workers == 3 and args.max_delay_ms is None  # without the flag the config's value stands
    with pytest.raises(SystemExit):
        p.parse_args(["--backend", "gpu"])


# ---- mqttrl settings ----------------------------------------------------------------------------
def test_mqttrl_settings_prints_a_section_and_one_setting(capsys):
    cli.main(["settings", "learner"])
    out = capsys.readouterr().out
    assert out.startswith("[learner]\n  publish_every = 50\n      type: integer > 0\n")
    assert "  max_payload_mb = 64.0\n      type: number > 0, unit: MB\n" in out and "[worker]" not in out
    cli.main(["settings", "train.target_return"])
    assert capsys.readouterr().out.startswith("[train]\n  target_return = 475.0\n      type: number or none\n")
    cli.main(["settings", "worker", "--markdown"])
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "| key | type | default | unit | meaning |"
    assert "| `max_batch_delay_s` | number > 0 | `0.5` | s |" in out


def test_mqttrl_settings_lists_an_algorithms_hyperparameters(capsys):
    cli.main(["settings", "algorithm.ppo"])
    out = capsys.readouterr().out
    assert out.startswith("[algorithm.ppo]\n") and "  lr = 0.001\n" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["settings", "wrker"], "no section 'wrker' (did you mean worker?)"),
        (["settings", "worker.bach_size"], "no setting 'worker.bach_size' (did you mean batch_size?)"),
        (["settings", "algorithm.nope"], "unknown algorithm 'nope'"),
    ],
)
def test_mqttrl_settings_refuses_a_wrong_name_in_one_line(argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert message in str(e.value.code) and "\n" not in str(e.value.code)


def test_lookup_and_doc_rendering():
    assert lookup("run").default == "cartpole" and lookup("learner.device").default == "auto"
    assert toml_value({"a": [1, "x"], "b": None}) == '{a = [1, "x"], b = none}'
    stale = "<!-- settings:top -->\n| old |\n<!-- /settings:top -->\n"
    assert '`run` | string | `"cartpole"`' in render_doc(stale)
    with pytest.raises(ConfigError, match="no settings section"):
        render_doc("<!-- settings:nope -->\n<!-- /settings:nope -->")
