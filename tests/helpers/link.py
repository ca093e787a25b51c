"""A TCP link between a client and a broker that a test can freeze: the faults of a game PC's
Wi-Fi or home uplink, made on the loopback.

:meth:`FreezableLink.freeze` stops delivering the broker's bytes to the connections open now
(they are held, the connection stays up, as when a packet with a bogus length makes the
peer wait for ever); connections opened later pass normally.
"""

from __future__ import annotations

import socket
import threading


class FreezableLink:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self.connections = 0
        self._frozen: set[int] = set()  # connection numbers whose broker->client bytes are held
        self._live: list[int] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        """Hold every byte the broker sends on the connections open now."""
        with self._lock:
            self._frozen.update(self._live)

    def close(self) -> None:
        self._srv.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._srv.accept()
                up = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                return
            up.settimeout(None)
            with self._lock:
                self.connections += 1
                number = self.connections
                self._live.append(number)
                self._socks += [down, up]
            threading.Thread(target=self._pump, args=(down, up, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, number), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, frozen_as: int | None) -> None:
        """Copy ``src`` to ``dst``; bytes of a frozen connection's broker side are read and held."""
        try:
            while data := src.recv(1 << 16):
                if frozen_as is not None and frozen_as in self._frozen:
                    continue
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
