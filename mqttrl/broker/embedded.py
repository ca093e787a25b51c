"""An embedded broker for single-machine runs and tests.

Prefers a ``mosquitto`` binary on PATH (fast, MQTT 5), started with a config
written for the run; falls back to amqtt in-process (slower, MQTT 3.1.1 only).
The generated mosquitto config lifts the per-client queue limits: mosquitto's
default of 1000 queued messages silently drops QoS 1 messages for a
subscriber that falls behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from mqttrl.system.procs import detached_popen_kwargs

log = logging.getLogger("mqttrl.broker")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """``count`` different free ports on 127.0.0.1, for one server with several listeners.

    All sockets stay bound until every port is picked: picked one at a time, a closed socket's
    port can come back from the next pick and two listeners collide (CI saw it)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def mosquitto_config(port: int, data_dir: Path | None = None, extra: str = "") -> str:
    """A mosquitto.conf for one local run: no queue caps, big messages, optional persistence."""
    lines = [
        f"listener {port} 127.0.0.1",
        "allow_anonymous true",
        # 0 = no limit. The learner applies flow control itself; the broker must not drop.
        "max_queued_messages 0",
        "max_queued_bytes 0",
        "max_inflight_messages 0",
        # weight messages can be large
        "max_packet_size 100000000",  # broker/mosquitto.conf says why
        "persistent_client_expiration 1h",
        "set_tcp_nodelay true",
        "log_type error",
        "log_type warning",
    ]
    if data_dir is not None:
        lines += ["persistence true", f"persistence_location {data_dir}/", "autosave_interval 5"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # as root, mosquitto drops to the 'mosquitto' user, which cannot write a root-owned run dir
            lines.append("user root")
    else:
        lines += ["persistence false"]
    return "\n".join(lines) + "\n" + extra


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class EmbeddedBroker:
    """``with EmbeddedBroker() as b: ... b.url``. ``kind`` is "auto", "mosquitto" or "amqtt"."""

    def __init__(
        self, kind: str = "auto", port: int | None = None, workdir: Path | None = None, persistence: bool = False
    ):
        if kind == "auto":
            kind = "mosquitto" if shutil.which("mosquitto") else "amqtt"
        if kind not in ("mosquitto", "amqtt"):
            raise ValueError(f"broker kind {kind!r}: use auto, mosquitto or amqtt")
        self.kind = kind
        self.port = port or free_port()
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mqttrl-broker-")
            workdir = Path(self._tmp.name)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.persistence = persistence
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._amqtt = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        if self.kind == "mosquitto":
            self._start_mosquitto(timeout)
        else:
            self._start_amqtt(timeout)
        log.info("embedded %s broker on %s", self.kind, self.url)
        return self

    def _start_mosquitto(self, timeout: float) -> None:
        conf = self.workdir / "mosquitto.conf"
        data = self.workdir / "data" if self.persistence else None
        if data:
            data.mkdir(exist_ok=True)
        conf.write_text(mosquitto_config(self.port, data))
        self._log = open(self.workdir / "mosquitto.log", "ab")
        self._proc = subprocess.Popen(
            ["mosquitto", "-c", str(conf)], stdout=self._log, stderr=subprocess.STDOUT, **detached_popen_kwargs()
        )
        if not _wait_port(self.port, timeout):
            self.stop()
            raise RuntimeError(f"mosquitto did not start on port {self.port}; see {self.workdir / 'mosquitto.log'}")

    def _start_amqtt(self, timeout: float) -> None:
        try:
            from amqtt.broker import Broker
        except ImportError:
            raise RuntimeError(
                "no mosquitto on PATH and amqtt is not installed: install one "
                "(apt-get install mosquitto, or pip install 'mqttrl[embedded]'), or pass --broker URL"
            ) from None
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}", "max_connections": 1000}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        ready = threading.Event()
        errors: list[BaseException] = []

        def run():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._amqtt = Broker(config, loop=loop)
                loop.run_until_complete(self._amqtt.start())
            except BaseException as exc:  # reported to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        logging.getLogger("amqtt").setLevel(logging.CRITICAL)
        logging.getLogger("transitions").setLevel(logging.WARNING)
        self._thread = threading.Thread(target=run, name="amqtt-broker", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        if errors:
            raise RuntimeError(f"amqtt broker failed to start: {errors[0]}")
        if not _wait_port(self.port, timeout):
            raise RuntimeError(f"amqtt did not start on port {self.port}")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
            self._log.close()
        if self._loop is not None and self._amqtt is not None:
            fut = asyncio.run_coroutine_threadsafe(self._amqtt.shutdown(), self._loop)
            try:
                fut.result(10)
            except Exception as exc:
                log.warning("amqtt shutdown: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
