"""The worker's newest weights message, decoded off the game loop when it is big.

Decoding verifies a checksum over every byte and checks every float: ~25 ms for a 6.6 MB
Nature CNN on a busy machine, a frame of a 30 Hz game. A message of at least
``thread_above`` bytes is handed to one decoder thread (hashlib and numpy release the GIL
on big buffers, so the game loop goes on meanwhile); a smaller one is decoded at once, where
a thread would cost more than it saves. Only the newest message counts: one that waits for
the decoder is replaced by a newer one (counted in :attr:`WeightsInbox.superseded`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mqttrl.wire import Rejected, WeightsMessage

#: weights messages of at least this many bytes are decoded on the decoder thread
THREAD_ABOVE = 1 << 20

Decoded = WeightsMessage | Rejected


class WeightsInbox:
    def __init__(self, decode: Callable[[bytes], WeightsMessage], thread_above: int = THREAD_ABOVE):
        self._decode = decode
        self.thread_above = thread_above
        self._cond = threading.Condition()
        self._raw: bytes | None = None
        self._done: list[Decoded] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        #: messages replaced by a newer one before they were decoded
        self.superseded = 0

    def put(self, payload: bytes) -> None:
        """Take a weights message: decoded now when small, else queued for the decoder thread."""
        if len(payload) < self.thread_above:
            self._finish(self._decode_one(payload))
            return
        with self._cond:
            if self._raw is not None:
                self.superseded += 1
            self._raw = payload
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="weights-decoder", daemon=True)
                self._thread.start()
            self._cond.notify()

    def take(self) -> list[Decoded]:
        """What was decoded since the last call, oldest first: models, or refusals to count."""
        with self._cond:
            done, self._done = self._done, []
        return done

    @property
    def busy(self) -> bool:
        """A message waits for the decoder or is being decoded."""
        with self._cond:
            return self._raw is not None or self._decoding

    _decoding = False

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _decode_one(self, payload: bytes) -> Decoded:
        try:
            return self._decode(payload)
        except Rejected as r:
            return r

    def _finish(self, result: Decoded) -> None:
        with self._cond:
            self._done.append(result)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._raw is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                payload, self._raw = self._raw, None
                self._decoding = True
            result = self._decode_one(payload)
            with self._cond:
                self._done.append(result)
                self._decoding = False
