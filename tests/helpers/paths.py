"""Where the repository and the shipped broker kit are, for tests that read shipped files."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the tests folder: a subprocess that imports ``pixel_env`` needs it on its PYTHONPATH
TESTS = REPO / "tests"
#: the operator's broker kit (configs, ACL, create-users.sh, the NATS node config)
BROKER_KIT = REPO / "broker"
