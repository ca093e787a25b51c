"""Five hosts, ten minutes, the faults of a real split deployment (issue 34), then an account.

The deployment of ``tests/test_hosts.py`` (network namespaces on one machine, ``benchmarks/harness/netns.py``)
run for ``--minutes``: a broker host (mosquitto), a headless learner host (no DISPLAY, the screen
extra's modules blocked by a sitecustomize, no game), two game PCs (each its own Xvfb; its worker
launches Catch itself, ``[env] launch``) and a telemetry host (files). Faults, at fixed fractions of
the run (D = ``--minutes``; the times are printed and reported):

* the whole run: pc1 reaches the broker through the TCP proxy of ``benchmarks/harness/link.py``, run in
  pc1's namespace (``--proxy``, below), 150 ms each way (``--latency-ms``); tc netem is not available
  on this kernel, so the latency is the proxy's, not the kernel's
* 0.10 D: pc1's eth0 capped to 200 kB/s (``Host.rate``, tc tbf) for ``--rate-s`` (default 0.15 D)
* 0.30 D: pc2's cable pulled (``Host.link(False)``) for ``--cable-s`` (60 s), then plugged back
* 0.50 D: pc2's game killed (SIGKILL to the Catch process its worker started)
* 0.63 D: pc1's game hung (SIGSTOP to its Catch; ``env.kwargs.frozen_s`` = 3 lets the worker notice)
* 0.77 D: the learner SIGKILLed, started again with ``--resume`` 2 s later (``learner.checkpoint_every``
  is small so that a checkpoint is there)

Every node writes an audit ledger into one ``MQTTRL_LEDGER_DIR``; at the end the workers are stopped
(they flush), the learner drains for ``--drain-s`` and stops, and the ledgers are joined by
``benchmarks/chaos.py``'s ``reconcile``: every batch sent is accepted, refused (by reason) or lost with
a named cause, anything else is UNEXPLAINED and makes the exit status 1. The report (printed, and
``--json PATH``): env steps and wall time, learner updates, episodes per game PC (telemetry's
``episode.csv``), the greedy evaluations each worker played on its own game (``[train] eval_on =
"workers"`` in the config; their log lines), game launches and relaunches per PC (the workers' log
lines), the learner's resume, the ledger join, and each fault's time with the time until that PC's
episodes (and batches accepted by the learner) resumed. Results: docs/benchmarks.md, "Hosts as
namespaces (issue 34)".

Needs root (``ip netns``), iproute2, mosquitto and Xvfb. Commands (the repository root):

    sudo .venv/bin/python -m benchmarks.bench_hosts --minutes 10 --json /tmp/bench_hosts.json
    sudo .venv/bin/python -m benchmarks.bench_hosts --target 10 --no-faults --minutes 15   # to a greedy target

With ``--target R`` the learner trains as ``configs/screen_catch_dqn.toml`` ships (its DQN settings;
Catch with 3 lives, as ``benchmarks/bench_screen.py``), the workers evaluate on their own games every
``--eval-every`` s (``--eval-episodes`` each), and the run stops at the first evaluation whose mean
reaches R (telemetry's ``eval.csv``), reporting the env steps its model was trained on and the time.
    sudo .venv/bin/python -m benchmarks.bench_hosts --minutes 2 --cable-s 15 --rate-s 15 --workdir /tmp/hosts-dry
    .venv/bin/python -m benchmarks.bench_hosts --report-only /tmp/hosts-dry    # the report again, from the files

The proxy mode, what the benchmark itself starts in pc1's namespace:

    ip netns exec NS .venv/bin/python -m benchmarks.bench_hosts --proxy 10.X.0.1:1883 --latency-ms 150 --port-file F
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks.harness import netns
from benchmarks.harness.learner_host import QUICK_LEARNER_SETS, headless_env, node_env
from benchmarks.harness.machine import REPO
from benchmarks.harness.procs import repo_env

BIN = Path(sys.executable).parent

RUN = "screen-catch"
#: Catch as benchmarks/bench_screen.py trains it to a greedy target (3 lives)
TARGET_GAME_ARGS = ("--lives", "3", "--ball-speed", "300", "--paddle-speed", "400")


# ---- the latency proxy, run in pc1's namespace -----------------------------------------------
def proxy_main(target: str, latency_s: float, port_file: Path) -> int:
    """:class:`benchmarks.harness.link.Link` listening on this namespace's 127.0.0.1, forwarding to ``target``
    (host:port on the LAN, not the loopback) with ``latency_s`` each way, until SIGTERM."""
    from benchmarks.harness.link import Link

    host, port = target.rsplit(":", 1)
    link = Link(int(port), latency_s=latency_s, target_host=host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(link.port))
    tmp.replace(port_file)
    print(f"proxy 127.0.0.1:{link.port} -> {target}, {latency_s * 1000:.0f} ms each way", flush=True)
    last = 0
    while not stop.wait(5):
        if link.connections != last:
            last = link.connections
            print(f"{time.strftime('%H:%M:%S')} connections so far: {last}", flush=True)
    link.close()
    return 0


# ---- set-up (as tests/test_hosts.py) -------------------------------------------------------------
# ---- what the files say ----------------------------------------------------------------------------
def episodes(telemetry_dir: Path) -> list[dict]:
    path = telemetry_dir / "episode.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def episodes_by_worker(telemetry_dir: Path) -> dict[str, int]:
    return dict(collections.Counter(row["worker"] for row in episodes(telemetry_dir)))


def metrics_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "learner_metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut by the SIGKILL
    return rows


def learner_updates(run_dir: Path) -> int:
    return max((r.get("updates") or 0 for r in metrics_rows(run_dir)), default=0)


def game_pids(log: Path) -> list[int]:
    """The pids of the games a worker started, from its log lines, in order."""
    out = []
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if "started the game (pid " in line:
                out.append(int(line.split("started the game (pid ", 1)[1].split(")", 1)[0]))
    return out


def is_game(pid: int) -> bool:
    try:
        return b"demo_game" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def current_game(log: Path) -> int:
    """The pid of the Catch a worker is playing now (its newest start), checked in /proc."""
    pids = [p for p in game_pids(log) if is_game(p)]
    if not pids:
        raise RuntimeError(f"no running game in {log.name}'s 'started the game' lines")
    return pids[-1]


def log_lines(log: Path, needle: str) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text(errors="replace").splitlines() if needle in line]


# ---- the run ----------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args, work: Path):
        self.args, self.work = args, work
        self.logs, self.ledgers = work / "logs", work / "ledgers"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ledgers.mkdir(exist_ok=True)
        self.run_dir, self.telemetry_dir = work / "learner-run", work / "telemetry"
        self.faults: list[dict] = []
        self.events: list[tuple[float, str]] = []  # (time, what): the schedule as it ran
        #: with --target: the first worker evaluation that reached it (telemetry's eval.csv row)
        self.solved: dict | None = None

    def note(self, what: str) -> None:
        t = time.time()
        self.events.append((t, what))
        since = t - self.t0 if getattr(self, "t0", None) else 0.0
        print(f"  {since:6.1f}s {what}", flush=True)

    def start(self, lan: netns.Lan) -> None:
        a = self.args
        self.broker, self.learner_host, self.pc1, self.pc2, self.telemetry_host = (
            lan.host(n) for n in ("broker", "learner", "pc1", "pc2", "telemetry")
        )
        conf = self.work / "mosquitto.conf"
        conf.write_text("listener 1883 0.0.0.0\nallow_anonymous true\nmax_queued_messages 100000\n")
        self.broker.start(["mosquitto", "-c", str(conf)], self.logs / "broker.log")
        self.url = f"mqtt://{self.broker.address}:1883"
        title = "catch on this pc"
        game = [sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", title]
        common = [
            'env.launch_env={SDL_VIDEODRIVER = "x11", SDL_AUDIODRIVER = "dummy"}',
            f"env.kwargs.window={json.dumps(title)}",
            f"env.kwargs.frozen_s={a.frozen_s}",
            "learner.metrics_interval_s=0.5",
            f"learner.checkpoint_every={a.checkpoint_every}",
        ]
        if a.target is not None:  # training to a greedy target: the config's DQN, bench_screen.py's Catch
            self.sets = [
                f"env.launch={json.dumps([*game, *TARGET_GAME_ARGS])}",
                *common,
                f"train.eval_every_s={a.eval_every}",
                f"train.eval_episodes={a.eval_episodes}",
            ]
        else:  # faults: a short learner (small replay, one update a step) that trains from the first batches
            self.sets = [
                f"env.launch={json.dumps([*game, '--lives', '1', '--ball-speed', '300'])}",
                "env.kwargs.step_s=0.03",
                *common,
                *QUICK_LEARNER_SETS,
            ]
        if a.learner_venv:  # a venv of its own without the screen extra (learner_venv() made it)
            learner_bin = a.learner_venv / "bin"
            self.headless = node_env(MQTTRL_LEDGER_DIR=str(self.ledgers))
        else:  # this venv, the screen extra's modules blocked by a sitecustomize
            learner_bin = BIN
            self.headless = headless_env(self.work, MQTTRL_LEDGER_DIR=str(self.ledgers))
        config = str(REPO / "configs" / "screen_catch_dqn.toml")
        self.learner_argv = [
            *(str(learner_bin / "mqttrl-learner"), "--config", config, "--broker", self.url),
            *("--run-dir", str(self.run_dir)),
            *(x for s in self.sets for x in ("--set", s)),
        ]
        self.learner = self.learner_host.start(self.learner_argv, self.logs / "learner.log", self.headless)
        self.telemetry = self.telemetry_host.start(
            [
                *(str(BIN / "mqttrl-telemetry"), "--run", RUN, "--broker", self.url, "--interval", "0.5"),
                *("--storage-opt", f"files.dir={self.telemetry_dir}"),
            ],
            self.logs / "telemetry.log",
            node_env(),
        )
        # pc1 reaches the broker through the latency proxy in its own namespace
        port_file = self.work / "proxy-port"
        self.pc1.start(
            [
                *(sys.executable, "-m", "benchmarks.bench_hosts", "--proxy", f"{self.broker.address}:1883"),
                *("--latency-ms", str(a.latency_ms), "--port-file", str(port_file)),
            ],
            self.logs / "proxy-pc1.log",
            repo_env(node_env()),
        )
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "the latency proxy on pc1 did not start: " + (self.logs / "proxy-pc1.log").read_text()
                )
            time.sleep(0.1)
        brokers = {"pc1": f"mqtt://127.0.0.1:{port_file.read_text().strip()}", "pc2": self.url}
        self.workers = {}
        for pc in (self.pc1, self.pc2):
            display = pc.xvfb(self.logs)
            argv = [str(BIN / "mqttrl-worker"), "--run", RUN, "--broker", brokers[pc.name], "--name", pc.name]
            env = node_env(DISPLAY=display, MQTTRL_LEDGER_DIR=str(self.ledgers))
            self.workers[pc.name] = pc.start(argv, self.logs / f"worker-{pc.name}.log", env)
        print(f"five hosts on bridge {lan.bridge}: broker {self.url}, pc1 through {brokers['pc1']}", flush=True)

    def wait_until_both_played(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            counts = episodes_by_worker(self.telemetry_dir)
            if counts.get("pc1", 0) >= 1 and counts.get("pc2", 0) >= 1 and learner_updates(self.run_dir) > 0:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(self.logs.glob("*.log"))
                )
                raise RuntimeError(f"both game PCs' episodes and learner updates: not within {timeout:.0f} s\n{tails}")
            for name, p in (("learner", self.learner), *self.workers.items()):
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} while starting; see {self.logs}")
            time.sleep(0.5)

    # ---- faults
    def schedule(self, duration: float) -> list[tuple[float, str, callable]]:
        a = self.args
        rate_s = a.rate_s if a.rate_s is not None else 0.15 * duration
        return sorted(
            [
                (0.10 * duration, "pc1 eth0 capped to 200 kB/s", self.rate_on),
                (0.10 * duration + rate_s, "pc1 eth0 cap removed", self.rate_off),
                (0.30 * duration, f"pc2 cable pulled for {a.cable_s:g} s", self.cable_pull),
                (0.30 * duration + a.cable_s, "pc2 cable plugged back", self.cable_plug),
                (0.50 * duration, "pc2 game SIGKILLed", self.game_kill),
                (0.63 * duration, "pc1 game SIGSTOPped (hung)", self.game_hang),
                (0.77 * duration, "learner SIGKILLed, --resume in 2 s", self.learner_kill),
            ],
            key=lambda e: e[0],
        )

    def rate_on(self) -> None:
        self.pc1.rate(self.args.rate_bytes)
        self.faults.append({"kind": "rate_cap", "target": "pc1", "t": time.time(), "bytes_per_s": self.args.rate_bytes})

    def rate_off(self) -> None:
        self.pc1.rate(None)
        f = next(f for f in self.faults if f["kind"] == "rate_cap")
        f["t_done"] = time.time()

    def cable_pull(self) -> None:
        self.pc2.link(False)
        self.faults.append({"kind": "cable_pulled", "target": "pc2", "t": time.time()})

    def cable_plug(self) -> None:
        self.pc2.link(True)
        f = next(f for f in self.faults if f["kind"] == "cable_pulled")
        f["t_done"] = time.time()

    def game_kill(self) -> None:
        pid = current_game(self.logs / "worker-pc2.log")
        os.kill(pid, signal.SIGKILL)
        t = time.time()
        self.faults.append({"kind": "game_killed", "target": "pc2", "t": t, "t_done": t, "pid": pid})

    def game_hang(self) -> None:
        pid = current_game(self.logs / "worker-pc1.log")
        os.kill(pid, signal.SIGSTOP)
        t = time.time()
        self.faults.append({"kind": "game_hung", "target": "pc1", "t": t, "t_done": t, "pid": pid})

    def learner_kill(self) -> None:
        t = time.time()
        updates_before = learner_updates(self.run_dir)
        self.learner.kill()  # `ip netns exec` execs the learner: this pid is the learner's
        self.learner.wait()
        time.sleep(2)
        self.learner = self.learner_host.start(
            [*self.learner_argv, "--resume"], self.logs / "learner.log", self.headless
        )
        self.faults.append(
            {
                "kind": "learner_kill",
                "target": "learner",
                "t": t,
                "t_done": time.time(),
                "updates_before": updates_before,
            }
        )

    def target_reached(self) -> dict | None:
        """The first greedy evaluation a worker played that reached ``--target`` (telemetry's eval.csv)."""
        path = self.telemetry_dir / "eval.csv"
        if self.args.target is None or not path.exists():
            return None
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("mean") and float(row["mean"]) >= self.args.target:
                    return row
        return None

    def run_faults(self, duration: float) -> None:
        self.t0 = time.time()
        plan = [] if self.args.no_faults else self.schedule(duration)
        print("schedule (s after both PCs played):", ", ".join(f"{t:.0f} {what}" for t, what, _ in plan), flush=True)
        end = self.t0 + duration
        while time.time() < end:
            now = time.time()
            solved = self.target_reached()
            if solved is not None:
                self.solved = {**solved, "wall_s_since_both_played": round(now - self.t0, 1)}
                self.note(f"target {self.args.target:g} reached: {solved.get('evaluator')} mean {solved['mean']}")
                break
            while plan and now >= self.t0 + plan[0][0]:
                _, what, action = plan.pop(0)
                try:
                    action()
                    self.note(what)
                except Exception as e:  # a fault that could not be made is reported, the run goes on
                    self.note(f"{what}: FAILED ({type(e).__name__}: {e})")
                    self.faults.append({"kind": "failed", "what": what, "error": str(e), "t": time.time()})
            for name, p in self.workers.items():
                if p.poll() is not None and not any(
                    f.get("kind") == "exit" and f["target"] == name for f in self.faults
                ):
                    self.faults.append({"kind": "exit", "target": name, "t": now, "code": p.returncode})
                    self.note(f"worker {name} EXITED with {p.returncode}")
            if self.learner.poll() is not None and not any(
                f.get("kind") == "exit" and f["target"] == "learner" for f in self.faults
            ):
                self.faults.append({"kind": "exit", "target": "learner", "t": now, "code": self.learner.returncode})
                self.note(f"learner EXITED with {self.learner.returncode}")
            time.sleep(0.2)
        self.t_end = time.time()

    def wind_down(self) -> None:
        """Workers stop first (they flush their outboxes), the learner drains, then stops (checkpoint)."""
        for p in self.workers.values():
            if p.poll() is None:
                p.terminate()
        for name, p in self.workers.items():
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                print(f"worker {name} did not stop within 40 s of SIGTERM: killed", flush=True)
                p.kill()
                p.wait()
        self.note("workers stopped")
        time.sleep(self.args.drain_s)
        for p in (self.learner, self.telemetry):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.note("learner and telemetry stopped")


def leftover_games(logs: Path) -> None:
    """Kill any Catch a worker started that outlived it (by pid, from the workers' own log lines)."""
    for log in logs.glob("worker-*.log"):
        for pid in game_pids(log):
            if is_game(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                    print(f"killed a leftover game, pid {pid} ({log.name})", flush=True)
                except OSError:
                    pass


# ---- the report -------------------------------------------------------------------------------------
def accepted_from(ledgers: Path) -> list[tuple[float, str]]:
    from mqttrl.observe.ledger import read as read_ledger

    out = []
    for path in ledgers.glob("learner-*.jsonl"):
        out += [(e["t"], e["worker"]) for e in read_ledger(path) if e["ev"] == "accepted"]
    return sorted(out)


def refusals(ledgers: Path) -> dict[str, int]:
    """Every refusal in the learners' ledgers by reason, those of batches accepted once before
    (a resend after a reconnect: a duplicate) included; the join counts a batch once."""
    from mqttrl.observe.ledger import read as read_ledger

    out = collections.Counter()
    for path in ledgers.glob("learner-*.jsonl"):
        out.update(str(e.get("reason")).split(":")[0] for e in read_ledger(path) if e["ev"] == "refused")
    return dict(out)


def worker_evaluations(log: Path) -> list[dict]:
    """The greedy evaluations a worker played on its own game (``[train] eval_on = "workers"``), from
    its log lines ``worker NAME evaluated model V: mean R over N episodes (T s)``."""
    out = []
    for line in log_lines(log, " evaluated model "):
        try:
            head, tail = line.split(" evaluated model ", 1)[1].split(": mean ", 1)
            mean, rest = tail.split(" over ", 1)
            n, secs = rest.split(" episodes (", 1)
            out.append({"model": int(head), "mean": float(mean), "episodes": int(n), "s": float(secs.split(" s)")[0])})
        except ValueError:
            continue
    return out


def report(bench: Bench, times: dict) -> dict:
    """The account of a run from its files (logs, ledgers, telemetry, learner metrics) and
    ``times``: t_start, t_started (both PCs played), t_done (everything stopped)."""
    from benchmarks import chaos  # the ledger join

    logs = bench.logs
    rows = episodes(bench.telemetry_dir)
    metrics = metrics_rows(bench.run_dir)
    joined = chaos.reconcile(
        bench.ledgers,
        [f for f in bench.faults if "t" in f],
        SimpleNamespace(seen=[]),  # no weights watch here
        [],  # the greedy evaluations are the workers' own here (reported below)
        SimpleNamespace(train=SimpleNamespace(target_return=None)),
        bench.t0,
    )
    env_steps = {}
    for pc in ("pc1", "pc2"):
        steps = [int(r["env_steps"]) for r in rows if r["worker"] == pc and r.get("env_steps")]
        env_steps[pc] = max(steps, default=0)
    accepted = accepted_from(bench.ledgers)

    def first_episode_after(pc: str | None, t: float) -> float | None:
        ts = sorted(float(r["time"]) for r in rows if (pc is None or r["worker"] == pc) and float(r["time"]) > t)
        return ts[0] - t if ts else None

    def first_accept_after(pc: str | None, t: float) -> float | None:
        return next((ta - t for ta, w in accepted if ta > t and (pc is None or w == pc)), None)

    faults = []
    for f in bench.faults:
        if f["kind"] in ("failed", "exit"):
            faults.append({**f, "at_s": round(f["t"] - bench.t0, 1)})
            continue
        end = f.get("t_done", f["t"])
        pcs = [f["target"]] if f["target"] in ("pc1", "pc2") else ["pc1", "pc2"]
        entry = {
            "kind": f["kind"],
            "target": f["target"],
            "at_s": round(f["t"] - bench.t0, 1),
            "lasted_s": round(end - f["t"], 1),
            # from the fault's end (the cable plugged back, the learner restarted, the game killed)
            "episodes_resumed_after_s": {pc: _r(first_episode_after(pc, end)) for pc in pcs},
            "batches_accepted_again_after_s": {pc: _r(first_accept_after(pc, end)) for pc in pcs},
            "episodes_played_during": {
                pc: sum(1 for r in rows if r["worker"] == pc and f["t"] < float(r["time"]) <= end) for pc in pcs
            }
            if end > f["t"]
            else None,
        }
        if f["kind"] == "learner_kill":
            after = [r for r in metrics if r.get("time", 0) > end]
            entry["updates_before_kill"] = f.get("updates_before")
            entry["updates_first_row_after_resume"] = after[0].get("updates") if after else None
            grew = next((r for r in after if (r.get("updates") or 0) > (after[0].get("updates") or 0)), None)
            entry["updates_rising_again_after_s"] = _r(grew["time"] - end) if grew else None
        if "pid" in f:
            entry["pid"] = f["pid"]
        faults.append(entry)
    resumed = log_lines(logs / "learner.log", "resumed from")
    epochs = sorted({r.get("epoch") for r in metrics if r.get("epoch") is not None})
    launches = {}
    for pc in ("pc1", "pc2"):
        log = logs / f"worker-{pc}.log"
        relaunch_lines = log_lines(log, "relaunching the game")
        launches[pc] = {
            "launches": len(log_lines(log, "started the game (pid")),
            "relaunches": len(relaunch_lines),
            "relaunch_reasons": [line.split("relaunching the game", 1)[1].strip() for line in relaunch_lines],
        }
    last = metrics[-1] if metrics else {}
    proxy_log = logs / "proxy-pc1.log"
    out = {
        "wall_s": round(times["t_done"] - times["t_start"], 1),
        "startup_s": round(times["t_started"] - times["t_start"], 1),
        "faulty_run_s": round(bench.t_end - bench.t0, 1),
        "latency_ms_each_way_pc1": bench.args.latency_ms,
        "proxy_connections_pc1": log_lines(proxy_log, "connections so far")[-1:] if proxy_log.exists() else [],
        "env_steps": {**env_steps, "total": sum(env_steps.values())},
        "learner": {
            "updates": last.get("updates"),  # the resumed learner's last metrics
            "updates_per_epoch": {
                str(e): max((r.get("updates") or 0 for r in metrics if r.get("epoch") == e), default=0) for e in epochs
            },
            "samples_last_epoch": last.get("samples"),
            "epochs": epochs,
            "resumed": resumed,
        },
        "episodes": episodes_by_worker(bench.telemetry_dir),
        # capture to action over every worker's steps (the learner's newest combined report)
        "capture_to_action_ms": next((r["act_latency"] for r in reversed(metrics) if r.get("act_latency")), None),
        "greedy_evaluations": {pc: worker_evaluations(logs / f"worker-{pc}.log") for pc in ("pc1", "pc2")},
        "games": launches,
        "ledger": {k: joined[k] for k in ("batches_sent", "batches_acked", "outcome_batches", "outcome_transitions")},
        "refusal_events_by_reason": refusals(bench.ledgers),
        "unexplained_batches": joined["unexplained_batches"],
        "unexplained": joined["unexplained"],
        "accepted_then_lost_with_a_killed_learner": joined["accepted_then_lost_with_a_killed_learner"],
        "faults": faults,
        "target": bench.args.target,
        # the first greedy evaluation (a worker's, on its own game) that reached --target: env steps of its model
        "solved": bench.solved,
        "timeline": [(round(t - bench.t0, 1), what) for t, what in bench.events],
        "workdir": str(bench.work),
    }
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def print_report(r: dict) -> None:
    print("\n==== five hosts: report ====")
    print(
        f"wall {r['wall_s']:.0f} s (start-up {r['startup_s']:.0f} s, faulty run {r['faulty_run_s']:.0f} s); "
        f"pc1 through the proxy at {r['latency_ms_each_way_pc1']} ms each way for the whole run"
    )
    print(f"env steps: {r['env_steps']}")
    if r.get("target") is not None:
        s = r.get("solved")
        print(
            f"target {r['target']:g}: "
            + (
                f"reached by {s.get('evaluator')} (mean {s['mean']}, model {s.get('model_version')}, trained on "
                f"{s.get('env_steps')} env steps) {s['wall_s_since_both_played']} s after both PCs played"
                if s
                else "not reached"
            )
        )
    ln = r["learner"]
    print(
        f"learner: {ln['updates']} updates at the end (max per epoch {ln['updates_per_epoch']}), "
        f"resumed: {ln['resumed'] or 'NO resume line'}"
    )
    print(f"episodes per game PC: {r['episodes']}")
    cta = r.get("capture_to_action_ms")
    if cta:
        print(
            f"capture to action over {cta['steps']} steps: p50 {cta['p50_ms']} ms, p99 {cta['p99_ms']} ms (bucket "
            f"upper edges), mean {cta['mean_ms']} ms, max {cta['max_ms']} ms; p99 by game PC {cta['p99_ms_by_worker']}"
        )
    for pc, evals in r["greedy_evaluations"].items():
        means = [e["mean"] for e in evals]
        secs = [e["s"] for e in evals]
        print(
            f"greedy evaluations on {pc} (its own game, between training episodes): {len(evals)}, means {means}, "
            f"{sum(secs):.1f} s in all"
        )
    for pc, g in r["games"].items():
        print(f"game on {pc}: {g['launches']} launches, {g['relaunches']} relaunches")
        for why in g["relaunch_reasons"]:
            print(f"    {why}")
    lg = r["ledger"]
    print(f"batches sent {lg['batches_sent']}, acknowledged by the broker {lg['batches_acked']}")
    print(f"{'outcome':<60} {'batches':>8} {'transitions':>12}")
    for k in sorted(lg["outcome_batches"]):
        print(f"{k:<60} {lg['outcome_batches'][k]:>8} {lg['outcome_transitions'][k]:>12}")
    lost = r["accepted_then_lost_with_a_killed_learner"]
    print(
        f"accepted, then lost with the killed learner's memory: {lost.get('batches', 0)} batches, "
        f"{lost.get('transitions', 0)} transitions"
    )
    print(f"refusal events in the learners' ledgers (resends included): {r['refusal_events_by_reason']}")
    print(f"UNEXPLAINED batches: {r['unexplained_batches']}")
    print("faults (s after both PCs played; resumed: from the fault's end):")
    for f in r["faults"]:
        if f.get("kind") in ("failed", "exit"):
            print(f"  {f['at_s']:6.1f} {f['kind']}: {f}")
            continue
        extra = ""
        if f["kind"] == "learner_kill":
            extra = (
                f"; updates {f['updates_before_kill']} before the kill, {f['updates_first_row_after_resume']} "
                f"at the resumed learner's first metrics, rising again after {f['updates_rising_again_after_s']} s"
            )
        print(
            f"  {f['at_s']:6.1f} {f['kind']:<13} {f['target']:<8} lasted {f['lasted_s']:5.1f} s; episodes resumed "
            f"after {f['episodes_resumed_after_s']} s, batches accepted again after "
            f"{f['batches_accepted_again_after_s']} s{extra}"
        )


#: the screen extra's modules (and the game's): none may be importable on the learner host
SCREEN_MODULES = ("mss", "Xlib", "cv2", "pynput", "pygame")


def learner_venv(path: Path) -> str:
    """A learner host's venv at ``path`` as a GPU box has it: mqttrl with the learner extra only
    (torch pinned, as the README installs it), made if missing; checked to lack the screen extra.
    Returns the line the report prints."""
    python = path / "bin" / "python"
    if not python.exists():
        print(f"making the learner host's venv (mqttrl[learner], no screen extra) in {path}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "-e", f"{REPO}[learner]"], check=True)
    probe = f"import importlib.util as u; print(' '.join(m for m in {SCREEN_MODULES!r} if u.find_spec(m)))"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    if found:
        raise SystemExit(f"--learner-venv {path} has the screen extra's {', '.join(found)}: make it afresh")
    return f"learner host: its own venv {path} (mqttrl[learner]; none of {', '.join(SCREEN_MODULES)} importable)"


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=10.0, help="length of the faulty run (after both PCs played)")
    p.add_argument(
        "--target",
        type=float,
        help="train to this greedy mean instead (the workers' evaluations on their own games; the config's DQN, "
        "Catch with 3 lives as benchmarks/bench_screen.py): stops when reached, or after --minutes",
    )
    p.add_argument("--no-faults", action="store_true", help="no fault (with --target: the clean run)")
    p.add_argument("--eval-every", type=float, default=20.0, help="with --target: train.eval_every_s")
    p.add_argument("--eval-episodes", type=int, default=5, help="with --target: train.eval_episodes")
    p.add_argument("--latency-ms", type=float, default=150.0, help="pc1's latency through the proxy, each way")
    p.add_argument("--rate-bytes", type=int, default=200_000, help="pc1's eth0 cap during its window (bytes/s)")
    p.add_argument("--rate-s", type=float, help="how long pc1's cap lasts (default 0.15 of the run)")
    p.add_argument("--cable-s", type=float, default=60.0, help="how long pc2's cable is out")
    p.add_argument("--frozen-s", type=float, default=3.0, help="env.kwargs.frozen_s: a hung game is noticed after")
    p.add_argument("--checkpoint-every", type=int, default=200, help="learner.checkpoint_every (updates)")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds for both PCs to play")
    p.add_argument("--drain-s", type=float, default=10.0, help="seconds the learner drains after the workers stop")
    p.add_argument(
        "--learner-venv",
        type=Path,
        help="the learner runs from this venv (made if missing: mqttrl[learner] only, no screen extra) instead of "
        "this one with the screen extra's modules blocked",
    )
    p.add_argument("--workdir", help="logs, ledgers, telemetry (default: a new temp dir)")
    p.add_argument("--json", type=Path, help="write the report here too")
    p.add_argument("--report-only", type=Path, metavar="WORKDIR", help="print the report of an earlier run again")
    p.add_argument("--proxy", metavar="HOST:PORT", help=argparse.SUPPRESS)  # the proxy mode (pc1's namespace)
    p.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.proxy:
        return proxy_main(args.proxy, args.latency_ms / 1000, args.port_file)
    if args.report_only:
        return write_report(args, Bench(args, args.report_only), None)

    why_not = netns.available() if sys.platform == "linux" else "network namespaces are Linux's"
    if why_not:
        print(f"bench_hosts.py needs root for network namespaces (ip netns): {why_not}", file=sys.stderr)
        return 2
    for tool in ("mosquitto", "Xvfb", "tc"):
        if shutil.which(tool) is None:
            print(f"bench_hosts.py needs {tool} on PATH", file=sys.stderr)
            return 2
    if args.learner_venv:
        args.learner_venv = args.learner_venv.absolute()  # the hosts run from other working directories
        print(learner_venv(args.learner_venv), flush=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mqttrl-hosts-"))
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, work)
    t_start = time.time()
    plan = (
        f"to greedy mean {args.target:g}, at most {args.minutes:g} min"
        if args.target is not None
        else f"{args.minutes:g} min"
    )
    faults = "without faults" if args.no_faults else "with faults"
    print(f"five-host run in {work}: {plan} {faults} after start-up", flush=True)
    lan = netns.Lan()
    try:
        bench.start(lan)
        bench.wait_until_both_played(args.startup_timeout)
        t_started = time.time()
        print(f"both game PCs played and the learner trains after {t_started - t_start:.0f} s", flush=True)
        bench.run_faults(args.minutes * 60)
        bench.wind_down()
    finally:
        try:
            if getattr(bench, "pc1", None) is not None:
                bench.pc1.rate(None)
        except Exception:
            pass
        lan.close()
        leftover_games(bench.logs)
    times = {"t_start": t_start, "t_started": t_started, "t_done": time.time()}
    return write_report(args, bench, times)


def write_report(args, bench: Bench, times: dict | None) -> int:
    """Save the run's schedule (``faults.json``: what ``--report-only`` reads), then report."""
    raw_path = bench.work / "faults.json"
    if times is None:  # --report-only: the schedule and times as the run saved them
        raw = json.loads(raw_path.read_text())
        bench.t0, bench.t_end, bench.faults = raw["t0"], raw["t_end"], raw["faults"]
        bench.solved = raw.get("solved")
        bench.events = [tuple(e) for e in raw["events"]]
        times = raw.get("times") or {"t_start": raw["t0"], "t_started": raw["t0"], "t_done": raw["t_end"]}
    else:
        raw = {
            "t0": bench.t0,
            "t_end": bench.t_end,
            "times": times,
            "faults": bench.faults,
            "events": bench.events,
            "solved": bench.solved,
        }
        raw_path.write_text(json.dumps(raw, indent=1))
    r = report(bench, times)
    (bench.work / "bench_hosts.json").write_text(json.dumps(r, indent=1))
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    print_report(r)
    print(f"\nlogs, ledgers and the report: {bench.work}")
    return 1 if r["unexplained_batches"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
