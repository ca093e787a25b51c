"""A learner host as a split deployment has it: no ``DISPLAY``, no screen extra, no game.

Shared by the tests of the env spec and of hosts as namespaces, and by ``benchmarks/bench_hosts.py``:
a ``sitecustomize`` that makes the screen extra's modules unimportable (as on a GPU box where
``pip install 'mqttrl[screen]'`` was never run), and the environment of a node without a display.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the screen extra's modules, made unimportable by a sitecustomize on the learner host's PYTHONPATH
BLOCK_SCREEN = (
    "import sys\n"
    "# the learner host: no screen extra (mss, python-xlib, OpenCV, pynput, pygame) and no display\n"
    "for name in ('mss', 'Xlib', 'cv2', 'pynput', 'pygame'):\n"
    "    sys.modules[name] = None\n"
)

#: a learner that trains from the first batches (small replay, one update a step): the short runs'
QUICK_LEARNER_SETS = [
    "algorithm.learning_starts=60",
    "algorithm.batch_size=16",
    "algorithm.buffer_size=4000",
    "algorithm.replay_ratio=1.0",
    "worker.batch_size=16",
    "learner.publish_every=5",
]


def node_env(**extra: str) -> dict:
    """This process's environment without ``DISPLAY``, unbuffered, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def headless_env(workdir: Path, **extra: str) -> dict:
    """:func:`node_env` with the screen extra blocked (its sitecustomize written under ``workdir``)."""
    hook = workdir / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(BLOCK_SCREEN)
    return node_env(PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH", "")])), **extra)
