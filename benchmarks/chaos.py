"""Chaos benchmark: train under random faults, then account for every sample batch.

A real mosquitto (persistence on), a learner, 4 workers and telemetry run for
``--minutes``; faults are injected at random times (exponential gaps of mean
``--mean-gap`` seconds), drawn from:

* ``worker_kill``   SIGKILL a worker, start it again under the same name 1 s later
* ``learner_kill``  SIGKILL the learner, start it again with ``--resume`` 2 s later
* ``broker_restart`` stop mosquitto cleanly (it saves its state), start it again
* ``broker_wipe``   SIGKILL mosquitto and delete its state (persistence lost), start it again
* ``worker_stop``   SIGSTOP a worker past the liveness timeout, then SIGCONT
* envs that raise: every env step raises with probability ``--p-raise`` (a crashing game)

Every node writes an audit ledger (``MQTTRL_LEDGER_DIR``, see ``mqttrl/observe/ledger.py``).
At the end the workers' ledgers (sent, acknowledged by the broker, dropped) are
joined with the learners' (accepted, refused by reason): every batch sent is
accepted, refused with a reason, or lost with a named cause; anything else is
printed as UNEXPLAINED and makes the exit status 1. The script also checks that
model versions only rise within each learner epoch, prints the time to recover
per fault kind, and evaluates the newest weights greedily to see whether the
run reached its target.

    .venv/bin/python -m benchmarks.chaos --config configs/cartpole_dqn.toml --minutes 10
    .venv/bin/python -m benchmarks.chaos --config configs/cartpole_ppo.toml --minutes 10

The same harness without faults (``--no-faults``: no fault injected, no env raises) is the
baseline; given its report (``--baseline its/chaos.json``), the faulty run's post-solve greedy
median (the median greedy return of the evaluations from the first one that reached the
target on) must be within ``--tolerance`` (10 %) of the baseline's, or the exit status is 1:

    .venv/bin/python -m benchmarks.chaos --minutes 10 --no-faults --workdir /tmp/chaos-base
    .venv/bin/python -m benchmarks.chaos --minutes 10 --baseline /tmp/chaos-base/chaos.json

At a constant lr CartPole's DQN swings between 500 and ~100 for as long as it trains, with faults
or without, so one run's post-solve median is a coin toss (487.2 against 228.5 in one pair, 500
against 123.7 in another); with the lr decaying over the first 300k transitions
(``--set algorithm.lr_anneal_env_steps=300000 --set algorithm.lr_final_frac=0.02`` on both runs)
the policy settles and the comparison says something about the faults (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from benchmarks.harness.machine import REPO
from benchmarks.harness.procs import Broker, Proc, repo_env
from mqttrl.broker.embedded import free_port
from mqttrl.config import load_config
from mqttrl.observe.ledger import read as read_ledger
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.topics import Topics
from mqttrl.wire import Rejected, decode_weights

FAULTS = ("worker_kill", "learner_kill", "broker_restart", "broker_wipe", "worker_stop")


class WeightsWatch:
    """Subscribes to the run's weights: the versions seen per epoch, and the newest payload."""

    def __init__(self, url_port: int, run: str):
        self.topic = Topics(run).weights
        self.seen: list[tuple[float, int, int]] = []  # (time, epoch, version)
        self.newest: bytes | None = None
        self._lock = threading.Lock()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"chaos-watch-{os.getpid()}")
        self.c.on_connect = lambda c, *_: c.subscribe(self.topic, 1)
        self.c.on_message = self._on_message
        self.c.reconnect_delay_set(0.25, 2)
        self.c.connect_async("127.0.0.1", url_port)
        self.c.loop_start()

    def _on_message(self, client, userdata, msg):
        try:
            w = decode_weights(msg.payload)
        except Rejected:
            return
        with self._lock:
            self.seen.append((time.time(), w.epoch, w.version))
            if self.newest is None or (w.epoch, w.version) >= self._order:
                self.newest, self._order = msg.payload, (w.epoch, w.version)

    _order = (-1, -1)

    def take_newest(self) -> tuple[bytes | None, tuple[int, int]]:
        """The newest weights seen and their (epoch, version)."""
        with self._lock:
            return self.newest, self._order

    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def greedy_return(config, payload: bytes, episodes: int = 10) -> float:
    from mqttrl.envs.greedy import greedy_actor
    from mqttrl.envs.rollout import evaluate

    w = decode_weights(payload)
    actor, make = greedy_actor(config, episodes)
    actor.load_weights(w.tensors, w.info)
    return statistics.mean(evaluate(actor, make, episodes, seed=12345))


# ---- the run ----------------------------------------------------------------------------------
def run(args) -> int:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mqttrl-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    ledgers, logs = work / "ledgers", work / "logs"
    ledgers.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    registry = get_registry()
    config = load_config(args.config, args.set, lambda n: registry.algorithm(n).params)
    run_name = config.run
    broker = Broker(work / "broker", free_port())
    broker.start()
    env = repo_env(MQTTRL_LEDGER_DIR=str(ledgers))
    py = [sys.executable, "-m", "mqttrl"]
    conn = ["--broker", broker.url]
    sets = [
        "env.id=benchmarks.chaos_env:ChaosCartPole-v1",
        # the fleet is the harness's workers: each worker's share of the epsilon ladder is its place
        # among them (with the config's 2, w0 held every rung above 0.03 and w1..w3 barely explored)
        f"train.workers={args.workers}",
        f"env.kwargs={{p_raise = {args.p_raise}}}",
        "learner.checkpoint_every=500",
        *args.set,
    ]
    set_args = [a for s in sets for a in ("--set", s)]
    learner = Proc(
        "learner",
        py + ["learner", "--config", str(args.config), "--run-dir", str(work / "run"), *set_args] + conn,
        logs / "learner.log",
        env,
    )
    resume_argv = learner.argv[:2] + learner.argv[2:] + ["--resume-if-any"]
    workers = [
        Proc(
            f"w{i}",
            py + ["worker", "--run", run_name, "--name", f"w{i}", "--index", str(i)] + conn,
            logs / f"w{i}.log",
            env,
        )
        for i in range(args.workers)
    ]
    telemetry = Proc(
        "telemetry",
        py
        + ["telemetry", "--run", run_name, "--storage", "files", "--storage-opt", f"files.dir={work / 'telemetry'}"]
        + conn,
        logs / "telemetry.log",
        env,
    )
    learner.start()
    time.sleep(3)
    for p in (*workers, telemetry):
        p.start()
    watch = WeightsWatch(broker.port, run_name)
    rng = random.Random(args.seed)
    faults: list[dict] = []
    evals: list[tuple[float, float]] = []
    evaluated: list[tuple[int, int]] = []  # (epoch, version) of each evaluation's model
    t0 = time.time()
    end = t0 + args.minutes * 60
    next_fault = t0 + args.warmup + rng.expovariate(1 / args.mean_gap)
    next_eval = t0 + 20
    worker_timeout = config.learner.worker_timeout_s
    print(f"chaos run in {work}: {args.minutes} min, {args.workers} workers, broker {broker.url}", flush=True)
    try:
        while time.time() < end:
            now = time.time()
            for p in workers:  # a worker that exited on its own (e.g. an env that kept failing) is restarted
                if not p.alive() and not p.stopped:
                    faults.append({"kind": "worker_exit", "t": now, "target": p.name})
                    p.start()
            if not learner.alive():
                faults.append({"kind": "learner_exit", "t": now, "target": "learner"})
                learner.argv = resume_argv
                learner.start()
            if now >= next_eval and watch.newest is not None:
                next_eval = now + 20
                payload, order = watch.take_newest()
                evals.append((now - t0, greedy_return(config, payload)))
                evaluated.append(order)
                print(f"  {now - t0:5.0f}s greedy return {evals[-1][1]:.1f} (model {evaluated[-1]})", flush=True)
            if now >= next_fault and args.faults:
                kind = rng.choice(args.faults)
                f = {"kind": kind, "t": now}
                if kind == "worker_kill":
                    p = rng.choice(workers)
                    f["target"] = p.name
                    p.kill()
                    time.sleep(1)
                    p.start()
                elif kind == "learner_kill":
                    f["target"] = "learner"
                    learner.kill()
                    time.sleep(2)
                    learner.argv = resume_argv
                    learner.start()
                elif kind in ("broker_restart", "broker_wipe"):
                    broker.stop(wipe=kind == "broker_wipe")
                    time.sleep(1)
                    broker.start()
                elif kind == "worker_stop":
                    p = rng.choice(workers)
                    f["target"] = p.name
                    p.stop()
                    time.sleep(worker_timeout + 3)
                    p.cont()
                    f["t_resume"] = time.time()
                f["t_done"] = time.time()
                faults.append(f)
                print(f"  {now - t0:5.0f}s fault {kind} {f.get('target', '')}", flush=True)
                next_fault = time.time() + rng.expovariate(1 / args.mean_gap)
            time.sleep(0.2)
        # wind down: everything running, then workers stop (they flush), then the learner drains
        for p in workers:
            if p.stopped:
                p.cont()
        time.sleep(3)
        for p in workers:
            p.term()
        time.sleep(args.drain_s)
        if watch.newest is not None:
            payload, order = watch.take_newest()
            evals.append((time.time() - t0, greedy_return(config, payload, episodes=20)))
            evaluated.append(order)
    finally:
        for p in (*workers, telemetry, learner):
            p.term()
        watch.close()
        broker.p.terminate()
        broker.p.wait(15)
    (work / "faults.json").write_text(json.dumps(faults, indent=1))
    report = reconcile(ledgers, faults, watch, evals, config, t0)
    report["idle"] = idle_seconds(logs)
    report["evaluated_models"] = evaluated
    if args.baseline:
        report["baseline"] = compare(report, json.loads(Path(args.baseline).read_text()), args.tolerance)
    (work / "chaos.json").write_text(json.dumps(report, indent=1))
    print_report(report)
    print(f"\nfull report: {work / 'chaos.json'}")
    ok = report["unexplained_batches"] == 0 and report["versions_monotonic"]
    return 0 if ok and report.get("baseline", {}).get("within", True) else 1


def post_solve_median(evals: list, target: float) -> float | None:
    """The median greedy return of the evaluations from the first that reached ``target`` on
    (None: never reached): how well the run holds a solved policy, not how fast it got there."""
    first = next((i for i, (_t, r) in enumerate(evals) if r >= target), None)
    return None if first is None else statistics.median(r for _t, r in evals[first:])


def compare(report: dict, baseline: dict, tolerance: float) -> dict:
    """This run's post-solve median against the no-fault baseline's (within ``tolerance``, a fraction)."""
    ours, base = report.get("post_solve_median"), baseline.get("post_solve_median")
    ratio = ours / base if ours is not None and base else None
    return {
        "post_solve_median": base,
        "ratio": ratio,
        "tolerance": tolerance,
        "within": ratio is not None and ratio >= 1 - tolerance,
    }


def idle_seconds(logs: Path) -> dict:
    """How often and why the workers idled (their log lines; WorkerCore.should_idle)."""
    reasons = collections.Counter()
    for path in logs.glob("w*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if " idles: " in line:
                reasons[line.split(" idles: ", 1)[1].strip()] += 1
    return dict(reasons)


# ---- accounting -------------------------------------------------------------------------------
def reconcile(ledgers: Path, faults: list[dict], watch: WeightsWatch, evals, config, t0: float) -> dict:
    sent: dict[tuple, dict] = {}
    for path in ledgers.glob("worker-*.jsonl"):
        _, name, inc = path.stem.rsplit("-", 2) if path.stem.count("-") >= 2 else (None, None, None)
        for e in read_ledger(path):
            if "seq" not in e:
                continue  # not a batch's line (a model loaded)
            key = (name, inc, e["seq"])
            rec = sent.setdefault(key, {"n": 0})
            if e["ev"] == "sent":
                rec.update(n=e["n"], t_sent=e["t"])
            elif e["ev"] == "acked":
                rec["t_acked"] = e["t"]
            elif e["ev"] == "dropped":
                rec["dropped"] = e.get("cause", "dropped")
    judged: dict[tuple, list] = collections.defaultdict(list)
    accepted_times: list[tuple[float, str, str]] = []  # (t, worker, incarnation)
    learners = []
    for path in sorted(ledgers.glob("learner-*.jsonl")):
        events = read_ledger(path)
        learners.append({"epoch": path.stem.split("-", 1)[1], "events": events})
        for e in events:
            if e["ev"] in ("accepted", "refused") and "seq" in e:
                judged[(e["worker"], e["inc"], e["seq"])].append((e["ev"], e.get("reason"), e["t"]))
            if e["ev"] == "accepted":
                accepted_times.append((e["t"], e["worker"], e["inc"]))
    accepted_times.sort()
    kills = {(f["target"], f["t"]) for f in faults if f["kind"] in ("worker_kill", "worker_exit")}
    wipes = [f["t"] for f in faults if f["kind"] == "broker_wipe"]

    outcome = collections.Counter()
    transitions = collections.Counter()
    lost_causes = collections.Counter()
    unexplained = []
    for key, rec in sent.items():
        if "t_sent" not in rec:
            continue  # an ack line whose "sent" line was cut by a kill
        verdicts = judged.get(key, [])
        n = rec["n"]
        if any(v[0] == "accepted" for v in verdicts):
            outcome["accepted"] += 1
            transitions["accepted"] += n
            continue
        if verdicts:
            reason = verdicts[-1][1]
            outcome[f"refused: {reason}"] += 1
            transitions[f"refused: {reason}"] += n
            continue
        worker, _inc, _seq = key
        t_sent = rec["t_sent"]
        if "dropped" in rec:
            cause = f"worker outbox {rec['dropped']}"
        elif "t_acked" not in rec and any(w == worker and t >= t_sent for w, t in kills):
            cause = "worker killed before the broker acknowledged it"
        elif any(t >= t_sent for t in wipes):
            cause = "broker restarted without its state (persistence lost)"
        else:
            cause = None
        if cause is None:
            unexplained.append({"key": key, **rec})
            outcome["UNEXPLAINED"] += 1
            transitions["UNEXPLAINED"] += n
        else:
            lost_causes[cause] += 1
            outcome[f"lost: {cause}"] += 1
            transitions[f"lost: {cause}"] += n

    # what a killed learner accepted after its last checkpoint went down with it (its replay memory)
    replay_lost = collections.Counter()
    for learner in learners[:-1]:  # every learner but the last was killed
        ckpts = [e["t"] for e in learner["events"] if e["ev"] == "checkpoint"]
        since = ckpts[-1] if ckpts else 0.0
        for e in learner["events"]:
            if e["ev"] == "accepted" and e["t"] > since:
                replay_lost["batches"] += 1
                replay_lost["transitions"] += e.get("n", 0)

    # model versions within each epoch only rise
    by_epoch = collections.defaultdict(list)
    for _t, epoch, version in watch.seen:
        by_epoch[epoch].append(version)
    monotonic = all(all(a <= b for a, b in itertools.pairwise(v)) for v in by_epoch.values())

    # recovery: fault -> the first batch the learner accepted that shows the system working again
    def first_accept_after(t: float, worker: str | None = None) -> float | None:
        for ta, w, _inc in accepted_times:
            if ta > t and (worker is None or w == worker):
                return ta - t
        return None

    recovery = collections.defaultdict(list)
    for f in faults:
        kind = f["kind"]
        if kind in ("worker_kill", "worker_exit"):
            r = first_accept_after(f["t"], f["target"])
        elif kind == "worker_stop":
            r = first_accept_after(f["t_resume"], f["target"])
        else:  # learner or broker: any worker's batch accepted again
            r = first_accept_after(f.get("t_done", f["t"]))
        recovery[kind].append(r)
    target = config.train.target_return
    return {
        "faults": collections.Counter(f["kind"] for f in faults),
        "batches_sent": sum(1 for r in sent.values() if "t_sent" in r),
        "batches_acked": sum(1 for r in sent.values() if "t_acked" in r),
        "outcome_batches": dict(outcome),
        "outcome_transitions": dict(transitions),
        "unexplained_batches": outcome["UNEXPLAINED"],
        "unexplained": unexplained[:20],
        "learner_epochs": len(learners),
        "accepted_then_lost_with_a_killed_learner": dict(replay_lost),
        "versions_monotonic": monotonic,
        "versions_per_epoch": {str(k): [min(v), max(v)] for k, v in by_epoch.items()},
        "recovery_s": {
            k: {
                "n": len(v),
                "recovered": sum(x is not None for x in v),
                "median": statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None,
                "max": max([x for x in v if x is not None], default=None),
            }
            for k, v in recovery.items()
        },
        "evals": evals,
        "target": target,
        "target_reached": any(r >= target for _, r in evals),
        "first_target_s": next((t for t, r in evals if r >= target), None),
        "post_solve_median": post_solve_median(evals, target),
    }


def print_report(r: dict) -> None:
    print("\n==== chaos report ====")
    print("faults:", dict(r["faults"]))
    print(f"batches sent {r['batches_sent']}, acknowledged by the broker {r['batches_acked']}")
    print(f"{'outcome':<60} {'batches':>8} {'transitions':>12}")
    for k in sorted(r["outcome_batches"]):
        print(f"{k:<60} {r['outcome_batches'][k]:>8} {r['outcome_transitions'][k]:>12}")
    print(f"unexplained batches: {r['unexplained_batches']}")
    lost = r["accepted_then_lost_with_a_killed_learner"]
    print(
        f"accepted, then lost with a killed learner's memory (after its last checkpoint): "
        f"{lost.get('batches', 0)} batches, {lost.get('transitions', 0)} transitions"
    )
    print(f"learner epochs: {r['learner_epochs']}; versions monotonic within each: {r['versions_monotonic']}")
    print(f"{'fault':<16} {'n':>3} {'recovered':>9} {'median s':>9} {'max s':>7}")
    for k, v in sorted(r["recovery_s"].items()):
        med = "-" if v["median"] is None else f"{v['median']:.1f}"
        mx = "-" if v["max"] is None else f"{v['max']:.1f}"
        print(f"{k:<16} {v['n']:>3} {v['recovered']:>9} {med:>9} {mx:>7}")
    first = r["first_target_s"]
    reached = f"reached at {first:.0f} s" if first is not None else "NOT reached"
    print(f"target {r['target']}: {reached}; greedy returns: {[round(x, 1) for _, x in r['evals']]}")
    print(f"post-solve greedy median: {r['post_solve_median']}; workers idled: {r.get('idle', {})}")
    b = r.get("baseline")
    if b is not None:
        ratio = "-" if b["ratio"] is None else f"{b['ratio']:.3f}"
        print(
            f"no-fault baseline's post-solve median {b['post_solve_median']}: ratio {ratio} "
            f"({'within' if b['within'] else 'NOT within'} {b['tolerance']:.0%})"
        )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--config", type=Path, default=REPO / "configs" / "cartpole_dqn.toml", help="run config")
    p.add_argument("--minutes", type=float, default=5.0, help="length of the faulty run")
    p.add_argument("--workers", type=int, default=4, help="worker processes")
    p.add_argument("--mean-gap", type=float, default=25.0, help="mean seconds between faults")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds before the first fault")
    p.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS), help="fault kinds to draw from")
    p.add_argument("--p-raise", type=float, default=2e-5, help="probability that an env step raises")
    p.add_argument("--drain-s", type=float, default=8.0, help="seconds the learner gets to drain at the end")
    p.add_argument("--seed", type=int, default=1, help="seed of the fault schedule")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config override")
    p.add_argument("--workdir", help="where logs, ledgers and the report go (default: a new temp dir)")
    p.add_argument("--no-faults", action="store_true", help="the baseline: inject no fault, no env raises")
    p.add_argument("--baseline", type=Path, help="a --no-faults run's chaos.json to compare the post-solve median with")
    p.add_argument("--tolerance", type=float, default=0.10, help="how far below the baseline's median may be")
    args = p.parse_args()
    if args.no_faults:
        args.faults, args.p_raise = [], 0.0
    if shutil.which("mosquitto") is None:
        print("chaos.py needs mosquitto on PATH (Debian: apt-get install mosquitto)", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
