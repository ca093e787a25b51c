"""docs/architecture.md's map and its two paths name real folders, files and methods.

The map is what a newcomer reads first; if a rename leaves it behind, these fail.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

ROOT = pathlib.Path(__file__).parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
MAP_SECTION = DOC[: DOC.index("## Roles and processes")]


@functools.cache
def _classes() -> dict[str, type]:
    """Every class defined in mqttrl and mqttrl_plugins, by name."""
    found: dict[str, type] = {}
    for pkg_name in ("mqttrl", "mqttrl_plugins"):
        pkg = importlib.import_module(pkg_name)
        for mod in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if mod.name.endswith("__main__"):
                continue
            module = importlib.import_module(mod.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and obj.__module__ == mod.name:
                    found.setdefault(name, obj)
    return found


def test_every_path_in_the_map_exists():
    block = MAP_SECTION[MAP_SECTION.index("```text") : MAP_SECTION.index("```", MAP_SECTION.index("```text") + 3)]
    top = None
    checked = 0
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        if indent == 0:
            top = first.rstrip("/")
            assert (ROOT / top).is_dir(), f"map names folder {top}/ that does not exist"
            checked += 1
        elif indent == 2 and re.fullmatch(r"[a-z_]+(\.py|/)", first):
            assert (ROOT / top / first.rstrip("/")).exists(), f"map names {top}/{first} that does not exist"
            checked += 1
    assert checked >= 15, f"only {checked} map entries were recognised; has the map's layout changed?"


def test_every_file_named_in_the_paths_exists():
    named = re.findall(r"`((?:nodes|envs|mqttrl_plugins|wire|transport|state|local)/[\w/]+\.py)`", MAP_SECTION)
    assert len(named) >= 4
    for rel in named:
        assert (ROOT / rel).exists() or (ROOT / "mqttrl" / rel).exists(), f"{rel} is named in the map but missing"


METHOD_REFS = sorted({r for r in re.findall(r"`([A-Z]\w+)\.(\w+)(?:\(\))?`", MAP_SECTION) if r[1] != "md"})


def test_the_paths_name_methods():
    assert len(METHOD_REFS) >= 10, METHOD_REFS


@pytest.mark.parametrize("ref", METHOD_REFS, ids=".".join)
def test_every_class_method_named_in_the_paths_exists(ref):
    cls_name, attr = ref
    cls = _classes().get(cls_name)
    assert cls is not None, f"docs/architecture.md names class {cls_name}, which no module defines"
    assert hasattr(cls, attr), f"docs/architecture.md names {cls_name}.{attr}, which does not exist"
