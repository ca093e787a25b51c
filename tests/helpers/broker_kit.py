"""The shipped production broker (broker/mosquitto-production.conf, acl, create-users.sh) in a
real mosquitto with test ports, a throwaway PKI and test users."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.paths import BROKER_KIT
from helpers.servers import Mosquitto
from mqttrl.broker.embedded import free_ports

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
        self.tls_port = next(p for p in free_ports(2) if p != self.port)
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
