"""The suite's own rules: tests share code through ``helpers/``, never by importing each other
(a test module imported by another runs its module-level setup twice and ties two files'
fixtures together)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names


def test_no_test_module_imports_another():
    tests = {p.stem for p in TESTS.glob("test_*.py")}
    offenders = {
        str(p.relative_to(TESTS)): sorted(imported_modules(p) & tests)
        for p in sorted(TESTS.rglob("*.py"))
        if imported_modules(p) & tests
    }
    assert offenders == {}, f"move what they share into tests/helpers/: {offenders}"


def test_the_rule_sees_an_import_of_a_test_module(tmp_path):
    bad = tmp_path / "test_x.py"
    bad.write_text("from test_dqn import OBS\nimport test_frames\n")
    assert imported_modules(bad) >= {"test_dqn", "test_frames"}
