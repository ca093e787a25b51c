"""Run isolation with mosquitto's dynamic security plugin (``mqttrl broker``), against a real mosquitto."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from helpers.paths import REPO
from helpers.procs import node_env, script

from benchmarks.harness.procs import stop_server
from mqttrl import cli
from mqttrl.broker import dynsec
from mqttrl.broker.embedded import _wait_port, free_port
from mqttrl.config import from_dict
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import TABLE, Kind, Topics
from mqttrl.wire import Rejected, encode_json

PLUGIN = dynsec.find_plugin()
needs_plugin = pytest.mark.skipif(PLUGIN is None, reason="mosquitto_dynamic_security.so is not installed")


class DynsecBroker:
    def __init__(self, directory: Path):
        self.dir = directory
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.admin_file = directory / "admin.json"

    @property
    def admin(self) -> BrokerSettings:
        c = dynsec.read_credentials(self.admin_file)["clients"]["admin"]
        return BrokerSettings(url=self.url, username=c["username"], password=c["password"])


@pytest.fixture
def dynsec_broker(tmp_path):
    """``mqttrl broker init`` into a tmp dir, then mosquitto started with the config it wrote."""
    if PLUGIN is None:
        pytest.skip("mosquitto_dynamic_security.so is not installed")
    b = DynsecBroker(tmp_path / "broker")
    argv = ["broker", "init", "--dir", str(b.dir), "--port", str(b.port), "--bind", "127.0.0.1"]
    if os.geteuid() == 0:  # pytest's tmp dirs are private to root: mosquitto must stay root to reach them
        argv += ["--run-as", "root"]
    cli.main(argv)
    log = open(b.dir / "mosquitto.log", "ab")
    proc = subprocess.Popen(["mosquitto", "-c", str(b.dir / "mosquitto.conf")], stdout=log, stderr=subprocess.STDOUT)
    b.stop = lambda: stop_server(proc, log)  # mosquitto's log reaches the file when it exits
    try:
        assert _wait_port(b.port, 10), (b.dir / "mosquitto.log").read_text()
        yield b
    finally:
        stop_server(proc, log)


class Peer:
    """A bare paho client that records what it receives and how the broker answered."""

    def __init__(self, url_port: int, user: str | None, password: str | None, protocol=mqtt.MQTTv5):
        self.received: list[tuple[str, bytes]] = []
        self.suback: dict[int, list] = {}
        self.connack = None
        self._ev = threading.Condition()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"peer-{user}-{time.monotonic_ns()}", protocol=protocol
        )
        if user:
            self.c.username_pw_set(user, password)
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda c, u, m: self._add(m)
        self.c.on_subscribe = self._on_subscribe
        self.c.connect("127.0.0.1", url_port, keepalive=10)
        self.c.loop_start()
        with self._ev:
            self._ev.wait_for(lambda: self.connack is not None, 5)

    def _on_connect(self, client, userdata, flags, rc, properties):
        with self._ev:
            self.connack = rc
            self._ev.notify_all()

    def _on_subscribe(self, client, userdata, mid, rcs, properties):
        with self._ev:
            self.suback[mid] = rcs
            self._ev.notify_all()

    def _add(self, m):
        with self._ev:
            self.received.append((m.topic, m.payload))
            self._ev.notify_all()

    @property
    def accepted(self) -> bool:
        return self.connack is not None and not self.connack.is_failure

    def subscribe(self, topic: str) -> bool:
        """True when the broker granted the subscription."""
        _, mid = self.c.subscribe(topic, qos=1)
        with self._ev:
            assert self._ev.wait_for(lambda: mid in self.suback, 5), f"no SUBACK for {topic}"
        return not self.suback[mid][0].is_failure

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        self.c.publish(topic, payload, qos=1, retain=retain)

    def wait_for(self, topic: str, timeout: float = 3.0) -> list[bytes]:
        with self._ev:
            self._ev.wait_for(lambda: any(t == topic for t, _ in self.received), timeout)
            return [p for t, p in self.received if t == topic]

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _peer(b: DynsecBroker, creds: dict[str, tuple[str, str]], kind: str, **kw) -> Peer:
    kw.setdefault("protocol", getattr(b, "protocol", mqtt.MQTTv5))
    p = Peer(b.port, *creds[kind], **kw)
    assert p.accepted, f"{kind}: {p.connack}"
    return p


# ---- the role table -------------------------------------------------------------------
def test_every_topic_is_published_by_the_roles_the_topic_table_names():
    """The roles follow mqttrl/transport/topics.py: who may publish a kind is who the table says publishes it."""
    names = {"evaluator": "operator", "operators": "operator", "inference server": "inference"}
    for spec in TABLE:
        table = {names.get(p.strip(), p.strip()) for p in spec.publisher.split(",")}
        roles = {k for k, (pub, _) in dynsec.RIGHTS.items() if spec.kind in pub}
        assert roles == table, spec.kind
    for kind, (pub, read) in dynsec.RIGHTS.items():
        for acl in dynsec.role_acls("A", kind):
            assert acl["topic"].startswith(("mqttrl/A/", "$share/+/mqttrl/A/")), acl  # nothing outside its run


def test_names_are_per_run_and_checked():
    assert dynsec.name("A", "worker") == "A-worker"
    with pytest.raises(ValueError):
        dynsec.name("a/b", "worker")
    with pytest.raises(ValueError):
        dynsec.name("A", "admin")


def test_init_writes_private_files_and_refuses_to_replace_them(tmp_path):
    if PLUGIN is None:
        pytest.skip("mosquitto_dynamic_security.so is not installed")
    paths = dynsec.init_files(tmp_path / "b", port=1884)
    if os.geteuid() == 0:  # the broker drops root; the plugin file and data must be its account's
        import pwd

        try:
            mosq = pwd.getpwnam("mosquitto").pw_uid
        except KeyError:
            mosq = 0
        assert paths["dynsec"].stat().st_uid == mosq and paths["data"].stat().st_uid == mosq
        assert ("user mosquitto" if mosq else "user root") in paths["config"].read_text()
    for key in ("dynsec", "admin"):
        assert stat.S_IMODE(paths[key].stat().st_mode) == 0o600
    conf = paths["config"].read_text()
    assert f"plugin {PLUGIN}" in conf and "allow_anonymous false" in conf and "listener 1884" in conf
    admin = dynsec.read_credentials(paths["admin"])
    assert admin["broker"] == "mqtt://127.0.0.1:1884" and len(admin["clients"]["admin"]["password"]) >= 32
    with pytest.raises(FileExistsError):
        dynsec.init_files(tmp_path / "b", port=1884)


# ---- against the broker -------------------------------------------------------------------
@needs_plugin
def test_add_run_writes_credentials_0600_and_prints_them_once(dynsec_broker, tmp_path, capsys):
    out = tmp_path / "A.json"
    cli.main(["broker", "add-run", "A", "--admin-credentials", str(dynsec_broker.admin_file), "-o", str(out)])
    printed = capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = json.loads(out.read_text())
    assert doc["run"] == "A" and doc["broker"] == dynsec_broker.url
    assert set(doc["clients"]) == set(dynsec.NODE_KINDS)
    for kind, c in doc["clients"].items():
        assert c["username"] == f"A-{kind}"
        assert c["password"] in printed and len(c["password"]) >= 32
        assert _peer(dynsec_broker, {kind: (c["username"], c["password"])}, kind)
    # the same run again: refused, and the existing clients still work
    with pytest.raises(SystemExit, match="exists"):
        cli.main(["broker", "add-run", "A", "--admin-credentials", str(dynsec_broker.admin_file), "-o", str(out)])
    with pytest.raises(SystemExit, match="Role already exists"):
        cli.main(
            ["broker", "add-run", "A", "--admin-credentials", str(dynsec_broker.admin_file), "-o", str(tmp_path / "x")]
        )
    assert not (tmp_path / "x").exists()
    assert _peer(dynsec_broker, {"w": tuple(doc["clients"]["worker"].values())}, "w")


@needs_plugin
@pytest.mark.parametrize("protocol", [mqtt.MQTTv5, mqtt.MQTTv311])
def test_a_worker_of_run_a_cannot_publish_into_or_read_run_b(dynsec_broker, protocol):
    b = dynsec_broker
    b.protocol = protocol  # every peer of this test speaks it
    a_creds = dynsec.add_run(b.admin, "A")
    b_creds = dynsec.add_run(b.admin, "B")
    ta, tb = Topics("A"), Topics("B")
    peers = []
    try:
        learner_a = _peer(b, a_creds, "learner")
        learner_b = _peer(b, b_creds, "learner")
        worker_a = _peer(b, a_creds, "worker")
        worker_b = _peer(b, b_creds, "worker")
        peers += [learner_a, learner_b, worker_a, worker_b]
        for learner, t in ((learner_a, ta), (learner_b, tb)):
            assert learner.subscribe(t.all_samples)
            learner.publish(t.weights, f"weights of {t.run}".encode(), retain=True)
        # the learner of one run cannot read the other's samples either
        assert not learner_a.subscribe(tb.all_samples)

        # A's worker into B: never arrives; B's own worker (same topic layout) does
        worker_a.publish(tb.samples("w0"), b"from A into B")
        worker_a = _peer(b, a_creds, "worker")  # mosquitto 2.0 may drop the connection after a denied publish
        peers.append(worker_a)
        worker_a.publish(ta.samples("w0"), b"from A into A")
        worker_b.publish(tb.samples("w0"), b"from B into B")
        assert learner_a.wait_for(ta.samples("w0")) == [b"from A into A"]
        assert learner_b.wait_for(tb.samples("w0")) == [b"from B into B"]
        time.sleep(0.5)
        assert b"from A into B" not in [p for _, p in learner_b.received]

        # weights: A's worker reads A's, is refused B's (retained or not), and cannot replace A's
        assert worker_a.subscribe(ta.weights)
        assert worker_a.wait_for(ta.weights) == [b"weights of A"]
        assert not worker_a.subscribe(tb.weights)
        assert not worker_a.subscribe("mqttrl/#")
        assert not worker_a.subscribe("mqttrl/+/weights")
        learner_b.publish(tb.weights, b"new weights of B", retain=True)
        worker_a.publish(ta.weights, b"forged by a worker", retain=True)
        assert learner_a.subscribe(ta.weights)
        time.sleep(1.0)
        assert [p for t, p in worker_a.received if t != ta.weights] == []
        assert b"forged by a worker" not in [p for _, p in learner_a.received]
        late = _peer(b, a_creds, "worker")
        peers.append(late)
        assert late.subscribe(ta.weights) and late.wait_for(ta.weights) == [b"weights of A"]

        # commands: telemetry and operators of a run reach its learner, not another run's; a worker cannot
        worker_a = _peer(b, a_creds, "worker")  # a fresh connection (after its denied publishes)
        peers.append(worker_a)
        assert not worker_a.subscribe(ta.all_commands)
        assert learner_a.subscribe(ta.all_commands) and learner_b.subscribe(tb.all_commands)
        telemetry_a = _peer(b, a_creds, "telemetry")
        peers.append(telemetry_a)
        telemetry_a.publish(tb.command("quicksave"), b"telemetry of A to B")
        telemetry_a = _peer(b, a_creds, "telemetry")
        peers.append(telemetry_a)
        telemetry_a.publish(ta.command("quicksave"), b"telemetry of A to A")
        worker_a.publish(ta.command("quicksave"), b"worker of A to A")
        assert learner_a.wait_for(ta.command("quicksave")) == [b"telemetry of A to A"]
        time.sleep(0.5)
        assert learner_a.wait_for(ta.command("quicksave")) == [b"telemetry of A to A"]
        assert learner_b.wait_for(tb.command("quicksave"), 0.5) == []
        operator_b = _peer(b, b_creds, "operator")
        peers.append(operator_b)
        assert operator_b.subscribe(tb.all_worker_states) and not operator_b.subscribe(ta.all_worker_states)
    finally:
        for p in peers:
            p.close()


@needs_plugin
@pytest.mark.parametrize("protocol", [mqtt.MQTTv5, mqtt.MQTTv311])
def test_wrong_password_and_anonymous_are_refused(dynsec_broker, protocol):
    creds = dynsec.add_run(dynsec_broker.admin, "A")
    user, password = creds["worker"]
    for u, p in ((user, password + "x"), (user, ""), (None, None), ("B-worker", password)):
        peer = Peer(dynsec_broker.port, u, p, protocol=protocol)
        try:
            assert not peer.accepted, (u, peer.connack)
        finally:
            peer.close()
    ok = Peer(dynsec_broker.port, user, password, protocol=protocol)
    assert ok.accepted
    ok.close()


def test_worker_names_from_a_count_or_a_list():
    assert dynsec.worker_names("3") == ["w0", "w1", "w2"]  # the names mqttrl train gives
    assert dynsec.worker_names("gamepc1, gamepc2") == ["gamepc1", "gamepc2"]
    for bad, says in (("0", "count"), ("a,a", "twice"), ("a/b", "invalid worker name"), (" , ", "give a count")):
        with pytest.raises(ValueError, match=says):
            dynsec.worker_names(bad)
    assert dynsec.worker_name("A", "w0") == "A-worker@w0"
    own = {a["topic"] for a in dynsec.role_acls("A", "worker", "w0") if a["acltype"] == "publishClientSend"}
    assert own == {
        "mqttrl/A/samples/w0",
        "mqttrl/A/episodes/w0",
        "mqttrl/A/heartbeat/w0",
        "mqttrl/A/state/workers/w0",
        "mqttrl/A/infer/w0/request",
        "mqttrl/A/env_spec",  # the run's one spec topic: the first worker's game is the run's (a learner waits)
        "mqttrl/A/eval/w0",  # its greedy evaluations (train.eval_on = "workers"), under its own name
    }


@needs_plugin
def test_a_worker_with_its_own_identity_cannot_speak_for_another(dynsec_broker, tmp_path, capsys, monkeypatch):
    """add-run --workers: each worker publishes only under its own name and reads only its own
    inference replies; the shared worker client still works; remove-run deletes them all. The
    plugin gets the commands in chunks (4 here, to have several), with progress on stderr."""
    b = dynsec_broker
    monkeypatch.setattr(dynsec.DynsecAdmin, "CHUNK", 4)
    out = tmp_path / "A.json"
    admin = ["--admin-credentials", str(b.admin_file)]
    cli.main(["broker", "add-run", "A", "--workers", "2", *admin, "-o", str(out)])
    assert "14/14 plugin commands done" in capsys.readouterr().err  # 7 roles and 7 clients
    doc = json.loads(out.read_text())
    assert doc["workers"] == {
        w: {"username": f"A-worker@{w}", "password": doc["workers"][w]["password"]} for w in ("w0", "w1")
    }
    creds = {k: (c["username"], c["password"]) for k, c in doc["clients"].items()}
    creds |= {f"worker@{w}": (c["username"], c["password"]) for w, c in doc["workers"].items()}
    t = Topics("A")
    peers = []
    try:
        learner = _peer(b, creds, "learner")
        peers.append(learner)
        assert learner.subscribe(t.all_samples)
        learner.publish(t.weights, b"weights of A", retain=True)
        w0 = _peer(b, creds, "worker@w0")
        peers.append(w0)
        w0.publish(t.samples("w1"), b"w0 posing as w1")  # refused: may drop w0's connection
        w0 = _peer(b, creds, "worker@w0")
        peers.append(w0)
        w0.publish(t.samples("w0"), b"w0 as itself")
        assert learner.wait_for(t.samples("w0")) == [b"w0 as itself"]
        assert w0.subscribe(t.weights) and w0.wait_for(t.weights) == [b"weights of A"]
        assert w0.subscribe(t.infer_reply("w0")) and not w0.subscribe(t.infer_reply("w1"))
        shared = _peer(b, creds, "worker")  # the run's shared worker client is still there
        peers.append(shared)
        shared.publish(t.samples("w1"), b"shared as w1")
        assert learner.wait_for(t.samples("w1")) == [b"shared as w1"]
        assert b"w0 posing as w1" not in [p for _, p in learner.received]

        # add-workers later: a new game PC gets its identity, merged into the same file
        cli.main(["broker", "add-workers", "A", "gamepc3", *admin, "-o", str(out)])
        assert "gamepc3" in capsys.readouterr().out
        doc = json.loads(out.read_text())
        assert set(doc["workers"]) == {"w0", "w1", "gamepc3"} and set(doc["clients"]) == set(dynsec.NODE_KINDS)
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        pc3 = _peer(b, {"x": tuple(doc["workers"]["gamepc3"].values())}, "x")
        peers.append(pc3)
        pc3.publish(t.samples("gamepc3"), b"from gamepc3")
        assert learner.wait_for(t.samples("gamepc3")) == [b"from gamepc3"]
        # all or nothing across chunks: w1 exists, so new1 and new2 are not left behind either
        with pytest.raises(SystemExit, match="exists"):
            cli.main(["broker", "add-workers", "A", "new1", "new2", "w1", *admin, "-o", str(out)])
        assert set(json.loads(out.read_text())["workers"]) == {"w0", "w1", "gamepc3"}
        with dynsec.DynsecAdmin(b.admin) as a:
            (listed,) = a.send([{"command": "listClients"}])
        assert sorted(u for u in listed["data"]["clients"] if "@" in u) == [
            "A-worker@gamepc3",
            "A-worker@w0",
            "A-worker@w1",
        ]

        cli.main(["broker", "remove-run", "A", *admin])
        assert "A-worker@gamepc3" in capsys.readouterr().out
        for kind in ("worker@w0", "worker@w1"):
            assert not Peer(b.port, *creds[kind]).accepted
        assert not Peer(b.port, *doc["workers"]["gamepc3"].values()).accepted
    finally:
        for p in peers:
            p.close()


@needs_plugin
def test_remove_run_disconnects_and_locks_out_its_clients(dynsec_broker, capsys):
    creds = dynsec.add_run(dynsec_broker.admin, "A")
    other = dynsec.add_run(dynsec_broker.admin, "B")
    worker = _peer(dynsec_broker, creds, "worker")
    admin = ["--admin-credentials", str(dynsec_broker.admin_file)]
    cli.main(["broker", "remove-run", "A", *admin])
    assert "removed run A" in capsys.readouterr().out
    worker.close()
    assert not Peer(dynsec_broker.port, *creds["worker"]).accepted
    assert _peer(dynsec_broker, other, "worker").accepted  # B untouched
    with pytest.raises(SystemExit, match="no clients or roles"):
        cli.main(["broker", "remove-run", "A", *admin])
    dynsec.add_run(dynsec_broker.admin, "A")  # can be added again


@needs_plugin
@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_refused_subscription_is_made_again_until_granted(dynsec_broker, protocol):
    """A SUBACK with a failure code is not the end of it: MqttClient subscribes again (with a
    backoff) until the broker grants it, and then gets the retained message. Here mosquitto's
    dynamic security refuses the subscription until the admin grants the right; NATS's MQTT
    refuses QoS 1 subscriptions while its cluster is missing a node (tests/test_nats_cluster.py)."""
    from mqttrl.transport.client import MqttClient

    b = dynsec_broker
    a_creds, b_creds = dynsec.add_run(b.admin, "A"), dynsec.add_run(b.admin, "B")
    ta, tb = Topics("A"), Topics("B")
    learner_b = _peer(b, b_creds, "learner")
    learner_b.publish(tb.weights, b"weights of B", retain=True)
    user, password = a_creds["worker"]
    settings = BrokerSettings(url=b.url, username=user, password=password, protocol=protocol)
    node = MqttClient(settings, "sub-retry", subscriptions=[(ta.config, 1), (tb.weights, 1)]).start()
    try:
        deadline = time.monotonic() + 5
        while node.subs_refused < 2 and time.monotonic() < deadline:  # the first try and one more
            time.sleep(0.05)
        assert node.subs_refused >= 2, "the subscription to another run's weights was refused and tried again"
        assert node.inbox.empty()
        with dynsec.DynsecAdmin(b.admin) as admin:  # now the worker of A may read B's weights
            admin.send(
                [
                    {"command": "addRoleACL", "rolename": user, "acltype": acltype, "topic": tb.weights, "allow": True}
                    for acltype in ("subscribeLiteral", "publishClientReceive")
                ]
            )
        msg = node.inbox.get(timeout=10)  # the next try (within 8 s) is granted
        assert (msg.topic, msg.payload, msg.retain) == (tb.weights, b"weights of B", True)
        refused = node.subs_refused
        time.sleep(1.5)
        assert node.subs_refused == refused, "a granted subscription is not made again"
    finally:
        node.stop()
        learner_b.close()


@needs_plugin
def test_a_wrong_admin_password_is_one_line(dynsec_broker):
    s = BrokerSettings(url=dynsec_broker.url, username="admin", password="wrong")
    with pytest.raises(dynsec.DynsecError, match="refused the admin"):
        dynsec.add_run(s, "A")
    creds = dynsec.add_run(dynsec_broker.admin, "A")
    not_admin = BrokerSettings(url=dynsec_broker.url, username=creds["operator"][0], password=creds["operator"][1])
    with pytest.raises(dynsec.DynsecError):
        dynsec.add_run(not_admin, "C", timeout=2)


def test_kinds_cover_the_table():
    assert {k for pub, read in dynsec.RIGHTS.values() for k in pub | read} == set(Kind)


@needs_plugin
@pytest.mark.e2e
@pytest.mark.slow
def test_train_with_per_node_credentials_trains_on_the_dynsec_broker(dynsec_broker, tmp_path):
    """`mqttrl train --credentials FILE` (what add-run wrote): every child logs in as its own client of
    the run, the parent as its operator, and the run trains, evaluates and keeps telemetry. Worker w0
    has an identity of its own (add-run --workers w0) and logs in with it; w1 uses the shared one."""
    creds = tmp_path / "cartpole.json"
    admin = ["--admin-credentials", str(dynsec_broker.admin_file)]
    cli.main(["broker", "add-run", "cartpole-dqn", "-o", str(creds), "--quiet", "--workers", "w0", *admin])
    run_dir = tmp_path / "run"
    argv = [script("mqttrl"), "train", str(REPO / "configs" / "cartpole_dqn.toml"), "--run-dir", str(run_dir)]
    argv += ["--credentials", str(creds), "--no-progress", "--workers", "2", "--set", "train.max_seconds=15"]
    argv += ["--set", "train.eval_every_s=2", "--set", "train.target_return=10000"]
    argv += ["--set", "algorithm.learning_starts=200", "--set", "train.eval_episodes=2"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=node_env())
    logs = out.stdout + out.stderr
    assert out.returncode == 3, logs  # the budget ran out, as asked
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] > 0 and summary["updates"] and summary["evaluations"] >= 1, summary
    assert summary["rejected"] == {} and summary["workers"] == 2, summary
    assert "-operator" not in json.dumps(summary)
    dynsec_broker.stop()
    broker_log = (dynsec_broker.dir / "mosquitto.log").read_text()
    for kind in ("learner", "worker@w0", "worker", "telemetry", "operator"):
        assert f"u'cartpole-dqn-{kind}'" in broker_log, kind  # each logged in as its own client
    assert "not authorised" not in broker_log.lower() and "denied" not in broker_log.lower(), broker_log
    for name in ("episode", "eval", "worker", "learner"):  # telemetry read the run's episodes, evaluations ...
        assert len((run_dir / "telemetry" / f"{name}.csv").read_text().splitlines()) > 1, name


def test_train_credentials_must_be_the_config_runs(tmp_path):
    f = tmp_path / "c.json"
    clients = {k: (f"other-{k}", "pw") for k in dynsec.NODE_KINDS}
    dynsec.write_private(f, json.dumps(dynsec.credentials_doc("mqtt://127.0.0.1:1", clients, "other")))
    config = str(REPO / "configs" / "cartpole_dqn.toml")
    with pytest.raises(SystemExit, match="is for run 'other', the config's run is 'cartpole-dqn'"):
        cli.main(["train", config, "--credentials", str(f)])
    del clients["worker"]
    dynsec.write_private(f, json.dumps(dynsec.credentials_doc(None, clients, "cartpole-dqn")))
    with pytest.raises(SystemExit, match="no client for worker"):
        cli.main(["train", config, "--credentials", str(f)])
    f.write_text("{}")
    with pytest.raises(SystemExit, match="not an mqttrl credentials file"):
        cli.main(["train", config, "--credentials", str(f)])


def test_children_get_their_own_user_not_the_parents():
    from mqttrl.trainer.plan import _without_username

    argv = ["--broker", "mqtt://h:1883", "--username", "u", "--tls-ca", "ca", "--username=v", "--mqtt-protocol", "5"]
    assert _without_username(argv) == ["--broker", "mqtt://h:1883", "--tls-ca", "ca", "--mqtt-protocol", "5"]


def test_a_worker_logged_in_as_its_own_identity_takes_its_name(capsys):
    """RUN-worker@NAME may publish only as NAME: --name defaults to it, and another --name is one
    line before any connection (not a worker whose every batch is refused)."""
    import argparse

    from mqttrl.cli.worker import add_arguments, worker_name

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--run", "A", "--broker", "mqtt://127.0.0.1:1"]
    assert worker_name(p.parse_args([*base, "--username", "A-worker@gamepc1"])) == "gamepc1"
    assert worker_name(p.parse_args([*base, "--username", "A-worker@gamepc1", "--name", "gamepc1"])) == "gamepc1"
    assert worker_name(p.parse_args([*base, "--username", "A-worker", "--name", "w3"])) == "w3"  # the shared client
    assert worker_name(p.parse_args([*base, "--username", "B-worker@x"])) is None  # another run's: no default
    with pytest.raises(SystemExit, match="may publish only as worker 'w0', not as --name 'w3'"):
        cli.main(["worker", *base, "--username", "A-worker@w0", "--name", "w3"])


def test_broker_readme_shows_the_rights_table():
    assert dynsec.markdown_table() in (REPO / "broker" / "README.md").read_text()


@needs_plugin
def test_remote_inference_stays_in_its_run(dynsec_broker):
    """Workers' requests reach their run's inference servers (own topic and the shared pool), replies come back;
    another run's server can take neither."""
    b = dynsec_broker
    a_creds, b_creds = dynsec.add_run(b.admin, "A"), dynsec.add_run(b.admin, "B")
    ta = Topics("A")
    peers = [_peer(b, a_creds, "inference"), _peer(b, b_creds, "inference"), _peer(b, a_creds, "worker")]
    server_a, server_b, worker = peers
    try:
        assert server_a.subscribe(ta.shared_infer_requests()) and server_a.subscribe(ta.all_infer_requests)
        assert not server_b.subscribe(ta.shared_infer_requests()) and not server_b.subscribe(ta.all_infer_requests)
        assert worker.subscribe(ta.infer_reply("w0")) and worker.subscribe(ta.all_inference_states)
        worker.publish(ta.infer_request("w0"), b"request")
        assert set(server_a.wait_for(ta.infer_request("w0"))) == {b"request"}
        server_a.publish(ta.infer_reply("w0"), b"reply")
        server_a.publish(ta.inference_state("s0"), b"online", retain=True)
        assert worker.wait_for(ta.infer_reply("w0")) == [b"reply"]
        assert worker.wait_for(ta.inference_state("s0")) == [b"online"]
        assert server_b.received == []
    finally:
        for p in peers:
            p.close()


def test_python_api_checks_the_credentials_file_before_starting(tmp_path):
    import mqttrl

    f = tmp_path / "c.json"
    clients = {k: (f"other-{k}", "pw") for k in dynsec.NODE_KINDS}
    dynsec.write_private(f, json.dumps(dynsec.credentials_doc(None, clients, "other")))
    with pytest.raises(ValueError, match="is for run 'other'"):
        mqttrl.train(run="cartpole-dqn", credentials=f, progress=False)
    dynsec.write_private(f, json.dumps(dynsec.credentials_doc(None, clients, "cartpole-dqn")))
    with pytest.raises(ValueError, match="names no broker"):
        mqttrl.train(run="cartpole-dqn", credentials=f, progress=False)


@needs_plugin
def test_an_own_identity_worker_gets_answers_only_on_its_own_topic(dynsec_broker, shared_mosquitto):
    """A worker with its own identity sends inference requests only on infer/<its name>/request and
    reads only infer/<its name>/reply; the server answers on the reply topic of the worker the
    request topic names (whatever the payload's reply_to says), so w1 cannot have w0 answered."""
    from mqttrl.nodes.inference import InferenceServer
    from mqttrl.wire import encode_request

    b = dynsec_broker
    creds = dynsec.add_run(b.admin, "A", workers=["w0", "w1"])
    t = Topics("A")
    server, w0, w1 = (_peer(b, creds, k) for k in ("inference", "worker@w0", "worker@w1"))
    try:
        assert server.subscribe(t.shared_infer_requests())
        assert w1.subscribe(t.infer_reply("w1")) and not w1.subscribe(t.infer_reply("w0"))
        w1.publish(t.infer_request("w0"), b"w1 posing as w0")  # refused by the ACL
        w1 = _peer(b, creds, "worker@w1")  # mosquitto 2.0 may have dropped it
        w1.publish(t.infer_request("w1"), b"w1 as itself")
        assert server.wait_for(t.infer_request("w1")) == [b"w1 as itself"]
        assert server.wait_for(t.infer_request("w0"), 0.5) == []
    finally:
        for p in (server, w0, w1):
            p.close()

    # the server side: the reply topic comes from the request's topic, never from its payload
    registry = get_registry()
    cfg = from_dict(
        {"run": "A", "env": {"id": "CartPole-v1"}, "algorithm": {"name": "dqn"}}, lambda n: registry.algorithm(n).params
    )
    s0 = InferenceServer(BrokerSettings(url=shared_mosquitto.url), "A", "s0", backend="numpy")
    s0._on_config("", encode_json(cfg.to_dict()))
    obs = np.zeros((2, 4), np.float32)
    s0._on_request("w1", encode_request("A", "w1", 1, 0, obs, t.infer_reply("w0")))  # asks for w0's topic
    assert [p.reply_topic for p in s0._batch] == [t.infer_reply("w1")]
    with pytest.raises(Rejected) as e:  # a header naming another worker than the topic
        s0._on_request("w1", encode_request("A", "w0", 2, 0, obs, t.infer_reply("w0")))
    assert e.value.reason == "sender_mismatch"
    s0._on_request("w1", encode_request("A", "w1", 3, 0, obs, t.infer_reply("w1"), server="s9"))  # not ours
    assert len(s0._batch) == 1 and s0.not_ours == 1
