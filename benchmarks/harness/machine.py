"""Where and from what a benchmark ran: the machine, the commit and the command, for its results."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def machine() -> dict:
    """Cores, CPU, OS and Python of this machine (figures compare only within one machine)."""
    return {
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def git_commit() -> str | None:
    """The repository's HEAD commit (None outside a git checkout)."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or None


def command_line() -> str:
    """This process's command as a user types it from the repository root."""
    module = sys.modules["__main__"].__spec__
    head = f"python -m {module.name}" if module else f"python {sys.argv[0]}"
    return " ".join([head, *map(shlex.quote, sys.argv[1:])])


def now() -> str:
    """The local date and time, to the minute."""
    return time.strftime("%Y-%m-%d %H:%M")
