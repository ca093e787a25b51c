"""Hosts on one machine: a network namespace per host, wired to one bridge (a LAN), for the tests and
benchmarks of a deployment split over machines (issue 34; docs/deployment.md).

Each :class:`Host` has its own network stack: its own loopback, one interface ``eth0`` with the
address ``10.<net>.0.<n>/24`` and a veth peer on the LAN's bridge in the root namespace. Nothing but
the LAN joins them: a process on the learner host cannot reach the broker through 127.0.0.1, an X
display in a game PC's namespace is that host's alone (X11's abstract sockets are per namespace).
Files are shared (namespaces isolate the network only), which the tests use for logs.

Link faults on a host's interface: :meth:`Host.link` down/up (a cable pulled) and :meth:`Host.rate`
(a token-bucket cap, ``tc tbf``). ``tc netem`` (delay, loss) needs the kernel's sch_netem, which the
machines this project is built on do not have: latency is added by the TCP proxy of
:mod:`benchmarks.harness.link` run inside the game PC's namespace instead.

Needs root (or CAP_NET_ADMIN) and iproute2; :func:`available` says whether this machine can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str:
    """'' when network namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    name = f"mqttrl-probe-{os.getpid()}"
    probe = _ip("netns", "add", name, check=False)
    if probe.returncode != 0:
        return f"`ip netns add` is not allowed here: {probe.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return ""


class Lan:
    """A bridge in the root namespace and the hosts on it; :meth:`close` removes them all."""

    def __init__(self, net: int | None = None):
        self.tag = f"{os.getpid() % 100000}"
        self.net = net if net is not None else 100 + os.getpid() % 100
        self.bridge = f"mqbr{self.tag}"
        self.hosts: list[Host] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")

    def host(self, name: str) -> Host:
        host = Host(self, name, len(self.hosts) + 1)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in reversed(self.hosts):
            host.close()
        _ip("link", "del", self.bridge, check=False)


class Host:
    """One host: a namespace, its ``eth0`` on the LAN, and the processes started in it."""

    def __init__(self, lan: Lan, name: str, n: int):
        self.name, self.lan, self.n = name, lan, n
        self.ns = f"mq{lan.tag}-{name}"
        self.address = f"10.{lan.net}.0.{n}"
        outside = f"mqv{lan.tag}{n}"[:15]
        self.procs: list[subprocess.Popen] = []
        _ip("netns", "add", self.ns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        _ip("link", "set", outside, "master", lan.bridge)
        _ip("link", "set", outside, "up")
        self.run_ip("addr", "add", f"{self.address}/24", "dev", "eth0")
        self.run_ip("link", "set", "eth0", "up")
        self.run_ip("link", "set", "lo", "up")

    def run_ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _ip("-n", self.ns, *args, check=check)

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run in this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def start(self, argv: list[str], log: Path, env: dict | None = None, **kwargs) -> subprocess.Popen:
        """A process on this host, its output in ``log``; stopped by :meth:`close`."""
        out = open(log, "ab")
        proc = subprocess.Popen(self.argv(argv), stdout=out, stderr=subprocess.STDOUT, env=env, **kwargs)
        out.close()  # the child keeps its own descriptor
        self.procs.append(proc)
        return proc

    def xvfb(self, workdir: Path) -> str:
        """An X display of this host's own (its Xvfb's output in ``workdir``). Its number is chosen
        here, high and free: hosts share the file system, so two Xvfb that each take the lowest free
        number (``-displayfd``) both take :0, and the second's /tmp/.X11-unix/X0 takes the first's clients."""
        for number in range(300 + os.getpid() % 300, 1000):
            if not Path(f"/tmp/.X11-unix/X{number}").exists() and not Path(f"/tmp/.X{number}-lock").exists():
                break
        # -noreset: the server does not reset when its last client goes (a game relaunched, an env remade)
        argv = ["Xvfb", f":{number}", "-screen", "0", "640x480x24", "-nolisten", "tcp", "-ac", "-noreset"]
        self.start(argv, workdir / f"xvfb-{self.name}.log")
        deadline = time.monotonic() + 30
        while not Path(f"/tmp/.X11-unix/X{number}").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Xvfb :{number} on {self.name} did not start (see {workdir})")
            time.sleep(0.1)
        return f":{number}"

    def link(self, up: bool) -> None:
        """Pull or plug this host's cable: its ``eth0`` down or up."""
        self.run_ip("link", "set", "eth0", "up" if up else "down")

    def rate(self, bytes_per_s: int | None) -> None:
        """Cap what this host sends at ``bytes_per_s`` (tc tbf); None removes the cap."""
        tc = ["ip", "netns", "exec", self.ns, "tc", "qdisc"]
        subprocess.run([*tc, "del", "dev", "eth0", "root"], capture_output=True, timeout=30)
        if bytes_per_s is not None:
            kbit = max(8, bytes_per_s * 8 // 1000)
            subprocess.run(
                [
                    *tc,
                    "add",
                    "dev",
                    "eth0",
                    "root",
                    "tbf",
                    "rate",
                    f"{kbit}kbit",
                    "burst",
                    "32kbit",
                    "latency",
                    "400ms",
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )

    def close(self) -> None:
        """Stop its processes, the last started first (a worker before the X display its game needs)."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        _ip("netns", "del", self.ns, check=False)  # its eth0 goes with it, and the veth peer too
