"""A 3-node NATS cluster with JetStream and MQTT listeners, running broker/nats/node.conf as shipped."""

from __future__ import annotations

import queue
import shutil
import socket
import subprocess
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from benchmarks.harness.procs import stop_server
from helpers.paths import BROKER_KIT
from mqttrl.broker.embedded import free_ports

NATS_NODE_CONF = BROKER_KIT / "nats" / "node.conf"
#: the ports of the shipped node config, by role
NATS_SHIPPED_PORTS = {"client": 4222, "http": 8222, "cluster": 6222, "mqtt": 1883}
#: what a nats-server logs when another process took its port between the pick and its bind
BIND_RACE = "address already in use"


def nats_node_config(text: str, name: str, store: Path, ports: dict[str, int], cluster_ports: list[int]) -> str:
    """broker/nats/node.conf with its placeholders filled in and test ports (on 127.0.0.1).

    ``ports`` is this node's port per role (:data:`NATS_SHIPPED_PORTS`), ``cluster_ports`` the
    cluster ports of nodes 1, 2 and 3 (the routes). Fails when the shipped file lacks a
    listener or a route, so the test cannot run another configuration than the one shipped."""
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")) + "\n"
    text = text.replace("@NAME@", name).replace("@STORE@", str(store))
    for i, port in enumerate(cluster_ports, 1):
        route = f"nats-route://@NODE{i}@:{NATS_SHIPPED_PORTS['cluster']}"
        assert text.count(route) == 1, f"the shipped config lacks the route {route}"
        text = text.replace(route, f"nats-route://127.0.0.1:{port}")
    for role, shipped in NATS_SHIPPED_PORTS.items():
        for key in ("listen", "http"):
            line = f"{key}: 0.0.0.0:{shipped}"
            if line in text:
                assert text.count(line) == 1, f"{line!r} twice"
                text = text.replace(line, f"{key}: 127.0.0.1:{ports[role]}")
                break
        else:
            raise AssertionError(f"the shipped config has no {role} listener on port {shipped}")
    assert "@" not in text, "a placeholder is left"
    return "\n".join(comments) + "\n" + text


class NatsNode:
    def __init__(self, workdir: Path, name: str, ports: list[int]):
        self.workdir, self.name = workdir, name
        self.ports = dict(zip(NATS_SHIPPED_PORTS, ports, strict=True))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.ports['mqtt']}"

    @property
    def mqtt_port(self) -> int:
        return self.ports["mqtt"]

    def monitor(self, path: str) -> dict:
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['http']}{path}", timeout=2) as r:
            return json.loads(r.read())

    def start(self, conf: str) -> None:
        (self.workdir / "nats.conf").write_text(conf)
        self.log = open(self.workdir / "nats.log", "ab")
        self.proc = subprocess.Popen(
            ["nats-server", "-c", str(self.workdir / "nats.conf")], stdout=self.log, stderr=subprocess.STDOUT
        )

    def kill(self) -> None:
        """SIGKILL: no goodbye to the cluster, no flush (a crashed host)."""
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        self.proc = None

    def stop(self) -> None:
        stop_server(self.proc, self.log)
        self.proc = None

    def log_text(self) -> str:
        return (self.workdir / "nats.log").read_text(errors="replace")


class NatsCluster:
    """Three nats-server processes running broker/nats/node.conf as shipped, on free ports."""

    def __init__(self, workdir: Path):
        if not shutil.which("nats-server"):
            pytest.skip("nats-server is not on PATH: apt-get install nats-server (scripts/test.sh does this)")
        self.workdir = workdir
        self._new_nodes()

    def _new_nodes(self) -> None:
        """Three nodes on new ports in empty folders (no log or JetStream state of a failed try)."""
        for i in (1, 2, 3):
            shutil.rmtree(self.workdir / f"nats-{i}", ignore_errors=True)
            (self.workdir / f"nats-{i}").mkdir(parents=True)
        ports = free_ports(3 * len(NATS_SHIPPED_PORTS))
        self.nodes = [NatsNode(self.workdir / f"nats-{i}", f"nats-{i}", ports[4 * (i - 1) : 4 * i]) for i in (1, 2, 3)]

    def start(self, timeout: float = 30, tries: int = 3) -> NatsCluster:
        """Starts the three nodes and waits until they form one cluster.

        A node that lost a port to another process (it exits with "address already in use")
        makes the cluster start again on new ports, up to ``tries`` times; any other failure
        fails at once with the nodes' logs."""
        for attempt in range(1, tries + 1):
            why = self._start_once(timeout)
            if not why:
                return self
            logs = "\n".join(f"--- {n.name}\n{n.log_text()[-1500:]}" for n in self.nodes)
            self.stop()
            if BIND_RACE not in logs or attempt == tries:
                pytest.fail(f"the NATS cluster did not form in {timeout:.0f}s ({why}):\n{logs}")
            self._new_nodes()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> str:
        """'' once the cluster formed, else why not."""
        shipped = NATS_NODE_CONF.read_text()
        cluster_ports = [n.ports["cluster"] for n in self.nodes]
        for n in self.nodes:
            n.start(nats_node_config(shipped, n.name, n.workdir / "jetstream", n.ports, cluster_ports))
        deadline = time.monotonic() + timeout
        why = "not started"
        while time.monotonic() < deadline:
            if any(n.proc.poll() is not None for n in self.nodes):
                return "a nats-server exited"
            why = self._not_ready() or self._mqtt_not_ready(deadline)
            if not why:
                return ""
            time.sleep(0.2)
        return why

    def _mqtt_not_ready(self, deadline: float) -> str:
        """'' once each node's MQTT layer grants a QoS 1 subscription and a message published on
        node 1 reaches the clients on nodes 2 and 3; else what is missing. Routes and a meta
        leader are not enough: the MQTT layer's JetStream streams are made at the first MQTT
        client's connect, and until they have leaders a node may refuse subscriptions ("Unspecified
        error", seen after a node loss). One CI run's workers had neither config nor weights after
        40 s, which this would explain; that run kept no logs (the test's failure now shows them)."""
        topic = f"probe/{time.monotonic_ns()}"
        got: queue.Queue = queue.Queue()
        clients = []
        try:
            for n in self.nodes:
                c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"probe-{n.name}", protocol=mqtt.MQTTv311)
                c.on_message = lambda _c, name, m: got.put((name, m.payload))
                c.user_data_set(n.name)
                c.connect("127.0.0.1", n.mqtt_port)
                clients.append(c)
                acks: queue.Queue = queue.Queue()
                c.on_subscribe = lambda _c, _u, mid, codes, _p, acks=acks: acks.put((mid, codes[0].value))
                c.loop_start()
                _, mid = c.subscribe(topic, qos=1)
                granted = self._granted(acks, mid, deadline)
                if granted is None or granted >= 0x80:
                    return f"{n.name}: MQTT subscription {'not answered' if granted is None else 'refused'}"
            clients[0].publish(topic, b"ready", qos=1).wait_for_publish(timeout=max(deadline - time.monotonic(), 0.1))
            heard = set()
            while heard < {"nats-2", "nats-3"} and time.monotonic() < deadline:
                try:
                    heard.add(got.get(timeout=0.1)[0])
                except queue.Empty:
                    continue
            return "" if heard >= {"nats-2", "nats-3"} else f"an MQTT message of node 1 reached only {sorted(heard)}"
        except (OSError, RuntimeError, ValueError) as e:
            return f"MQTT probe: {type(e).__name__}: {e}"
        finally:
            for c in clients:
                c.disconnect()
                c.loop_stop()

    @staticmethod
    def _granted(acks: queue.Queue, mid: int, deadline: float) -> int | None:
        """The granted QoS (0x80 and up: refused) of subscription ``mid``, None when no SUBACK came."""
        while True:
            try:
                got_mid, code = acks.get(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                return None
            if got_mid == mid:
                return code

    def _not_ready(self) -> str:
        """'' once every node has its 2 routes, sees the same JetStream meta leader of a
        3-node meta group and accepts MQTT connections; else what is missing."""
        leaders = set()
        for n in self.nodes:
            try:
                routes = n.monitor("/routez")["num_routes"]
                meta = n.monitor("/jsz").get("meta_cluster", {})
            except OSError:
                return f"{n.name}: no monitoring port yet"
            if routes < 2:
                return f"{n.name}: {routes} routes"
            if meta.get("cluster_size") != 3 or not meta.get("leader"):
                return f"{n.name}: JetStream meta group {meta}"
            leaders.add(meta["leader"])
            try:
                socket.create_connection(("127.0.0.1", n.mqtt_port), timeout=0.5).close()
            except OSError:
                return f"{n.name}: MQTT port closed"
        return "" if len(leaders) == 1 else f"meta leaders disagree: {leaders}"

    def stop(self) -> None:
        for n in self.nodes:
            if n.proc is not None:
                n.stop()
