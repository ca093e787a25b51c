"""``mqttrl plugins`` prints the one-line description each plugin registered with each name
(docs/plugins.md promises them; the hooks ask every plugin for one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mqttrl.cli.plugins import with_descriptions
from mqttrl.plugin.manager import Registered, Registry


def test_each_registered_name_gets_its_plugins_description():
    registry = Registry(
        algorithms={"a": Registered("a", "p", object(), "algorithm a")},
        envs={"e/": Registered("e/", "q", object(), "env e, overriding p's")},
        storages={"s": Registered("s", "p", object(), "storage s")},
    )
    report = [
        {"name": "p", "module": "m", "algorithms": ["a"], "envs": ["e/"], "storages": ["s"]},
        {"name": "q", "module": "n", "envs": ["e/"]},
        {"name": "broken", "module": "b", "error": "failed to import"},
    ]
    p, q, broken = with_descriptions(report, registry)
    assert p["descriptions"] == {"a": "algorithm a", "s": "storage s"}  # e/ is q's now
    assert q["descriptions"] == {"e/": "env e, overriding p's"}
    assert broken == report[2] and "descriptions" not in broken
    assert p["algorithms"] == ["a"] and "descriptions" not in report[0]  # the lists stay; the report is not changed


def test_the_command_prints_the_descriptions():
    env = {**os.environ, "MQTTRL_LOAD_PLUGINS": "dqn,gym_envs,files"}
    mqttrl_cli = str(Path(sys.executable).parent / "mqttrl")
    out = subprocess.run([mqttrl_cli, "plugins"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    report = {p["name"]: p for p in json.loads(out.stdout)}
    assert report["dqn"]["algorithms"] == ["dqn"] and report["dqn"]["descriptions"]["dqn"].startswith("DQN")
    assert "gym/" in report["gym_envs"]["descriptions"] and report["files"]["descriptions"]["files"]
