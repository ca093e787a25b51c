"""``--version`` on ``mqttrl`` and the node scripts: the installed distribution's version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from mqttrl import cli


@pytest.mark.parametrize(
    "entry, prog",
    [
        (cli.main, "mqttrl"),
        (cli.learner_main, "mqttrl-learner"),
        (cli.worker_main, "mqttrl-worker"),
        (cli.telemetry_main, "mqttrl-telemetry"),
    ],
)
def test_version_prints_the_package_version(entry, prog, capsys):
    with pytest.raises(SystemExit) as e:
        entry(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"{prog} {importlib.metadata.version('mqttrl')}\n"


def test_version_of_the_installed_script():
    out = subprocess.run(
        [sys.executable, "-m", "mqttrl", "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.split() == ["mqttrl", importlib.metadata.version("mqttrl")]


def test_version_falls_back_to_the_source_tree(monkeypatch):
    import mqttrl

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert cli.package_version() == mqttrl.__version__
