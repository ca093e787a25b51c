"""A TCP proxy between clients and a broker that makes the faults of a game PC's Wi-Fi or home
uplink on the loopback: latency with jitter, a bandwidth cap, a silent (half-open) cut, a hard
cut with RST, flapping, and corrupted MQTT packets.

Tests and benchmarks use the same proxy (``benchmarks.harness.link``): a tool of the standard
library only, not a part of mqttrl, so it is not shipped.

Each connection through the proxy has two :class:`Pipe` s, ``up`` (client -> broker) and
``down`` (broker -> client). A pipe reads from its source into a bounded buffer (a router's
queue: bandwidth-delay product plus 64 KiB; when it is full the pipe stops reading, so TCP
back-pressure reaches the sender, as on a real slow link) and writes each chunk after its
latency, paced at the bandwidth cap. The proxy's sockets use small kernel buffers so that the
queue a slow link builds stays in the sender (the broker), where it is measured, and not in
the loopback's buffers.

- :meth:`Link.shape`: latency (each way, uniform jitter), bandwidth (bytes/s, each direction).
- :meth:`Link.freeze`: a silent cut of the connections open now (their bytes are held, the
  connections stay up; ``both=False`` holds only the broker's bytes), while new connections pass.
- :meth:`Link.silence` / :meth:`Link.heal`: a silent cut of everything, new connections too
  (they are accepted and then hear nothing), and its end (held bytes flow again).
- :meth:`Link.cut` / :meth:`Link.restore`: a hard cut (every connection reset, new ones refused)
  and its end.
- :meth:`Link.flap`: silent and up in turn, until :meth:`Link.heal`.
- :meth:`Link.corrupt`: rewrite the next MQTT packet of a type in one direction (e.g. a PUBACK
  whose remaining length declares 2,000,000 bytes: :func:`declare_length`).
"""

from __future__ import annotations

import collections
import random
import socket
import struct
import threading
import time
from collections.abc import Callable

#: MQTT control packet types (the high nibble of the first byte)
CONNACK, PUBLISH, PUBACK, PINGRESP = 2, 3, 4, 13
#: kernel socket buffers of the proxy's sockets (bytes): the queue of a slow link stays in the sender
SOCKET_BUFFER = 32 * 1024


def encode_length(n: int) -> bytes:
    """MQTT's variable-length integer (the remaining length of a fixed header)."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def declare_length(declared: int) -> Callable[[bytes], bytes]:
    """A rewrite for :meth:`Link.corrupt`: the packet's remaining-length field says ``declared``
    bytes; its body is left as it was (the peer then waits for bytes that never belong to it)."""

    def rewrite(packet: bytes) -> bytes:
        _, header_len = split_length(packet, 1)
        return packet[:1] + encode_length(declared) + packet[header_len:]

    return rewrite


def split_length(buf: bytes | bytearray, at: int) -> tuple[int | None, int]:
    """Read a variable-length integer at ``buf[at:]``: (value, offset after it), or (None, at)
    when the buffer ends inside it."""
    value, shift, i = 0, 0, at
    while i < len(buf):
        byte = buf[i]
        value += (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 21:
            raise ValueError("malformed MQTT remaining length")
    return None, at


class Corrupter:
    """Splits one direction's byte stream into MQTT packets and rewrites the next packet of a
    type (once per :meth:`arm`); everything else passes unchanged, in order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._rules: list[tuple[int, Callable[[bytes], bytes]]] = []
        self.rewritten = 0
        self._passing = False  # after a rewrite the stream is no longer parseable: pass bytes as they come

    def arm(self, packet_type: int, rewrite: Callable[[bytes], bytes]) -> None:
        self._rules.append((packet_type, rewrite))

    @property
    def armed(self) -> bool:
        return bool(self._rules)

    def feed(self, data: bytes) -> bytes:
        """The bytes to forward now (complete packets, some rewritten); a partial packet waits."""
        if self._passing or (not self._rules and not self._buf):
            return data
        self._buf += data
        out = bytearray()
        while self._buf:
            length, body_at = split_length(self._buf, 1)
            if length is None or len(self._buf) < body_at + length:
                break
            packet = bytes(self._buf[: body_at + length])
            del self._buf[: body_at + length]
            kind = packet[0] >> 4
            for i, (want, rewrite) in enumerate(self._rules):
                if want == kind:
                    packet = rewrite(packet)
                    del self._rules[i]
                    self.rewritten += 1
                    self._passing = True
                    break
            out += packet
            if self._passing:
                out += self._buf
                self._buf.clear()
        return bytes(out)


class Shape:
    """One direction's latency (s), jitter (s, uniform ±) and bandwidth (bytes/s, None: no cap)."""

    def __init__(self, latency_s: float = 0.0, jitter_s: float = 0.0, rate: float | None = None):
        self.latency_s, self.jitter_s, self.rate = latency_s, jitter_s, rate

    def delay(self, rng: random.Random) -> float:
        return max(0.0, self.latency_s + rng.uniform(-self.jitter_s, self.jitter_s))

    @property
    def buffer_bytes(self) -> int:
        """The router queue: what the link holds in flight (bandwidth x delay) plus 64 KiB."""
        if self.rate is None:
            return 1 << 22
        return int(self.rate * (self.latency_s + self.jitter_s)) + 64 * 1024


class Pipe:
    """One direction of one connection: read, hold for the latency, pace at the cap, write."""

    def __init__(self, link: Link, src: socket.socket, dst: socket.socket, direction: str, number: int):
        self.link, self.src, self.dst, self.direction, self.number = link, src, dst, direction, number
        self.corrupter = Corrupter()
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._held = 0
        self._cond = threading.Condition()
        self._closed = False
        self._last_due = 0.0
        self.bytes = 0

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    @property
    def shape(self) -> Shape:
        return self.link.shapes[self.direction]

    def _read(self) -> None:
        try:
            while data := self.src.recv(16 * 1024):
                data = self.corrupter.feed(data)
                with self._cond:
                    # TCP keeps order: jitter may delay a chunk, never put it before an earlier one
                    due = max(time.monotonic() + self.shape.delay(self.link.rng), self._last_due)
                    self._last_due = due
                    self._queue.append((due, data))
                    self._held += len(data)
                    self._cond.notify_all()
                    while self._held > self.shape.buffer_bytes and not self._closed:
                        self._cond.wait(0.05)  # the router's queue is full: stop reading (back-pressure)
        except OSError:
            pass
        self.close()

    def _next(self) -> bytes | None:
        """The next chunk once it is due and the link lets bytes through; None when closed."""
        with self._cond:
            while True:
                if self._closed and not self._queue:
                    return None
                now = time.monotonic()
                if self._queue and self._queue[0][0] <= now and self.link.passes(self.number, self.direction):
                    return self._queue[0][1]
                wait = self._queue[0][0] - now if self._queue else 0.05
                self._cond.wait(min(max(wait, 0.001), 0.05))

    def _write(self) -> None:
        try:
            while (chunk := self._next()) is not None:
                rate = self.shape.rate
                piece = len(chunk) if rate is None else max(1, int(rate * 0.02))  # 20 ms of the cap at a time
                sent = 0
                while sent < len(chunk):
                    if not self.link.passes(self.number, self.direction):
                        time.sleep(0.02)  # silenced mid-chunk: hold the rest
                        continue
                    part = chunk[sent : sent + piece]
                    self.dst.sendall(part)
                    sent += len(part)
                    self.bytes += len(part)
                    if rate is not None:
                        time.sleep(len(part) / rate)
                with self._cond:
                    if self._queue:  # close() may have emptied it meanwhile
                        self._queue.popleft()
                        self._held -= len(chunk)
                    self._cond.notify_all()
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        for s in (self.src, self.dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Link:
    """The proxy: listens on ``port`` (a free one) and connects each client to ``target_port`` of
    ``target_host`` (this host by default; a broker host's address in a namespace harness)."""

    def __init__(
        self,
        target_port: int,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        rate: float | None = None,
        seed: int = 0,
        start: bool = True,
        target_host: str = "127.0.0.1",
    ):
        self.target_port, self.target_host = target_port, target_host
        self.shapes = {"up": Shape(latency_s, jitter_s, rate), "down": Shape(latency_s, jitter_s, rate)}
        self.rng = random.Random(seed)
        self.port = _free_port()
        #: connections made so far (each client connection through the proxy counts once)
        self.connections = 0
        self.pipes: list[tuple[Pipe, Pipe]] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._up = threading.Event()
        #: connection numbers whose held directions are silent ("up", "down")
        self._frozen: dict[int, set[str]] = {}
        self._silent = False
        self._flapping: threading.Event | None = None
        self._corrupt_next: list[tuple[str, int, Callable[[bytes], bytes]]] = []
        if start:
            self.restore()

    # ---- faults ------------------------------------------------------------------
    def shape(
        self, latency_s: float = 0.0, jitter_s: float = 0.0, rate: float | None = None, direction: str = "both"
    ) -> None:
        """Latency (each way), uniform jitter and a bandwidth cap (bytes/s) from now on."""
        for d in ("up", "down") if direction == "both" else (direction,):
            self.shapes[d] = Shape(latency_s, jitter_s, rate)

    def freeze(self, both: bool = False) -> None:
        """Hold the broker's bytes (``both``: the client's too) on the connections open now; they
        stay up, as when a packet with a bogus length makes the peer wait for ever. Connections
        opened later pass."""
        held = {"up", "down"} if both else {"down"}
        with self._lock:
            for pipes in self.pipes:
                self._frozen.setdefault(pipes[0].number, set()).update(held)

    def silence(self) -> None:
        """A silent cut of the whole link: nothing passes either way, no connection is closed, new
        ones are accepted and hear nothing (a Wi-Fi that dropped, a half-open TCP connection)."""
        self._silent = True

    def heal(self) -> None:
        """The end of a silent cut or of flapping: held bytes flow again (TCP would resend them)."""
        if self._flapping is not None:
            self._flapping.set()
            self._flapping = None
        self._silent = False

    def flap(self, up_s: float, down_s: float) -> None:
        """Up for ``up_s``, silent for ``down_s``, in turn, until :meth:`heal`."""
        stop = self._flapping = threading.Event()

        def run() -> None:
            while not stop.is_set():
                if stop.wait(up_s):
                    break
                self._silent = True
                stop.wait(down_s)
                self._silent = False

        threading.Thread(target=run, daemon=True).start()

    def cut(self) -> None:
        """A hard cut: every connection through it is reset (what is buffered is lost, as in a real
        cut) and new ones are refused until :meth:`restore`."""
        self._up.clear()  # the listener closes within 0.1 s: reconnects are refused
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:  # SO_LINGER 0: close with a reset, dropping whatever is still buffered
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass
        time.sleep(0.3)

    def reset(self) -> None:
        """Reset every open connection (RST) but keep accepting new ones: a NAT or router restart."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    def corrupt(self, packet_type: int, rewrite: Callable[[bytes], bytes], direction: str = "down") -> None:
        """Rewrite the next packet of ``packet_type`` in ``direction`` on the connections open now
        (the newest first), or on the next connection when none is open."""
        with self._lock:
            for pipes in reversed(self.pipes):
                pipe = pipes[0] if direction == "up" else pipes[1]
                if not pipe._closed:
                    pipe.corrupter.arm(packet_type, rewrite)
                    return
            self._corrupt_next.append((direction, packet_type, rewrite))

    def passes(self, number: int, direction: str) -> bool:
        """Whether bytes of connection ``number`` go through in ``direction`` now."""
        return not self._silent and direction not in self._frozen.get(number, ())

    @property
    def rewritten(self) -> int:
        """Packets rewritten so far by :meth:`corrupt`."""
        return sum(p.corrupter.rewritten for pair in self.pipes for p in pair)

    # ---- the proxy -------------------------------------------------------------------
    def restore(self) -> None:
        """Listen (again) for clients."""
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(16)
        srv.settimeout(0.1)
        self._up.set()
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def close(self) -> None:
        """Stop listening and reset every connection."""
        self.heal()
        self.cut()

    def _accept(self, srv: socket.socket) -> None:
        with srv:
            while self._up.is_set():
                try:
                    down, _ = srv.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                try:
                    up = socket.socket()
                    up.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
                    up.settimeout(2)
                    up.connect((self.target_host, self.target_port))
                except OSError:
                    down.close()
                    continue
                self._join(down, up)

    def _join(self, down: socket.socket, up: socket.socket) -> None:
        for s in (down, up):
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        with self._lock:
            self.connections += 1
            number = self.connections
            pipes = (Pipe(self, down, up, "up", number), Pipe(self, up, down, "down", number))
            for direction, kind, rewrite in self._corrupt_next:
                pipes[0 if direction == "up" else 1].corrupter.arm(kind, rewrite)
            self._corrupt_next.clear()
            self.pipes.append(pipes)
            self._socks += [down, up]
        for p in pipes:
            p.start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
