"""Node processes for end-to-end tests: the installed console scripts, run with output to a file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def node_env(**extra: str) -> dict:
    """The test's environment for a child process: unbuffered output, one torch/BLAS thread
    (the machine's cores are shared), plus ``extra``."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def script(name: str) -> str:
    """Path of an installed console script (next to the running interpreter)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        assert found, f"console script {name} is not installed: pip install -e ."
        return found
    return str(path)


class Proc:
    """A node process whose output goes to a file we can search."""

    def __init__(self, argv: list[str], log_path: Path, env: dict | None = None):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env or node_env())

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            if self.p.poll() is not None:
                return needle in self.text()
            time.sleep(0.2)
        return False

    def terminate(self, timeout: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._log.close()
        return self.p.returncode

    def kill(self) -> None:
        self.p.kill()
        self.p.wait()
        self._log.close()
