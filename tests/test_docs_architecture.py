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

from mqttrl._deprecated import MOVED

ROOT = pathlib.Path(__file__).parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
MAP_SECTION = DOC[: DOC.index("## Roles and processes")]


#: old import paths kept for plugins (they warn on import; the modules they alias are walked)
DEPRECATED_ALIASES = set(MOVED)


@functools.cache
def _classes() -> dict[str, type]:
    """Every class defined in mqttrl and mqttrl_plugins, by name."""
    found: dict[str, type] = {}
    for pkg_name in ("mqttrl", "mqttrl_plugins"):
        pkg = importlib.import_module(pkg_name)
        for mod in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if mod.name.endswith("__main__") or mod.name in DEPRECATED_ALIASES:
                continue
            module = importlib.import_module(mod.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and obj.__module__ == mod.name:
                    found.setdefault(name, obj)
    return found


def test_every_path_in_the_map_exists():
    """Every folder and file the map names, at each depth (a top folder, its entries, and the entries
    of a sub-folder), exists where the map puts it; and every module of mqttrl/ is named somewhere."""
    block = MAP_SECTION[MAP_SECTION.index("```text") : MAP_SECTION.index("```", MAP_SECTION.index("```text") + 3)]
    parents: dict[int, pathlib.Path] = {}
    checked = 0
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        if not re.fullmatch(r"[a-z_]+(\.py|/)", first) or (indent and indent - 2 not in parents):
            continue  # a continuation line, or a list of several names on one line
        path = (parents[indent - 2] if indent else ROOT) / first.rstrip("/")
        assert path.exists(), f"map names {path.relative_to(ROOT)} that does not exist"
        checked += 1
        for deeper in [d for d in parents if d >= indent]:
            del parents[deeper]
        if first.endswith("/"):
            parents[indent] = path
    assert checked >= 40, f"only {checked} map entries were recognised; has the map's layout changed?"


def test_every_package_of_mqttrl_is_in_the_map():
    block = MAP_SECTION[MAP_SECTION.index("```text") :]
    for pkg in sorted(p.parent.name for p in (ROOT / "mqttrl").glob("*/__init__.py")):
        assert f"  {pkg}/" in block, f"mqttrl/{pkg}/ is missing from docs/architecture.md's map"


def test_every_file_named_in_the_paths_exists():
    named = re.findall(
        r"`((?:nodes|envs|plugins|wire|transport|state|trainer|cli|broker|plugin)/[\w/]+\.py)`", MAP_SECTION
    )
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
