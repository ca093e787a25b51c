"""A game PC without python-xlib is told to install the screen extra (python-xlib), never
``pip install Xlib`` (another package on PyPI)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.paths import REPO

from mqttrl.cli import errors

HIDE_XLIB = (
    "import sys; sys.modules['Xlib'] = None\n"  # as if python-xlib were not installed
    "sys.argv = ['mqttrl', 'env-spec', 'configs/screen_catch_dqn.toml']\n"
    "from mqttrl.cli import main; main()\n"
)


def test_a_missing_xlib_module_names_the_screen_extra():
    for module in ("Xlib", "Xlib.display", "mss", "pynput"):
        line, code = errors.describe(ModuleNotFoundError(f"No module named {module!r}", name=module))
        assert code == errors.EXIT_MISSING and "mqttrl[screen]" in line, line
        assert "pip install Xlib" not in line


def test_env_spec_without_python_xlib_names_it():
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    out = subprocess.run(
        [sys.executable, "-c", HIDE_XLIB], capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )
    assert out.returncode == errors.EXIT_MISSING, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "python-xlib" in lines[0] and "pip install 'mqttrl[screen]'" in lines[0]
    assert "pip install Xlib" not in lines[0]
