"""A Windows CPython under Wine (``scripts/windows_python.py`` makes it): run ``python.exe`` commands
from a test, find their processes, stop them.

A Windows program started straight from Linux with its output redirected to a file or a pipe
fails (CPython: "init_sys_streams ... Invalid handle"), so each command runs as a batch file under
``cmd /c`` that redirects its output itself. Each Windows process is a Linux process too, whose
command line is the Windows one: :meth:`WindowsPython.linux_pids` finds it, and SIGINT to it is
Ctrl-C (Wine runs the process's console control handlers with ``CTRL_C_EVENT``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.paths import REPO


def winpath(path: Path | str) -> str:
    """A Linux path as Wine's Windows programs see it (drive Z: is /)."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


def _quote(arg: str) -> str:
    return f'"{arg}"' if any(c in arg for c in ' \t&|<>^"') else arg


class WinProc:
    """A ``python.exe`` command running under Wine (its ``cmd /c`` batch is :attr:`p`)."""

    def __init__(self, wpy: WindowsPython, p: subprocess.Popen, log_path: Path, marker: str):
        self.wpy, self.p, self.log_path, self.marker = wpy, p, log_path, marker

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait(self, timeout: float) -> int:
        return self.p.wait(timeout)

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            if self.p.poll() is not None:
                return needle in self.text()
            time.sleep(0.2)
        return False

    def pids(self) -> list[int]:
        """The Linux pids of its ``python.exe`` (and of any child whose command line holds the marker)."""
        return self.wpy.linux_pids(self.marker)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C: SIGINT to the first python.exe of this command (the one ``cmd`` started); its exit code."""
        pids = self.pids()
        if pids and self.p.poll() is None:
            os.kill(min(pids), signal.SIGINT)
        return self.p.wait(timeout)


class WindowsPython:
    """The interpreter ``scripts/windows_python.py`` made (its JSON line) and the env to run it in."""

    def __init__(self, info: dict, workdir: Path):
        self.python = Path(info["python"])
        self.wine = info["wine"]
        self.wine_env = info["env"]
        #: WINEPREFIX: ``prefix / "drive_c"`` is the C: drive
        self.prefix = Path(self.wine_env["WINEPREFIX"])
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def build(cls, root: Path, workdir: Path) -> tuple[WindowsPython | None, str]:
        """Run the build script; (the env, "") or (None, why) when wine is missing (exit 3)."""
        r = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "windows_python.py"), str(root)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if r.returncode == 3:
            return None, r.stderr.strip()
        assert r.returncode == 0, f"scripts/windows_python.py failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return cls(json.loads(r.stdout.strip().splitlines()[-1]), workdir), ""

    def env(self, display: str | None = None) -> dict:
        """This environment with the prefix's settings, without a display unless ``display`` (an X
        display Wine then draws its windows on). CPython's ``._pth`` file makes it ignore PYTHON*
        variables: commands run with ``-u``."""
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "PYTHONPATH", "VIRTUAL_ENV")}
        env.update(self.wine_env)
        if display:
            env["DISPLAY"] = display
        return env

    def start(self, args: list[str], log_path: Path, marker: str | None = None, display: str | None = None) -> WinProc:
        """``python.exe -u ARGS > LOG 2>&1`` under ``cmd /c``; ``marker`` (default: the log's name) must
        be in ARGS so its process can be found (e.g. a worker's name); ``display``: see :meth:`env`."""
        marker = marker or log_path.name
        line = " ".join(_quote(a) for a in [str(self.python), "-u", *args])
        bat = self.workdir / f"{log_path.stem}-{time.monotonic_ns()}.cmd"
        bat.write_text(f'@{line} > "{winpath(log_path)}" 2>&1\r\n')
        p = subprocess.Popen(
            [self.wine, "cmd", "/c", winpath(bat)],
            env=self.env(display),
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return WinProc(self, p, log_path, marker)

    def run(self, args: list[str], timeout: float = 120, display: str | None = None) -> tuple[int, str]:
        """Run ``python.exe -u ARGS`` to its end: (exit code, output)."""
        log = self.workdir / f"run-{time.monotonic_ns()}.log"
        proc = self.start(args, log, display=display)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc.pids())
            raise
        return code, proc.text()

    def linux_pids(self, needle: str) -> list[int]:
        """Linux pids of this env's Windows python processes whose command line holds ``needle``."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "python.exe" in cmd.lower() and needle in cmd and not cmd.startswith(("wine", "/usr/")):
                pids.append(int(d.name))
        return sorted(pids)

    def taskkill(self, windows_pid: int) -> int:
        """``taskkill /F /PID``: Windows' own hard kill (TerminateProcess), run in the prefix."""
        return subprocess.run(
            [self.wine, "taskkill", "/F", "/PID", str(windows_pid)], env=self.env(), capture_output=True, timeout=60
        ).returncode

    @staticmethod
    def kill(pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def shutdown(self) -> None:
        """End every process of the prefix and its wineserver (``wineserver -k``, then ``-w``). A
        wineserver started by programs without a display keeps a desktop that cannot make windows:
        a test that draws one starts from here."""
        server = Path(self.wine).resolve().with_name("wineserver")
        server_cmd = str(server) if server.exists() else "wineserver"
        for flag in ("-k", "-w"):
            subprocess.run([server_cmd, flag], env=self.env(), timeout=60, check=False, capture_output=True)
