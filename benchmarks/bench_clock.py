#!/usr/bin/env python
"""The control loop alone on this PC: the anchored clock's period error, the system timer raised and not.

Not a test: it prints figures. One process runs :class:`~mqttrl.envs.realtime_clock.ControlClock`
the way a real-time worker's control thread waits (``time.sleep``, then the last
``worker.realtime_spin_s`` spun), ``--seconds`` at each ``--hz``, once per variant:

- ``plain``: the ordinary priority, the system timer as it is (Windows' default tick is ~15.6 ms);
- ``timer``: ``timeBeginPeriod(1)`` first (``timeEndPeriod(1)`` after), the ordinary priority
  (Windows only: Linux has no system timer to raise, so the variant is left out there);
- ``worker``: what a real-time worker does (:class:`~mqttrl.envs.realtime_clock.ThreadPriority`
  at ``worker.realtime_priority``'s default): on Windows ``THREAD_PRIORITY_TIME_CRITICAL`` and
  ``timeBeginPeriod(1)``; on Linux ``SCHED_FIFO`` (root or ``CAP_SYS_NICE``; refused: one log line
  and the ordinary priority, which the row says).

The error is how late the observation could be read against the anchored grid (the clock's own
``wait()`` return minus the period's end): p50/p99/max in ms, overruns (later than 10 % of a
period), skipped periods. On a Windows PC, with the worker's install and a checkout (the
benchmarks are not in the wheel), from the checkout's root::

    python -m benchmarks.bench_clock --hz 50 100 --seconds 20

On Linux, the same script in the Windows CPython under Wine (``.wine-py/``, made by
``scripts/windows_python.py``; the worker installed from this checkout)::

    .venv/bin/python -m benchmarks.bench_clock --wine --hz 50 100 --seconds 20

Under Wine the timers and the scheduler are Linux's: the figures say that the loop and the calls
work there, nothing about a Windows PC's timer resolution or jitter. This file imports only the
standard library and mqttrl at its top, so that the Windows CPython can run it as a script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("plain", "timer", "worker")


def measure(hz: float, seconds: float, spin_s: float) -> dict:
    """The anchored clock at ``hz`` for ``seconds`` on this thread: how late its periods ended (ms)."""
    from mqttrl.envs.realtime_clock import ControlClock
    from mqttrl.observe.timing import PeriodStats

    stats = PeriodStats()
    clock = ControlClock(hz, stats=stats, spin_s=spin_s)
    n = max(1, round(hz * seconds))
    late = []
    clock.start()
    t0 = clock.anchor
    for _ in range(n):
        end = clock.period_end
        late.append(clock.wait() - end)
    took = time.perf_counter() - t0
    late.sort()

    def ms(q: float) -> float:
        return round(late[min(n - 1, int(q * n))] * 1000, 3)

    return {
        "periods": n,
        "took_s": round(took, 3),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "max_ms": round(late[-1] * 1000, 3),
        "overruns": stats.overruns,
        "skipped": stats.skipped,
        "spin_cpu": round(stats.spin_s / took, 4),
    }


def run_variant(variant: str, hz: float, seconds: float, spin_s: float) -> dict:
    """One variant (see the module's docstring) at ``hz``: its figures, and what the OS granted."""
    from mqttrl.config import WorkerConfig
    from mqttrl.envs.realtime_clock import ThreadPriority
    from mqttrl.envs.realtime_os import TIMER_PERIOD_MS, Win32Calls

    row: dict = {"variant": variant, "hz": hz, "platform": sys.platform, "spin_ms": round(spin_s * 1000, 3)}
    calls = Win32Calls() if variant == "timer" else None
    prio = ThreadPriority(WorkerConfig().realtime_priority if variant == "worker" else 0)
    try:
        if calls is not None:
            row["timeBeginPeriod"] = calls.time_begin_period(TIMER_PERIOD_MS)
        prio.high()
        row["priority"] = prio.level()
        row["timer"] = prio.system.timer_result if variant == "worker" else row.get("timeBeginPeriod")
        row.update(measure(hz, seconds, spin_s))
    finally:
        prio.close()
        if calls is not None and row.get("timeBeginPeriod") == 0:
            calls.time_end_period(TIMER_PERIOD_MS)
    return row


def run_all(args: argparse.Namespace) -> list[dict]:
    from mqttrl.config import WorkerConfig

    spin_s = WorkerConfig().realtime_spin_s if args.spin_ms is None else args.spin_ms / 1000
    variants = [v for v in args.variants if v != "timer" or sys.platform == "win32"]
    rows = []
    for hz in args.hz:
        for variant in variants:
            row = run_variant(variant, hz, args.seconds, spin_s)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print()
    print("| hz | variant | priority | timer | periods | p50 ms | p99 ms | max ms | overruns | skipped | spin CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        timer = "1 ms" if r.get("timer") == 0 else ("-" if r.get("timer") is None else f"refused ({r['timer']})")
        print(
            f"| {r['hz']:g} | {r['variant']} | {r['priority']} | {timer} | {r['periods']} | {r['p50_ms']:.3f} | "
            f"{r['p99_ms']:.3f} | {r['max_ms']:.3f} | {r['overruns']} | {r['skipped']} | {100 * r['spin_cpu']:.1f} % |"
        )


# ---- the same script in the Windows CPython under Wine (Linux only) ------------------------------
def winpath(path: Path | str) -> str:
    """A Linux path as Wine's Windows programs see it (drive Z: is /)."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


def run_under_wine(argv: list[str], timeout: float) -> list[dict]:
    """This script's ``argv`` run by the Windows CPython ``scripts/windows_python.py`` makes (built or
    refreshed first); its rows. A Windows program started from Linux with its output on a pipe fails,
    so it runs as a batch file under ``cmd /c`` that writes its output to a file (tests/helpers/wine.py)."""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, str(root / "scripts" / "windows_python.py")], capture_output=True, text=True, timeout=900
    )
    if r.returncode != 0:
        raise SystemExit(f"scripts/windows_python.py failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(info["env"])
    with tempfile.TemporaryDirectory(prefix="bench-clock-wine-") as tmp:
        log, bat = Path(tmp) / "clock.log", Path(tmp) / "clock.cmd"
        line = " ".join([str(info["python"]), "-u", winpath(__file__), *argv])
        bat.write_text(f'@{line} > "{winpath(log)}" 2>&1\r\n')
        done = subprocess.run(
            [info["wine"], "cmd", "/c", winpath(bat)],
            env=env,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
        text = log.read_text(errors="replace") if log.exists() else ""
    rows = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not rows:
        raise SystemExit(f"the Windows python under Wine exited {done.returncode}:\n{text[-3000:]}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--hz", type=float, nargs="+", default=[50.0, 100.0], help="control rates, one after another")
    ap.add_argument("--seconds", type=float, default=20.0, help="per rate and variant")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="see the module's doc")
    ap.add_argument("--spin-ms", type=float, help="the spin before each period's end (default: the worker's setting)")
    ap.add_argument("--wine", action="store_true", help="Linux: run it in the Windows CPython under Wine (.wine-py/)")
    ap.add_argument("--out", type=Path, help="write the rows as JSON")
    args = ap.parse_args()
    if args.wine:
        argv = ["--hz", *map(str, args.hz), "--seconds", str(args.seconds), "--variants", *args.variants]
        argv += [] if args.spin_ms is None else ["--spin-ms", str(args.spin_ms)]
        budget = 300 + len(args.hz) * len(args.variants) * args.seconds * 1.5
        rows = run_under_wine(argv, budget)
    else:
        rows = run_all(args)
    print_table(rows)
    if args.out:
        meta = {"args": {k: str(v) for k, v in vars(args).items()}}
        if hasattr(os, "getloadavg"):
            meta["loadavg_1m"] = os.getloadavg()[0]
        args.out.write_text(json.dumps({**meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
