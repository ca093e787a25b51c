"""The operator's broker kit (broker/): production config, ACL, users, TLS, persistence.

Every test runs the SHIPPED broker/mosquitto-production.conf and broker/acl in a real
mosquitto, with users created by the shipped broker/create-users.sh; only listener ports
and file paths are substituted (conftest.production_config).

mosquitto 2.0 answers a publish the ACL denies with PUBACK "not authorized" (MQTT 5) or
a plain PUBACK (3.1.1), and then closes the connection (eclipse-mosquitto/mosquitto#2579).
So every forbidden publish below uses its own connection, and "never arrives" is proven
with a sentinel: mosquitto routes a message to its subscribers before it acknowledges it
and delivers to each subscriber in order, so once a sentinel published after the PUBACK
of a forbidden message has arrived, the forbidden one can no longer arrive.
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from helpers.broker_kit import BROKER_USERS, ProductionMosquitto, create_users
from helpers.configs import cartpole_dqn_toml
from helpers.paths import BROKER_KIT, REPO
from helpers.procs import Proc, script
from helpers.raw_client import Client

from mqttrl.transport import client as transport
from mqttrl.transport.client import BrokerSettings, BrokerUnavailable, MqttClient
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_weights, encode_json
from mqttrl.wire.weights import encode_weights

RUN = "kit"
T = Topics(RUN)
NOT_AUTHORIZED = 135


def ok(reason) -> bool:
    """A successful PUBACK (0 success, 16 "no matching subscribers")."""
    return not reason.is_failure


@pytest.fixture
def broker(production_mosquitto) -> ProductionMosquitto:
    return production_mosquitto


def forbidden(broker, user: str, topic: str, payload: bytes, retain: bool = False) -> None:
    """Publish with its own MQTT 5 connection; the broker must answer 'not authorized'."""
    c = Client(broker.port, user)
    assert not c.connack.is_failure
    rc = c.pub(topic, payload, retain)
    assert rc == NOT_AUTHORIZED, f"{user} publishing {topic}: {rc}"
    c.close()  # mosquitto 2.0 has closed the connection anyway


# ---- users ------------------------------------------------------------------------------


def test_create_users_script(tmp_path):
    path = tmp_path / "passwd"
    r = create_users(path)
    assert "added learner (learner)" in r.stdout and "added w1 (worker)" in r.stdout
    assert {line.split(":")[0] for line in path.read_text().splitlines()} == set(BROKER_USERS)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    before = path.read_text()
    assert "updated w1 (worker)" in create_users(path).stdout  # idempotent: updates in place
    assert len(path.read_text().splitlines()) == len(before.splitlines())

    def run(*args, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith("MQTTRL_")}
        e.update(env)
        return subprocess.run(
            ["bash", str(BROKER_KIT / "create-users.sh"), *args], capture_output=True, text=True, env=e
        )

    fresh = tmp_path / "none"
    r = run("-f", str(fresh), "w1")  # no passwords at all: refuses, writes nothing
    assert r.returncode != 0 and "no password" in r.stderr and not fresh.exists()
    roles = dict(
        MQTTRL_LEARNER_PASSWORD="x" * 12, MQTTRL_TELEMETRY_PASSWORD="y" * 12, MQTTRL_OPERATOR_PASSWORD="z" * 12
    )
    r = run("-f", str(fresh), "w1", **roles)  # worker without a password
    assert r.returncode != 0 and "no password for worker" in r.stderr and not fresh.exists()
    assert "shorter than" in run("-f", str(fresh), "w1:short", **roles).stderr
    assert "is a role" in run("-f", str(fresh), "learner:" + "q" * 12, **roles).stderr
    assert "invalid user name" in run("-f", str(fresh), "a/b:" + "q" * 12, **roles).stderr
    assert not fresh.exists()
    r = run("-f", str(fresh), "-w", "-n", "2", "-p", "gpu", MQTTRL_WORKER_PASSWORD="p" * 12)
    assert r.returncode == 0, r.stderr
    assert [line.split(":")[0] for line in fresh.read_text().splitlines()] == ["gpu0", "gpu1"]


# ---- authentication ---------------------------------------------------------------------


@pytest.fixture
def fresh_negotiation(monkeypatch):
    """MqttClient caches the protocol per host:port; make it probe (and so authenticate) again."""
    monkeypatch.setattr(transport, "_negotiated", {})


def test_anonymous_and_wrong_password_are_refused(broker, fresh_negotiation):
    for proto in (mqtt.MQTTv5, mqtt.MQTTv311):
        c = Client(broker.port, None, protocol=proto)
        assert c.connack.is_failure and c.connack.value in (NOT_AUTHORIZED, 5), c.connack
        c.close()
    c = Client(broker.port, "w1", password="wrong-password-123")
    assert c.connack.is_failure and c.connack.value in (134, NOT_AUTHORIZED), c.connack
    c.close()
    with pytest.raises(BrokerUnavailable, match="refused"):
        MqttClient(BrokerSettings(url=broker.url), "anon-node")


# ---- authorization ----------------------------------------------------------------------


def test_worker_cannot_publish_learner_or_other_workers_topics(broker):
    learner = Client(broker.port, "learner")
    telemetry = Client(broker.port, "telemetry").sub("mqttrl/#")
    # the learner's own subscriptions (mqttrl/nodes/learner/node.py)
    observer = Client(broker.port, "learner").sub(
        T.all_samples, T.all_heartbeats, T.all_worker_states, T.all_commands, T.weights
    )
    genuine_weights = encode_weights(3, "dqn", RUN, {"w": np.arange(10, dtype=np.float32)})
    genuine_config = encode_json({"run": RUN, "protocol": 1})
    assert ok(learner.pub(T.weights, genuine_weights, retain=True))
    assert ok(learner.pub(T.config, genuine_config, retain=True))
    telemetry.until(lambda m: m.topic == T.config)

    attempts = [
        (T.weights, True),
        (T.config, True),
        (T.flow, True),
        (T.learner_state, True),
        (T.learner_metrics, False),
        (T.command("quicksave"), False),
        (T.samples("w2"), False),
        (T.episodes("w2"), False),
        (T.heartbeat("w2"), False),
        (T.worker_state("w2"), True),
        (T.evaluation("w2"), False),  # another worker's evaluation (its own, eval/w1, it may publish: below)
        ("mqttrl/other-run/weights", True),
        ("elsewhere/topic", False),
    ]
    for topic, retain in attempts:
        forbidden(broker, "w1", topic, b"forged " + topic.encode(), retain)
    # MQTT 3.1.1: a plain PUBACK (the protocol has no way to say no), then the connection is closed
    old = Client(broker.port, "w1", protocol=mqtt.MQTTv311)
    assert ok(old.pub(T.weights, b"forged 3.1.1 weights", retain=True))
    old.close()
    # a last will on a forbidden topic is dropped when the broker publishes it; one on the
    # worker's own state goes through (and shows that dropping the socket sends the will)
    for will in ((T.weights, b"forged will", True), (T.worker_state("w1"), b"genuine will", True)):
        willing = Client(broker.port, "w1", will=will)
        willing.c.loop_stop()
        willing.c.socket().close()  # drop the connection without DISCONNECT: the broker sends the will
        time.sleep(0.2)

    # the worker's own topics work, and its messages arrive
    w1 = Client(broker.port, "w1", will=(T.worker_state("w1"), b'{"status": "offline"}', True))
    for topic, retain in [
        (T.worker_state("w1"), True),
        (T.episodes("w1"), False),
        (T.heartbeat("w1"), False),
        (T.evaluation("w1"), False),  # its greedy evaluation on its own game (train.eval_on = "workers")
        (T.samples("w1"), False),
    ]:
        assert ok(w1.pub(topic, b"genuine " + topic.encode(), retain)), topic
    sentinel = lambda m: m.topic == T.samples("w1")  # noqa: E731
    seen = [(m.topic, m.payload) for m in telemetry.until(sentinel)]
    seen_by_learner = [(m.topic, m.payload) for m in observer.until(sentinel)]
    for who, msgs in (("telemetry", seen), ("learner", seen_by_learner)):
        assert not [t for t, p in msgs if p.startswith(b"forged")], f"forged messages reached {who}: {msgs}"
    assert seen[0] == (T.worker_state("w1"), b"genuine will")
    assert [t for t, _ in seen[1:]] == [
        T.worker_state("w1"),
        T.episodes("w1"),
        T.heartbeat("w1"),
        T.evaluation("w1"),
        T.samples("w1"),
    ]
    assert seen_by_learner[:2] == [(T.weights, genuine_weights), (T.worker_state("w1"), b"genuine will")]
    assert [t for t, _ in seen_by_learner[2:]] == [T.worker_state("w1"), T.heartbeat("w1"), T.samples("w1")]

    # the retained weights and config are still the learner's, for a newcomer
    late = Client(broker.port, "w2").sub(T.weights, T.config)
    retained = {m.topic: m.payload for m in late.until(lambda m: m.topic == T.config)}
    assert retained == {T.weights: genuine_weights, T.config: genuine_config}
    assert decode_weights(retained[T.weights]).version == 3
    for c in (learner, telemetry, observer, w1, late):
        c.close()


def test_who_reads_and_who_commands(broker):
    w2 = Client(broker.port, "w2").sub("mqttrl/#")
    learner_sub = Client(broker.port, "learner").sub(T.all_commands, "mqttrl/#")
    learner = Client(broker.port, "learner")
    w1 = Client(broker.port, "w1")
    telemetry = Client(broker.port, "telemetry")
    operator = Client(broker.port, "operator").sub(T.base + "/reply/#", T.all_evaluations)

    for topic in (T.config, T.weights, T.learner_state, T.learner_metrics):
        assert ok(learner.pub(topic, b"from learner " + topic.encode(), retain=topic != T.learner_metrics))
    assert ok(w1.pub(T.samples("w1"), b"w1 samples"))
    assert ok(w1.pub(T.heartbeat("w1"), b"w1 heartbeat"))
    assert ok(telemetry.pub(T.command("quicksave"), b'{"name": "best"}'))
    assert ok(operator.pub(T.command("quicksave"), b'{"name": "by-operator"}'))
    assert ok(operator.pub(T.evaluation("operator"), b'{"mean": 1.0}'))
    assert ok(learner.pub(T.base + "/reply/operator", b'{"path": "x"}'))
    assert ok(learner.pub(T.flow, b'{"pause": false}', retain=True))  # the sentinel

    # a worker reads exactly the public topics of the run
    got = [m.topic for m in w2.until(lambda m: m.topic == T.flow)]
    assert got == [T.config, T.weights, T.learner_state, T.flow]
    # the learner reads commands from telemetry and the operator, and what it consumes
    got = [(m.topic, m.payload) for m in learner_sub.until(lambda m: m.topic == T.flow)]
    assert (T.command("quicksave"), b'{"name": "best"}') in got
    assert (T.command("quicksave"), b'{"name": "by-operator"}') in got
    assert {t for t, _ in got} == {
        T.config,
        T.weights,
        T.learner_state,
        T.learner_metrics,
        T.samples("w1"),
        T.heartbeat("w1"),
        T.command("quicksave"),
        T.flow,
    }  # no eval, no replies
    got = [m.topic for m in operator.until(lambda m: m.topic == T.base + "/reply/operator")]
    assert got == [T.evaluation("operator"), T.base + "/reply/operator"]
    for c in (w2, learner_sub, learner, w1, telemetry, operator):
        c.close()
    # only telemetry and the operator send commands; the learner does not write evaluations
    forbidden(broker, "learner", T.command("quicksave"), b"forged")
    forbidden(broker, "learner", T.evaluation("x"), b"forged")
    forbidden(broker, "telemetry", T.weights, b"forged", retain=True)
    forbidden(broker, "operator", T.config, b"forged", retain=True)


# ---- TLS through the real transport -----------------------------------------------------


def test_tls_with_mqttnode(broker, broker_pki, fresh_negotiation):
    def settings(user: str, host: str = "127.0.0.1", password: str | None = None) -> BrokerSettings:
        return BrokerSettings(
            url=f"mqtts://{host}:{broker.tls_port}",
            tls_ca=str(broker_pki["cafile"]),
            username=user,
            password=password or BROKER_USERS[user],
        )

    worker = MqttClient(settings("w1", "localhost"), "w1", subscriptions=[(T.weights, 1)]).start()
    learner = MqttClient(settings("learner"), "learner-tls", persistent=True).start()
    try:
        payload = encode_weights(7, "dqn", RUN, {"w": np.ones(300_000, np.float32)})  # 1.2 MB over TLS
        learner.publish(T.weights, payload, qos=1, retain=True, kind="weights")
        msg = worker.inbox.get(timeout=10)
        assert msg.topic == T.weights and msg.payload == payload
        assert decode_weights(msg.payload).version == 7
        # a worker's credentials cannot publish weights over TLS either
        worker.publish(T.weights, b"forged", qos=1, retain=True, kind="weights")
        time.sleep(0.5)
        fresh = Client(broker.port, "w2").sub(T.weights)
        assert fresh.until(lambda m: True)[0].payload == payload
        fresh.close()
    finally:
        worker.stop(flush_timeout=1)
        learner.stop(flush_timeout=1)
    # the test CA is not in the system store, and a wrong password is refused over TLS too
    transport._negotiated.clear()
    with pytest.raises(BrokerUnavailable, match="certificate verify failed"):
        MqttClient(
            BrokerSettings(url=f"mqtts://127.0.0.1:{broker.tls_port}", username="w1", password=BROKER_USERS["w1"]),
            "no-ca",
        )
    with pytest.raises(BrokerUnavailable, match="refused"):
        MqttClient(settings("w1", password="wrong-password-123"), "bad-pw")


# ---- persistence --------------------------------------------------------------------------


def test_retained_config_weights_and_queued_samples_survive_restart(broker):
    learner = Client(broker.port, "learner")
    config = encode_json({"run": RUN, "env": {"id": "CartPole-v1"}, "protocol": 1})
    weights = encode_weights(
        42, "dqn", RUN, {"w": np.random.default_rng(0).standard_normal(500_000).astype(np.float32)}
    )
    assert ok(learner.pub(T.config, config, retain=True))
    assert ok(learner.pub(T.weights, weights, retain=True))
    learner.close()
    # the learner's persistent session (MQTT 5 session expiry) subscribed to samples, then away
    session = Client(broker.port, "learner", client_id="learner-kit", session_expiry=3600).sub(T.all_samples)
    session.close()
    w1 = Client(broker.port, "w1")
    for i in range(3):
        assert ok(w1.pub(T.samples("w1"), f"batch {i}".encode()))
    w1.close()

    broker.stop()  # SIGTERM: mosquitto saves its database
    assert (broker.data_dir / "mosquitto.db").stat().st_size > len(weights)
    broker.start()

    late = Client(broker.port, "w2").sub(T.config, T.weights)
    retained = {m.topic: m.payload for m in late.until(lambda m: m.topic == T.weights)}
    assert retained[T.config] == config
    assert retained[T.weights] == weights  # byte-identical
    late.close()
    session = Client(broker.port, "learner", client_id="learner-kit", session_expiry=3600)
    got = [m.payload for m in session.until(lambda m: m.payload == b"batch 2")]
    assert got == [b"batch 0", b"batch 1", b"batch 2"]
    session.close()


def test_lan_config_still_works(tmp_path):
    """broker/mosquitto.conf (the open LAN config the README starts with) runs as shipped,
    with its port and persistence path substituted, and lifts the queue limits."""
    from helpers.servers import Mosquitto

    text = (BROKER_KIT / "mosquitto.conf").read_text()
    for key in ("max_queued_messages 0", "max_queued_bytes 0", "max_packet_size 100000000", "persistence true"):
        assert key in text.splitlines(), key

    class Lan(Mosquitto):
        def config_text(self) -> str:
            (self.workdir / "data").mkdir(exist_ok=True)
            out = []
            for line in text.splitlines():
                if line.startswith("listener 1883"):
                    line = f"listener {self.port} 127.0.0.1"
                elif line.startswith("persistence_location "):
                    line = f"persistence_location {self.workdir / 'data'}/"
                out.append(line)
            return "\n".join(out) + "\n" + ("user root\n" if os.geteuid() == 0 else "")

    (tmp_path / "lan").mkdir()
    m = Lan(tmp_path / "lan").start()
    try:
        sub = Client(m.port, None).sub("mqttrl/#")
        anyone = Client(m.port, None)
        assert ok(anyone.pub(T.weights, b"open broker", retain=True))
        assert sub.until(lambda msg: True)[0].payload == b"open broker"
        sub.close()
        anyone.close()
    finally:
        m.stop()
    assert (tmp_path / "lan" / "data" / "mosquitto.db").exists()


def test_compose_mounts_match_the_production_config():
    """docker compose cannot run here; check that its mounts put every file where the
    shipped configs expect it."""
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((BROKER_KIT / "docker-compose.yml").read_text())
    conf = {}
    for line in (BROKER_KIT / "mosquitto-production.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf.setdefault(key, value.strip())
    mosq = compose["services"]["mosquitto"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in mosq["volumes"]}
    assert mounts["/mosquitto/config/mosquitto.conf"] == "./mosquitto-production.conf"
    assert mounts[conf["password_file"]] == "./passwd" and mounts[conf["acl_file"]] == "./acl"
    assert mounts[conf["persistence_location"].rstrip("/")] == "mosquitto-data"
    for key in ("cafile", "certfile", "keyfile"):
        folder, _, name = conf[key].rpartition("/")
        assert mounts[folder] == "./certs", key
    assert {p.split(":")[1] for p in mosq["ports"]} == {"1883", "8883"}
    influx = compose["services"]["influxdb"]["environment"]
    assert influx["DOCKER_INFLUXDB_INIT_ORG"] == "mqttrl" and influx["DOCKER_INFLUXDB_INIT_BUCKET"] == "mqttrl"
    grafana = compose["services"]["grafana"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "INFLUXDB_TOKEN" in grafana["environment"]
    provider = yaml.safe_load((BROKER_KIT / "grafana/provisioning/dashboards/dashboards.yml").read_text())["providers"][
        0
    ]
    assert provider["options"]["path"] == "/etc/grafana/provisioning/dashboards"
    ds = yaml.safe_load((BROKER_KIT / "grafana/provisioning/datasources/influxdb.yml").read_text())["datasources"][0]
    assert ds["url"] == "http://influxdb:8086" and ds["jsonData"]["version"] == "InfluxQL"
    assert ds["secureJsonData"]["httpHeaderValue1"] == "Token ${INFLUXDB_TOKEN}"


# ---- the real nodes under the ACL ------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_real_learner_and_worker_under_the_acl_survive_a_broker_restart(tmp_path, broker, broker_pki):
    """mqttrl-learner (user learner, plain) and mqttrl-worker (user w1, TLS) train on the
    production broker: the ACL allows every topic the nodes really use, nothing is rejected,
    no node is disconnected for a denied publish,
    and after a broker restart the worker reconnects and keeps delivering."""
    from helpers.watch import Watcher

    run = "kit-e2e"
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        cartpole_dqn_toml(run, algorithm={"replay_ratio": None}, learner={"publish_every": 20, "worker_timeout_s": 4.0})
    )
    watch = Watcher(broker.port, run, "telemetry", BROKER_USERS["telemetry"])
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(cfg),
            "--broker",
            broker.url,
            "--run-dir",
            str(tmp_path / "run"),
            "--username",
            "learner",
            "--password",
            BROKER_USERS["learner"],
        ],
        tmp_path / "learner.log",
    )
    worker = Proc(
        [
            script("mqttrl-worker"),
            "--broker",
            f"mqtts://127.0.0.1:{broker.tls_port}",
            "--tls-ca",
            str(broker_pki["cafile"]),
            "--username",
            "w1",
            "--password",
            BROKER_USERS["w1"],
            "--run",
            run,
            "--name",
            "w1",
        ],
        tmp_path / "worker.log",
    )
    try:
        watch.wait(
            lambda w: w.latest["updates"] > 20 and w.latest["workers_online"] == 1, 90, "training with w1 online"
        )
        assert sum(watch.latest["rejected"].values()) == 0, watch.latest["rejected"]
        broker.restart(down_for=0.5)  # the watcher's paho loop reconnects and re-subscribes by itself
        samples, batches = watch.latest["samples"], watch.batches.get("w1", 0)
        watch.wait(
            lambda w: (
                w.batches["w1"] >= batches + 5
                and w.latest["samples"] > samples + 200
                and w.latest["workers_online"] == 1
            ),
            60,
            "samples from w1 after the broker restart",
        )
        # what an outage may legitimately cause: QoS 1 is at-least-once, so a batch in flight
        # when the broker stopped may come twice (duplicate), and batches the worker made
        # while the learner trained on alone may be too old by now (stale_version)
        assert {k for k, v in watch.latest["rejected"].items() if v} <= {"duplicate", "stale_version"}, watch.latest[
            "rejected"
        ]
        assert worker.p.poll() is None and learner.p.poll() is None
    finally:
        assert worker.terminate() == 0, worker.text()[-3000:]
        assert learner.terminate(60) == 0, learner.text()[-3000:]
        watch.close()
    assert "Bad socket" not in (broker.workdir / "mosquitto.log").read_text(), (
        "a node was disconnected for a denied publish"
    )


def test_every_shipped_config_bounds_packets_sanely():
    """A corrupted length field makes mosquitto wait for (and buffer) up to max_packet_size: every config
    we ship (and the embedded and dynsec brokers we write) caps it well under the protocol's 256 MB, yet
    above the learner's default sample cap (learner.max_payload_mb) with room for weights."""
    import re

    from mqttrl.broker import dynsec, embedded
    from mqttrl.config import LearnerConfig

    cap = LearnerConfig().max_payload_mb * 1024 * 1024
    texts = {p.name: p.read_text() for p in (*BROKER_KIT.glob("*.conf"), *(BROKER_KIT / "bridge").glob("*.conf"))}
    texts["embedded.py"] = (REPO / "mqttrl" / "broker" / "embedded.py").read_text()
    texts["dynsec.py"] = (REPO / "mqttrl" / "broker" / "dynsec.py").read_text()
    assert embedded and dynsec  # the modules whose text is checked import cleanly
    for name, text in texts.items():
        if "listener" not in text and name.endswith(".conf"):
            continue  # not a broker config (e.g. nats)
        sizes = [int(v) for v in re.findall(r"max_packet_size (\d+)", text)]
        assert sizes, f"{name} sets no max_packet_size"
        assert all(cap < size <= 128 * 1024 * 1024 for size in sizes), (name, sizes)
