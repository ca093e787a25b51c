"""A plugin package written for the first release still works: it imports ``mqttrl.hookspecs``
(as the docs said then), which now warns and names ``mqttrl.plugin.hookspecs``; ``mqttrl plugins``
lists it and its env is made (it used to fail to import, and ``mqttrl train`` on its env ended in
an "unknown env" traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.plugin_packages import install_package
from helpers.procs import node_env, script

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mqttrl-oldgame"
version = "0.0.1"
requires-python = ">=3.11"

[project.entry-points.mqttrl]
oldgame = "mqttrl_oldgame"

[tool.setuptools]
py-modules = ["mqttrl_oldgame"]
"""

MODULE = """
import gymnasium as gym

from mqttrl.hookspecs import hookimpl  # the first release's documented import


@hookimpl
def mqttrl_register_envs(register):
    register("OldGame-v0", lambda **kw: gym.make("CartPole-v1", **kw), "CartPole under a first-release plugin")
"""


def test_a_first_release_plugin_loads_and_its_env_is_made(tmp_path):
    site = install_package(tmp_path, {"pyproject.toml": PYPROJECT, "mqttrl_oldgame.py": MODULE})
    env = node_env(PYTHONPATH=str(site), MQTTRL_LOAD_PLUGINS="oldgame")
    listed = subprocess.run([script("mqttrl"), "plugins"], capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert report[0]["name"] == "oldgame" and report[0]["envs"] == ["OldGame-v0"] and "error" not in report[0]
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from mqttrl.envs.make import make_env\n"
        "print(make_env('OldGame-v0').observation_space.shape)\n"
    )
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0 and made.stdout.strip() == "(4,)", made.stderr
    assert "mqttrl.hookspecs is deprecated" in made.stderr and "mqttrl.plugin.hookspecs" in made.stderr
