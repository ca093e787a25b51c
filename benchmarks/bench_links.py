"""Slow and broken links (issue 22): one worker behind each network fault, one on a clean link,
in one run against a real mosquitto, with a DQN CartPole learner.

Each faulted worker reaches the broker through its own fault-injecting TCP proxy
(``benchmarks/harness/link.py``, the tests' too):

* ``clean``     no proxy fault (the control)
* ``latency``   150 ms ± 50 ms each way
* ``cap``       200 kB/s each direction
* ``silent20``  a silent (half-open) cut of 20 s: nothing passes, no connection closes
* ``silent90``  the same for 90 s
* ``rst``       every connection reset (RST) once; reconnects are accepted
* ``flap``      2 s up, 2 s silent, for 60 s
* ``corrupt``   one PUBACK whose remaining length is rewritten to declare 2,000,000 bytes

Every node writes an audit ledger (``MQTTRL_LEDGER_DIR``, ``mqttrl/observe/ledger.py``). At the end the
ledgers are joined per worker: batches sent, acknowledged by the broker, accepted, refused by
reason, dropped by cause, and unexplained (sent, never judged, no recorded cause). Recovery is
the time from a fault's end (for RST and corruption: the moment it happened) to the first batch
made after it that the learner accepted and the worker saw acknowledged (a corrupted PUBACK
leaves the uplink working: only the acknowledgements show that the link was recycled).
Memory: VmRSS of mosquitto and every worker from /proc (start, peak, end).

    .venv/bin/python -m benchmarks.bench_links --quick          # ~3 min: the faults once
    .venv/bin/python -m benchmarks.bench_links --seconds 600
    .venv/bin/python -m benchmarks.bench_links --weights-probe  # broker memory vs weights QoS/expiry/rate

``--weights-probe`` measures what docs/architecture.md ("Weights on a slow link") rests on: one
subscriber behind a 200 kB/s link, 68 kB retained weights published at 7/s or 1/s, at QoS 0, QoS 1,
QoS 1 with a 2 s MQTT 5 message expiry: mosquitto's memory and how many arrived.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from benchmarks.harness.link import PUBACK, Link, declare_length
from benchmarks.harness.machine import REPO
from benchmarks.harness.procs import Broker
from mqttrl.broker.embedded import free_port
from mqttrl.observe.ledger import read as read_ledger

BIN = Path(sys.executable).parent
WORKERS = ("clean", "latency", "cap", "silent20", "silent90", "rst", "flap", "corrupt")
#: when each fault starts (s after the first accepted batch) and how long it lasts
SCHEDULE = {"silent20": (20, 20), "silent90": (20, 90), "rst": (30, 0), "flap": (20, 60), "corrupt": (30, 0)}
RATE = 200_000  # bytes/s


def rss_mb(pid: int | None) -> float | None:
    """VmRSS of a live process in MB, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, TypeError):
        return None
    return None


def send_queue_kb(port: int) -> float:
    """Bytes the broker wrote to its clients' sockets that the kernel still holds (Send-Q of its
    connections on ``port``), in kB: a queue that RSS does not show."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True
    ).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.strip()) / 1000


def start_broker(workdir: Path) -> Broker:
    """A mosquitto on a free port, its files under ``workdir/broker``."""
    broker = Broker(workdir / "broker", free_port())
    broker.start()
    return broker


class Memory:
    """Samples VmRSS of named processes every ``every`` seconds."""

    def __init__(self, pids: dict[str, int], every: float = 2.0, broker_port: int | None = None):
        self.pids, self.every, self.broker_port = pids, every, broker_port
        self.samples: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for name, pid in list(self.pids.items()):
                mb = rss_mb(pid)
                if mb is not None:
                    self.samples[name].append((time.time(), mb))
            if self.broker_port is not None:
                self.samples["broker_send_queue"].append((time.time(), send_queue_kb(self.broker_port) / 1000))

    def summary(self, since: float) -> dict[str, dict]:
        self._stop.set()
        out = {}
        for name, s in self.samples.items():
            after = [mb for t, mb in s if t >= since] or [mb for _, mb in s]
            out[name] = {"start": round(after[0], 1), "peak": round(max(after), 1), "end": round(after[-1], 1)}
        return out


def start_procs(args, work: Path, broker: Broker, links: dict[str, Link]) -> tuple[subprocess.Popen, dict]:
    """The learner and one worker per entry of WORKERS (each through its link, if any)."""
    env = {**os.environ, "MQTTRL_LEDGER_DIR": str(work / "ledgers"), "PYTHONUNBUFFERED": "1"}
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    run = f"links-{os.getpid()}"
    sets = [f"run={run}", f"train.workers={len(WORKERS)}", *args.set]
    learner_argv = [str(BIN / "mqttrl-learner"), "--config", str(args.config), "--broker", broker.url]
    learner_argv += ["--run-dir", str(work / "run")] + [a for s in sets for a in ("--set", s)]
    learner = subprocess.Popen(learner_argv, stdout=open(logs / "learner.log", "ab"), stderr=subprocess.STDOUT, env=env)
    workers = {}
    for i, name in enumerate(WORKERS):
        port = links[name].port if name in links else broker.port
        argv = [str(BIN / "mqttrl-worker"), "--broker", f"mqtt://127.0.0.1:{port}", "--run", run]
        argv += ["--name", name, "--index", str(i), "--num-envs", str(args.num_envs)]
        out = open(logs / f"worker-{name}.log", "ab")
        workers[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    return learner, workers


def make_links(broker: Broker) -> dict[str, Link]:
    """Each faulted worker's proxy; latency and the cap hold for the whole run."""
    links = {name: Link(broker.port, seed=i) for i, name in enumerate(WORKERS) if name != "clean"}
    links["latency"].shape(latency_s=0.15, jitter_s=0.05)
    links["cap"].shape(rate=RATE)
    return links


def first_accepted(ledgers: Path, timeout: float) -> float:
    """Wall time of the learner's first accepted batch (the run is under way)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in ledgers.glob("learner-*.jsonl"):
            for e in read_ledger(path):
                if e["ev"] == "accepted":
                    return e["t"]
        time.sleep(0.5)
    raise SystemExit(f"no batch accepted in {timeout:.0f}s: see the logs")


def inject(links: dict[str, Link], t0: float, end: float, scale: float = 1.0) -> dict[str, dict]:
    """Run the SCHEDULE (its times times ``scale``) from ``t0``, blocking until ``end``; returns
    each fault's start and end."""
    events = sorted(
        [(t0 + start * scale, name, "start") for name, (start, _) in SCHEDULE.items()]
        + [(t0 + (start + length) * scale, name, "end") for name, (start, length) in SCHEDULE.items() if length]
    )
    faults: dict[str, dict] = {}
    for at, name, what in events:
        time.sleep(max(0.0, at - time.time()))
        link = links[name]
        now = time.time()
        if what == "start":
            faults[name] = {"start": now, "end": now}
            if name.startswith("silent"):
                link.silence()
            elif name == "flap":
                link.flap(2.0, 2.0)
            elif name == "rst":
                link.reset()
            elif name == "corrupt":
                link.corrupt(PUBACK, declare_length(2_000_000))
        else:
            link.heal()
            faults[name]["end"] = now
        print(f"  t={now - t0:6.1f}s {name} {what}", flush=True)
    time.sleep(max(0.0, end - time.time()))
    return faults


def stop_all(learner: subprocess.Popen, workers: dict, ledgers: Path) -> None:
    """Workers stop first (SIGTERM: they flush and record what never got acknowledged); the learner
    once its ledger has been quiet for 5 s (what was in flight is judged)."""
    for p in workers.values():
        p.send_signal(signal.SIGTERM)
    for p in workers.values():
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
    quiet_since, size = time.time(), -1
    while time.time() - quiet_since < 5 and learner.poll() is None:
        now_size = sum(p.stat().st_size for p in ledgers.glob("learner-*.jsonl"))
        if now_size != size:
            size, quiet_since = now_size, time.time()
        time.sleep(0.5)
    learner.send_signal(signal.SIGTERM)
    try:
        learner.wait(60)
    except subprocess.TimeoutExpired:
        learner.kill()


def read_ledgers(ledgers: Path) -> tuple[dict, dict]:
    """(sent: worker -> seq -> record, judged: (worker, seq) -> [(verdict, reason, t)])."""
    sent: dict[str, dict[int, dict]] = collections.defaultdict(dict)
    for path in ledgers.glob("worker-*.jsonl"):
        name = path.stem.split("-")[1]
        for e in read_ledger(path):
            rec = sent[name].setdefault(e["seq"], {}) if "seq" in e else None
            if rec is None:
                continue
            if e["ev"] == "sent":
                rec["t_sent"] = e["t"]
            elif e["ev"] == "acked":
                rec["t_acked"] = e["t"]
            elif e["ev"] == "dropped":
                rec["dropped"] = e.get("cause", "dropped")
    judged: dict[tuple, list] = collections.defaultdict(list)
    for path in ledgers.glob("learner-*.jsonl"):
        for e in read_ledger(path):
            if e["ev"] in ("accepted", "refused") and "seq" in e:
                judged[(e["worker"], e["seq"])].append((e["ev"], e.get("reason"), e["t"]))
    return sent, judged


def reconcile(ledgers: Path, faults: dict[str, dict]) -> dict[str, dict]:
    """Per worker: sent, acknowledged, accepted, refused by reason, dropped by cause, unexplained,
    the accepted share, and the recovery after its fault."""
    sent, judged = read_ledgers(ledgers)
    report = {}
    for name in WORKERS:
        records = {s: r for s, r in sent[name].items() if "t_sent" in r}
        row = {"sent": len(records), "acked": sum("t_acked" in r for r in records.values()), "accepted": 0}
        refused, dropped, unexplained = collections.Counter(), collections.Counter(), 0
        accepted_new = []
        end = faults.get(name, {}).get("end")
        for seq, r in records.items():
            verdicts = judged.get((name, seq), [])
            if any(v[0] == "accepted" for v in verdicts):
                row["accepted"] += 1
                t_acc = min(v[2] for v in verdicts if v[0] == "accepted")
                if end is not None and r["t_sent"] > end and "t_acked" in r:
                    accepted_new.append(max(t_acc, r["t_acked"]))  # judged by the learner and acknowledged
            elif verdicts:
                refused[verdicts[-1][1]] += 1
            elif "dropped" in r:
                dropped[r["dropped"]] += 1
            else:
                unexplained += 1
        row.update(refused=dict(refused), dropped=dict(dropped), unexplained=unexplained)
        row["accepted_pct"] = round(100 * row["accepted"] / row["sent"], 1) if row["sent"] else None
        if end is not None:
            row["recovery_s"] = round(min(accepted_new) - end, 2) if accepted_new else None
        report[name] = row
    return report


def bench(args) -> int:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mqttrl-links-"))
    broker = start_broker(work)
    links = make_links(broker)
    learner, workers = start_procs(args, work, broker, links)
    pids = {"broker": broker.p.pid, "learner": learner.pid} | {n: p.pid for n, p in workers.items()}
    memory = Memory(pids, broker_port=broker.port)
    ledgers = work / "ledgers"
    print(f"work dir {work}; waiting for the first accepted batch", flush=True)
    try:
        t0 = first_accepted(ledgers, 120)
        faults = inject(links, t0, t0 + args.seconds, args.scale)
    finally:
        stop_all(learner, workers, ledgers)
        mem = memory.summary(since=t0 if "t0" in locals() else 0.0)
        for link in links.values():
            link.close()
        broker.stop()
    report = {"seconds": args.seconds, "workers": reconcile(ledgers, faults), "memory_mb": mem}
    (work / "report.json").write_text(json.dumps(report, indent=1))
    print_report(report)
    print(f"report: {work / 'report.json'}")
    return 1 if any(r["unexplained"] for r in report["workers"].values()) else 0


def print_report(report: dict) -> None:
    mem = report["memory_mb"]
    head = f"{'worker':<9} {'sent':>5} {'acked':>5} {'accepted':>8} {'%':>6} {'recovery s':>10} {'RSS MB':>13}"
    print("\n" + head + "  refused / dropped / unexplained")
    for name, r in report["workers"].items():
        m = mem.get(name, {})
        rss = f"{m.get('start', '?')}->{m.get('end', '?')}"
        rec = r.get("recovery_s", "")
        print(
            f"{name:<9} {r['sent']:>5} {r['acked']:>5} {r['accepted']:>8} {r['accepted_pct'] or 0:>6} {rec!s:>10} "
            f"{rss:>13}  {r['refused'] or '-'} / {r['dropped'] or '-'} / {r['unexplained']}"
        )
    b, q = mem.get("broker", {}), mem.get("broker_send_queue", {})
    print(f"broker RSS MB: start {b.get('start')}, peak {b.get('peak')}, end {b.get('end')}")
    print(f"broker socket send queues MB: start {q.get('start')}, peak {q.get('peak')}, end {q.get('end')}")


# ---- the weights probe: what mosquitto does with weights a slow subscriber cannot take --------
def probe_one(work: Path, qos: int, per_s: float, expiry: int | None, seconds: float) -> dict:
    broker = start_broker(work / f"probe-{qos}-{per_s}-{expiry}")
    link = Link(broker.port, rate=RATE)
    got: list[float] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    sub.on_message = lambda _c, _u, m: got.append(float(m.payload[:20]))
    sub.connect("127.0.0.1", link.port)
    sub.subscribe("weights", 1)
    sub.loop_start()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    pub.connect("127.0.0.1", broker.port)
    pub.loop_start()
    props = None
    if expiry:
        props = Properties(PacketTypes.PUBLISH)
        props.MessageExpiryInterval = expiry
    time.sleep(0.5)
    start_mb, t0, n = rss_mb(broker.p.pid), time.time(), 0
    while time.time() - t0 < seconds:
        payload = f"{time.time():<20.6f}".encode().ljust(68_000, b"w")
        pub.publish("weights", payload, qos=qos, retain=True, properties=props)
        n += 1
        time.sleep(1 / per_s)
    end_mb, queued_kb = rss_mb(broker.p.pid), send_queue_kb(broker.port)
    lag = time.time() - got[-1] if got else None
    for c in (sub, pub):
        c.loop_stop()
    link.close()
    broker.stop()
    return {
        "qos": qos,
        "per_s": per_s,
        "expiry_s": expiry,
        "published": n,
        "received": len(got),
        "newest_received_age_s": round(lag, 1) if lag is not None else None,
        "broker_rss_mb": [round(start_mb, 1), round(end_mb, 1)],
        "broker_send_queue_kb": round(queued_kb),
    }


def weights_probe(args) -> int:
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mqttrl-weights-probe-"))
    rows = [
        probe_one(work, q, r, e, args.probe_seconds)
        for q, r, e in ((1, 7, None), (0, 7, None), (1, 7, 2), (1, 1, None), (0, 1, None))
    ]
    print(
        f"{'QoS':>3} {'per s':>5} {'expiry':>6} {'published':>9} {'received':>8} {'newest age s':>12} {'broker RSS MB':>14}"
    )
    for r in rows:
        rss = f"{r['broker_rss_mb'][0]}->{r['broker_rss_mb'][1]}"
        print(
            f"{r['qos']:>3} {r['per_s']:>5} {r['expiry_s'] or '-':>6} {r['published']:>9} {r['received']:>8} "
            f"{r['newest_received_age_s']!s:>12} {rss:>14} {r['broker_send_queue_kb']:>15}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "cartpole_dqn.toml")
    ap.add_argument("--quick", action="store_true", help="140 s after the first accepted batch (the faults once)")
    ap.add_argument("--seconds", type=float, default=600.0, help="run length after the first accepted batch")
    ap.add_argument("--num-envs", type=int, default=2, help="envs per worker (8 workers share the machine)")
    ap.add_argument("--set", action="append", default=[], help="config override for the learner (repeatable)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--scale", type=float, default=1.0, help="fault times and lengths times this (a smoke run)")
    ap.add_argument("--weights-probe", action="store_true", help="broker memory vs weights QoS, expiry and rate")
    ap.add_argument("--probe-seconds", type=float, default=25.0)
    args = ap.parse_args()
    if args.weights_probe:
        return weights_probe(args)
    if args.quick:
        args.seconds = 140.0
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
