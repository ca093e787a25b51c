"""Shared fixtures: a real mosquitto on a free port, and helpers to run the console scripts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqttrl.local.broker import _wait_port, free_port, mosquitto_config

REPO = Path(__file__).resolve().parent.parent


def cartpole_dqn_toml(run: str, **sections: dict) -> str:
    """A small CartPole DQN run config for end-to-end tests: two envs, learning from 200 steps, a
    learner that keeps up on a busy 2-core machine and publishes its metrics twice a second.
    ``sections`` override or add keys per section, e.g. ``learner={"worker_timeout_s": 15.0}``; a
    value of None leaves the key out (the default applies)."""
    config: dict[str, dict] = {
        "env": {"id": "CartPole-v1", "num_envs": 2},
        "algorithm": {"name": "dqn", "learning_starts": 200, "replay_ratio": 1.0},
        "worker": {"batch_size": 32},
        "learner": {"publish_every": 10, "checkpoint_every": 1000, "metrics_interval_s": 0.5},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    lines = [f"run = {run!r}"]
    for name, values in config.items():
        lines.append(f"[{name}]")
        lines += [
            f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in values.items() if v is not None
        ]
    return "\n".join(lines) + "\n"


def stop_server(proc: subprocess.Popen | None, log, timeout: float = 10.0) -> None:
    """SIGTERM a test server (SIGKILL if it does not go in ``timeout``) and close its log."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


class Mosquitto:
    """A mosquitto process with a config written for the test; can be stopped and restarted."""

    def __init__(self, workdir: Path, persistence: bool = False, extra: str = ""):
        if not shutil.which("mosquitto"):
            pytest.fail("mosquitto is not on PATH: apt-get install mosquitto (the .ci/run script does this)")
        self.workdir = workdir
        self.port = free_port()
        self.persistence = persistence
        self.extra = extra
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        data = self.workdir / "data" if self.persistence else None
        if data:
            data.mkdir(parents=True, exist_ok=True)
        return mosquitto_config(self.port, data, self.extra)

    def ports(self) -> list[int]:
        return [self.port]

    def start(self) -> Mosquitto:
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(self.config_text())
        self.log = open(self.workdir / "mosquitto.log", "ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=self.log, stderr=subprocess.STDOUT)
        for port in self.ports():
            assert _wait_port(port, 10), f"mosquitto did not start; see {self.workdir / 'mosquitto.log'}"
        return self

    def stop(self) -> None:
        stop_server(self.proc, self.log)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


# ---- the shipped production broker (broker/mosquitto-production.conf + acl + users) ----

BROKER_KIT = REPO / "broker"
PRODUCTION_CONF = BROKER_KIT / "mosquitto-production.conf"
#: the keys whose values are paths on the deployment host; everything else is used as shipped
PRODUCTION_PATH_KEYS = ("password_file", "acl_file", "persistence_location", "cafile", "certfile", "keyfile")


def production_config(text: str, ports: dict[int, int], paths: dict[str, str | Path]) -> str:
    """The shipped production config with only listener ports and paths substituted.

    ``ports`` maps each shipped listener port to a test port (bound to 127.0.0.1);
    ``paths`` gives a value for every key in :data:`PRODUCTION_PATH_KEYS`. Fails when the
    shipped file lacks one of them or has a listener the test does not know, so the
    tests cannot silently run a different configuration than the one shipped.
    """
    out, seen_ports, seen_keys = [], set(), set()
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            out.append(line)
            continue
        key = words[0]
        if key == "listener":
            shipped = int(words[1])
            assert shipped in ports, f"shipped config has an unexpected listener: {line!r}"
            assert shipped not in seen_ports, f"listener {shipped} twice"
            seen_ports.add(shipped)
            out.append(f"listener {ports[shipped]} 127.0.0.1")
        elif key in PRODUCTION_PATH_KEYS:
            assert key not in seen_keys, f"{key} set twice in the shipped config"
            seen_keys.add(key)
            value = str(paths[key])
            if key == "persistence_location" and not value.endswith("/"):
                value += "/"
            out.append(f"{key} {value}")
        else:
            out.append(line)
    assert seen_ports == set(ports), f"shipped config lacks listeners {set(ports) - seen_ports}"
    assert seen_keys == set(PRODUCTION_PATH_KEYS), f"shipped config lacks {set(PRODUCTION_PATH_KEYS) - seen_keys}"
    return "\n".join(out) + "\n"


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stderr}"


def make_test_pki(d: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost (EC keys: fast)."""
    if not shutil.which("openssl"):
        pytest.fail("openssl is not on PATH (apt-get install openssl)")
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=mqttrl test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )
    openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        cwd=d,
    )
    return {"cafile": d / "ca.crt", "certfile": d / "server.crt", "keyfile": d / "server.key"}


#: test users: name -> password (workers are users named like the worker)
BROKER_USERS = {
    "learner": "learner-secret-0001",
    "telemetry": "telemetry-secret-0002",
    "operator": "operator-secret-0003",
    "w1": "worker-secret-0004",
    "w2": "worker-secret-0005",
}


def create_users(password_file: Path, users: dict[str, str] = BROKER_USERS) -> subprocess.CompletedProcess:
    """Run the shipped broker/create-users.sh for ``users`` (roles via env, workers as NAME:PASSWORD)."""
    env = dict(os.environ)
    env.update(
        MQTTRL_LEARNER_PASSWORD=users["learner"],
        MQTTRL_TELEMETRY_PASSWORD=users["telemetry"],
        MQTTRL_OPERATOR_PASSWORD=users["operator"],
    )
    workers = [f"{n}:{p}" for n, p in users.items() if n not in ("learner", "telemetry", "operator")]
    r = subprocess.run(
        ["bash", str(BROKER_KIT / "create-users.sh"), "-f", str(password_file), *workers],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r


class ProductionMosquitto(Mosquitto):
    """mosquitto running broker/mosquitto-production.conf and broker/acl as shipped,
    with test ports (plain + TLS), a private data dir and the given password file and certs."""

    def __init__(self, workdir: Path, password_file: Path, certs: dict[str, Path]):
        super().__init__(workdir, persistence=True)
        self.tls_port = free_port()
        self.password_file = password_file
        self.certs = certs
        self.data_dir = workdir / "data"

    @property
    def tls_url(self) -> str:
        return f"mqtts://127.0.0.1:{self.tls_port}"

    def ports(self) -> list[int]:
        return [self.port, self.tls_port]

    def config_text(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        paths = {
            "password_file": self.password_file,
            "acl_file": BROKER_KIT / "acl",
            "persistence_location": self.data_dir,
            **self.certs,
        }
        text = production_config(PRODUCTION_CONF.read_text(), {1883: self.port, 8883: self.tls_port}, paths)
        if os.geteuid() == 0:
            # started as root, mosquitto switches to the "mosquitto" account, which cannot
            # read pytest's private tmp dirs; the account is the host's business, not the kit's
            text += "user root\n"
        return text


@pytest.fixture(scope="session")
def broker_pki(tmp_path_factory) -> dict[str, Path]:
    """A test CA and server certificate (CN/SAN 127.0.0.1, localhost)."""
    return make_test_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def broker_password_file(tmp_path_factory) -> Path:
    """A password file for BROKER_USERS written by broker/create-users.sh."""
    path = tmp_path_factory.mktemp("users") / "passwd"
    create_users(path)
    return path


@pytest.fixture
def production_mosquitto(tmp_path, broker_password_file, broker_pki):
    """A private mosquitto with the shipped production config, ACL and users (restartable)."""
    m = ProductionMosquitto(tmp_path / "prod-broker", broker_password_file, broker_pki)
    m.workdir.mkdir()
    m.start()
    yield m
    m.stop()


# ---- InfluxDB 1.x (the InfluxQL the Grafana dashboard speaks) -----------------------------


class InfluxDB:
    """A private influxd (InfluxDB 1.x) with its own dirs and free ports; HTTP API helpers."""

    def __init__(self, workdir: Path):
        if not shutil.which("influxd"):
            pytest.fail("influxd is not on PATH: apt-get install influxdb (scripts/test.sh does this)")
        self.workdir = workdir
        self.port = free_port()
        self.rpc_port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> InfluxDB:
        import urllib.request

        w = self.workdir
        conf = w / "influxdb.conf"
        conf.write_text(
            "reporting-disabled = true\n"
            f'bind-address = "127.0.0.1:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{w}/meta"\n'
            f'[data]\n  dir = "{w}/data"\n  wal-dir = "{w}/wal"\n  query-log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
            f'[http]\n  bind-address = "127.0.0.1:{self.port}"\n  log-enabled = false\n'
            "[continuous_queries]\n  enabled = false\n"
            '[logging]\n  level = "warn"\n'
        )
        self.log = open(w / "influxd.log", "ab")
        self.proc = subprocess.Popen(["influxd", "-config", str(conf)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=0.5) as r:
                    if r.status == 204:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"influxd did not start; see {w / 'influxd.log'}:\n{(w / 'influxd.log').read_text()[-2000:]}")

    def query(self, q: str, db: str | None = None, method: str = "GET") -> dict:
        import json
        import urllib.parse
        import urllib.request

        params = {"q": q, "epoch": "s"}
        if db:
            params["db"] = db
        data = urllib.parse.urlencode(params)
        if method == "POST":
            req = urllib.request.Request(f"{self.url}/query", data=data.encode(), method="POST")
        else:
            req = urllib.request.Request(f"{self.url}/query?{data}")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def write(self, db: str, lines: list[str], precision: str = "s") -> None:
        import urllib.parse
        import urllib.request

        url = f"{self.url}/write?" + urllib.parse.urlencode({"db": db, "precision": precision})
        req = urllib.request.Request(url, data="\n".join(lines).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204, r.read()

    def stop(self) -> None:
        stop_server(self.proc, self.log)
        self.proc = None


@pytest.fixture(scope="session")
def influxdb(tmp_path_factory):
    """One InfluxDB 1.x for the session; tests use their own databases."""
    db = InfluxDB(tmp_path_factory.mktemp("influxdb")).start()
    yield db
    db.stop()


@pytest.fixture
def mosquitto(tmp_path):
    """A private mosquitto for one test (restartable)."""
    m = Mosquitto(tmp_path / "broker-run")
    m.workdir.mkdir()
    m.start()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def shared_mosquitto(tmp_path_factory):
    """One mosquitto for tests that only need a broker and use their own run names."""
    m = Mosquitto(tmp_path_factory.mktemp("shared-broker"))
    m.start()
    yield m
    m.stop()


def node_env(**extra: str) -> dict:
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


# ---- a 3-node NATS cluster with JetStream and MQTT listeners (broker/nats/node.conf) -------

NATS_NODE_CONF = BROKER_KIT / "nats" / "node.conf"
#: the ports of the shipped node config, by role
NATS_SHIPPED_PORTS = {"client": 4222, "http": 8222, "cluster": 6222, "mqtt": 1883}


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
    def __init__(self, workdir: Path, name: str):
        self.workdir, self.name = workdir, name
        self.ports = {role: free_port() for role in NATS_SHIPPED_PORTS}
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
        self.nodes = []
        for i in (1, 2, 3):
            (workdir / f"nats-{i}").mkdir(parents=True)
            self.nodes.append(NatsNode(workdir / f"nats-{i}", f"nats-{i}"))

    def start(self, timeout: float = 30) -> NatsCluster:
        shipped = NATS_NODE_CONF.read_text()
        cluster_ports = [n.ports["cluster"] for n in self.nodes]
        for n in self.nodes:
            n.start(nats_node_config(shipped, n.name, n.workdir / "jetstream", n.ports, cluster_ports))
        deadline = time.monotonic() + timeout
        why = "not started"
        while time.monotonic() < deadline:
            if any(n.proc.poll() is not None for n in self.nodes):
                why = "a nats-server exited"
                break
            why = self._not_ready()
            if not why:
                return self
            time.sleep(0.2)
        logs = "\n".join(f"--- {n.name}\n{n.log_text()[-1500:]}" for n in self.nodes)
        self.stop()
        pytest.fail(f"the NATS cluster did not form in {timeout:.0f}s ({why}):\n{logs}")

    def _not_ready(self) -> str:
        """'' once every node has its 2 routes, sees the same JetStream meta leader of a
        3-node meta group and accepts MQTT connections; else what is missing."""
        import socket

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


@pytest.fixture
def nats_cluster(tmp_path):
    """A private 3-node NATS cluster (JetStream, MQTT); nodes can be killed."""
    c = NatsCluster(tmp_path / "nats").start()
    yield c
    c.stop()
