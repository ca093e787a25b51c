"""Fixtures: real servers (mosquitto, the shipped production broker, InfluxDB, a NATS cluster) on
free ports. What tests share besides fixtures lives in ``helpers/`` (``from helpers.procs import
Proc``); tests never import this module.

Markers: ``e2e`` tests run the real console scripts against a real broker; ``slow`` tests take
long (end-to-end runs, training to a threshold, wheel builds, fault and chaos runs). The edit
loop runs the fast set, a few minutes on two cores::

    pytest -m "not slow"
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.broker_kit import ProductionMosquitto, create_users, make_test_pki
from helpers.nats import NatsCluster
from helpers.servers import InfluxDB, Mosquitto


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


@pytest.fixture
def nats_cluster(tmp_path):
    """A private 3-node NATS cluster (JetStream, MQTT); nodes can be killed."""
    c = NatsCluster(tmp_path / "nats").start()
    yield c
    c.stop()


#: fixtures that start a real server: a test that asks for one is not quick
SERVER_FIXTURES = frozenset(
    {"mosquitto", "shared_mosquitto", "production_mosquitto", "influxdb", "nats_cluster", "broker_pki"}
)


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="the contributor's loop: leave out slow and e2e tests and every test that starts a server",
    )


def is_quick(item) -> bool:
    """Not marked slow or e2e, and asking for no server fixture (a quick test may still run a subprocess)."""
    if item.get_closest_marker("slow") or item.get_closest_marker("e2e"):
        return False
    return not SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--quick"):
        return
    left_out = [item for item in items if not is_quick(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if is_quick(item)]
