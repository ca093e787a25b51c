"""The plugin author's stable API: one package holds the contract, old import paths keep working
with a DeprecationWarning, and the wheel's package list names every package of the tree."""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

from mqttrl._deprecated import MOVED

ROOT = pathlib.Path(__file__).parent.parent

CONTRACT = {
    "AlgorithmInfo": "mqttrl.plugin.algorithm",
    "Forward": "mqttrl.plugin.algorithm",
    "Actor": "mqttrl.plugin.algorithm",
    "SyncActor": "mqttrl.plugin.algorithm",
    "AsyncLearner": "mqttrl.plugin.algorithm",
    "SyncLearner": "mqttrl.plugin.algorithm",
    "ActorContext": "mqttrl.plugin.algorithm",
    "Point": "mqttrl.plugin.storage",
    "Storage": "mqttrl.plugin.storage",
    "SampleSpec": "mqttrl.wire.samples",
    "FieldSpec": "mqttrl.wire.samples",
    "hookimpl": "mqttrl.plugin.hookspecs",
}


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_the_contract_is_importable_from_one_package(name):
    import mqttrl.plugin

    assert getattr(mqttrl.plugin, name) is getattr(importlib.import_module(CONTRACT[name]), name)


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("mqttrl.hookspecs", "mqttrl.plugin.hookspecs", "hookimpl"),
        ("mqttrl.algorithm", "mqttrl.plugin.algorithm", "AlgorithmInfo"),
        ("mqttrl.storage", "mqttrl.plugin.storage", "Point"),
    ],
)
def test_an_old_import_path_warns_and_works(old, new, name):
    """A plugin written for an earlier release imports its old paths; they still work, with a warning
    naming the new path (run in a fresh interpreter: the warning fires on first import only)."""
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    from {old} import {name} as old_obj\n"
        f"from {new} import {name} as new_obj\n"
        "assert old_obj is new_obj\n"
        "print([str(x.message) for x in w if issubclass(x.category, DeprecationWarning)])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{old} is deprecated" in out.stdout and new in out.stdout, out.stdout


def test_importing_mqttrl_plugin_pulls_in_no_numpy():
    """The nodes import the hook marker on start-up; the seams (numpy, gymnasium) load on first use."""
    code = "import sys, mqttrl.plugin; print('numpy' in sys.modules, 'gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr


def test_the_wheel_lists_every_package_of_the_tree():
    """pyproject.toml names its packages one by one (plugins/ imports as mqttrl_plugins), so a new
    subpackage must be added there; this names the one left out."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mqttrl").rglob("__init__.py")}
    found |= {
        ".".join(("mqttrl_plugins", *p.parent.relative_to(ROOT / "plugins").parts)).rstrip(".")
        for p in (ROOT / "plugins").rglob("__init__.py")
    }
    assert found == listed, f"missing from pyproject.toml: {sorted(found - listed)}; stale: {sorted(listed - found)}"


def test_a_bare_import_reaches_the_documented_api():
    """docs/python-api.md names mqttrl.api.make_config and mqttrl.config.ConfigError after ``import mqttrl``."""
    code = (
        "import mqttrl\n"
        "assert callable(mqttrl.api.make_config) and issubclass(mqttrl.config.ConfigError, ValueError)\n"
        "assert callable(mqttrl.train) and callable(mqttrl.load_policy) and mqttrl.plugin.hookimpl\n"
        "try:\n    mqttrl.no_such_thing\nexcept AttributeError:\n    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_every_moved_module_still_imports_under_its_old_path_with_a_warning_naming_the_new(old, new):
    """Issue 35 grouped the loose root modules into packages; code written against the old paths
    goes on working for a release, told where the module went."""
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
