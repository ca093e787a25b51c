"""A 3-node NATS cluster (JetStream + MQTT listeners, broker/nats/node.conf) as the broker.

The learner is on node 1; worker w2 on node 2 and worker w3 on node 3, each with a
failover list naming the other nodes. Mid-run node 2 is SIGKILLed. Then:

* w2 moves to another node of its list and goes on sending; the learner accepts its
  batches (and w3's) after the kill, and publishes new model versions;
* a client connecting after the kill to a surviving node gets the retained config and the
  retained weights of the newest version (JetStream keeps them on all three nodes);
* every batch the workers sent was accepted by the learner exactly once (a QoS 1 batch that
  node 2 acknowledged is in the replicated stream, one it had not is sent again by the
  worker and refused as a duplicate if it got through);
* no process crashed.

Real nats-server processes and real mqttrl nodes; the cluster is started by the
``nats_cluster`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import json
import queue
import time
from collections import Counter

import paho.mqtt.client as mqtt
import pytest
from helpers.configs import cartpole_dqn_toml
from helpers.nats import NatsCluster
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher

from mqttrl.observe.ledger import read as read_ledger
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_weights

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def retained(url: str, run: str, timeout: float = 60) -> dict[str, object]:
    """The retained config and weights an mqttrl client gets on connecting to ``url`` now.

    Right after a node is lost, a surviving node may refuse subscriptions for a while (CI saw
    ~20 s, "Unspecified error") while JetStream elects new leaders for its MQTT streams; the
    client tries again with backoff (as every mqttrl node does), so the wait is generous."""
    t = Topics(run)
    node = MqttClient(
        BrokerSettings(url=url), f"late-{time.monotonic_ns()}", subscriptions=[(t.config, 1), (t.weights, 1)]
    ).start(wait=timeout)
    got = {}
    try:
        deadline = time.monotonic() + timeout
        while len(got) < 2 and time.monotonic() < deadline:
            try:
                m = node.inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if m.retain:
                got.setdefault(m.topic, m)
    finally:
        node.stop()
    assert len(got) == 2, f"retained messages from {url}: {sorted(got)} ({node.subs_refused} subscriptions refused)"
    return got


def test_training_survives_losing_a_node_of_the_nats_cluster(tmp_path, nats_cluster: NatsCluster):
    t0 = time.monotonic()
    run = "e2e-nats"
    n1, n2, n3 = nats_cluster.nodes
    cfg = tmp_path / "run.toml"
    cfg.write_text(cartpole_dqn_toml(run, learner={"worker_timeout_s": 15.0}))
    ledgers = tmp_path / "ledgers"
    env = node_env(MQTTRL_LEDGER_DIR=str(ledgers))
    watch = Watcher(n1.mqtt_port, run, protocol=mqtt.MQTTv311)  # on node 1, with the learner
    procs = {
        "learner": Proc(
            [script("mqttrl-learner"), "--config", str(cfg), "--run-dir", str(tmp_path / "run")]
            + ["--broker", f"{n1.url},{n3.url}"],
            tmp_path / "learner.log",
            env,
        )
    }
    for name, urls in (("w2", [n2.url, n3.url, n1.url]), ("w3", [n3.url, n1.url, n2.url])):
        procs[name] = Proc(
            [script("mqttrl-worker"), "--broker", ",".join(urls), "--run", run, "--name", name],
            tmp_path / f"{name}.log",
            env,
        )
    learner, w2, w3 = procs["learner"], procs["w2"], procs["w3"]

    def sent(name: str, ev: str = "sent") -> list[dict]:
        return [e for p in ledgers.glob(f"worker-{name}-*.jsonl") for e in read_ledger(p) if e["ev"] == ev]

    def last_seq(w: Watcher, name: str) -> int:
        return w.latest["workers"][name]["last_seq"]

    def logs() -> str:
        return "\n".join(f"--- {name}.log\n{p.text()[-1500:]}" for name, p in procs.items())

    try:
        try:
            watch.wait(
                lambda w: w.version >= 3 and last_seq(w, "w2") >= 5 and last_seq(w, "w3") >= 5, 60, "training under way"
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\n{logs()}") from None
        assert f"connected to {n2.url}" in w2.text() and f"connected to {n3.url}" in w3.text()
        at_kill = {"version": watch.version, "w2": last_seq(watch, "w2"), "w3": last_seq(watch, "w3")}
        batches_at_kill = watch.latest["batches"]
        n2.kill()
        t_kill, kill_wall = time.monotonic(), time.time()
        # w2 moves on to node 3 (the next of its list) and the learner takes its batches again
        assert w2.wait_for(f"moving to {n3.url}", 20), w2.text()[-3000:]
        watch.wait(
            lambda w: (
                last_seq(w, "w2") >= at_kill["w2"] + 10
                and last_seq(w, "w3") >= at_kill["w3"] + 10
                and w.version >= at_kill["version"] + 3
            ),
            40,
            "batches of both workers and new model versions after node 2 was killed",
        )
        failover_s = time.monotonic() - t_kill
        assert watch.latest["batches"] > batches_at_kill
        # a client arriving now, on either surviving node, gets the config and the newest weights
        for node in (n3, n1):
            newest = watch.version
            got = retained(node.url, run)
            config = json.loads(got[Topics(run).config].payload)
            assert config["run"] == run, config
            version = decode_weights(got[Topics(run).weights].payload).version
            assert version >= newest > at_kill["version"], (node.name, version, newest, at_kill)
        # and the learner accepts w2's batches from its new node (once w2 has a recent enough model)
        watch.wait(
            lambda w: any(
                e["ev"] == "accepted" and e.get("worker") == "w2" and e["seq"] > at_kill["w2"]
                for p in ledgers.glob("learner-*.jsonl")
                for e in read_ledger(p)
            ),
            40,
            "the learner accepting a batch w2 sent after the kill",
        )
        for name, p in procs.items():
            assert p.p.poll() is None, f"{name} exited ({p.p.returncode}):\n{p.text()[-3000:]}"
    finally:
        for w in (w2, w3):
            w.terminate()
        final_sent = {name: max((e["seq"] for e in sent(name, "acked")), default=-1) for name in ("w2", "w3")}
        try:
            watch.wait(
                lambda w: all(last_seq(w, n) >= s for n, s in final_sent.items()),
                20,
                "the last batches the broker acknowledged",
            )
        finally:
            learner.terminate(60)
            watch.close()
    for name, p in procs.items():
        assert "Traceback" not in p.text(), f"{name}:\n{p.text()[-3000:]}"
    # w2 moved; w3 and the learner may too (NATS 2.9.10 now and then drops a connection to a
    # surviving node while its JetStream leaders are re-elected): what matters is what follows
    assert w2.text().count("moving to") >= 1
    # every batch each worker sent and the learner got was judged once: accepted (never twice), or
    # refused as a duplicate or as made on a model too old (w2 acts on its old model until its
    # weights subscription is back). NATS 2.9.10 acknowledges a few batches that the learner's
    # session does not get within the run (around its consumers' leader elections; 2 of ~1,100 of
    # one worker's in one run, see broker/README.md): counted, and bounded here, not asserted away.
    judged = [e for p in ledgers.glob("learner-*.jsonl") for e in read_ledger(p)]
    unjudged = {}
    for name in ("w2", "w3"):
        mine = [e for e in judged if e.get("worker") == name]
        accepted = Counter(e["seq"] for e in mine if e["ev"] == "accepted")
        refused = Counter(e.get("reason") for e in mine if e["ev"] == "refused")
        stale = {e["seq"] for e in mine if e["ev"] == "refused" and e.get("reason") == "stale_version"}
        assert set(refused) <= {"duplicate", "stale_version"}, (name, refused)
        sent_seqs = {e["seq"] for e in sent(name)}
        assert set(accepted) | stale <= sent_seqs, name
        assert not set(accepted) & stale and max(accepted.values()) == 1, name
        # what the broker acknowledged (the worker's outbox may also drop batches while NATS
        # stalls its connection: counted by the worker as dropped, never sent to a broker)
        acked = {e["seq"] for e in sent(name, "acked")}
        unjudged[name] = sorted(acked - set(accepted) - stale)
        assert len(unjudged[name]) <= max(5, len(acked) // 100), (name, len(acked), unjudged[name][:20])
        if name == "w2":
            stale_w2 = stale
    newer = [e["t"] for e in sent("w2") if e["v"] > at_kill["version"]]
    print(
        f"after the kill: both workers' batches and 3 new versions in {failover_s:.1f}s; w2 on newer weights "
        f"{'after %.1fs' % (min(newer) - kill_wall) if newer else 'never'}; w2's batches refused as stale: "
        f"{len(stale_w2)}, dropped by its outbox: {len(sent('w2', 'dropped'))}; acknowledged but not received: "
        f"{unjudged}; test wall {time.monotonic() - t0:.1f}s"
    )


def test_the_cluster_starts_again_on_new_ports_when_a_node_lost_its_port(tmp_path):
    """CI saw a node exit with "address already in use": its MQTT port had been picked while
    free and taken before it bound. The cluster must start again on new ports, not fail."""
    import socket

    cluster = NatsCluster(tmp_path / "nats")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster.nodes[2].ports["mqtt"] = port
        try:
            cluster.start()
            assert port not in [p for n in cluster.nodes for p in n.ports.values()], "the taken port was kept"
            ports = [p for n in cluster.nodes for p in n.ports.values()]
            assert len(set(ports)) == len(ports) == 12, ports
        finally:
            cluster.stop()
