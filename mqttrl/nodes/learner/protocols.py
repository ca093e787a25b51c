"""Workers of another wire protocol version: refused, and said once per worker.

A worker of another mqttrl version can never be served (its batches, or this learner's weights,
would be refused one by one), so its birth message, heartbeats and batches are refused with
reason ``protocol_version``, counted by the dispatcher like every refusal, and the learner says
so in one WARNING line per worker, with both versions, instead of a later "silent; marked offline".
"""

from __future__ import annotations

import logging

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.wire import Rejected, WorkerState

log = logging.getLogger("mqttrl.learner")

#: workers of another protocol remembered (their later messages are refused without a new line)
MAX_REMEMBERED = 4096


class OtherProtocols:
    """The workers known to speak another protocol, by name: their protocol and mqttrl version.

    Only a birth message makes a worker's later messages refused unread (:meth:`refuse_known`):
    one batch of another protocol refuses that batch (and is said once), never the sender's next
    ones, which may be of this version (a bad batch is one bad message, not a verdict on its sender).
    """

    def __init__(self) -> None:
        #: the workers whose birth said they speak another protocol (their messages refused unread)
        self.workers: dict[str, tuple[int, str | None]] = {}
        #: (worker, protocol) already said in a WARNING, with the mqttrl version it named
        self._said: dict[tuple[str, int], str | None] = {}

    def check(self, worker: str, protocol: int | None, mqttrl: str | None = None) -> None:
        """Raise :class:`Rejected` when ``worker`` speaks another ``protocol`` (None: one that
        names none, an old sender: taken). The first time per worker and version, one WARNING."""
        if protocol is None or protocol == PROTOCOL_VERSION:
            return
        said = (worker, protocol)
        mqttrl = mqttrl or self._said.get(said)
        line = mismatch_line(worker, protocol, mqttrl)
        if said not in self._said:
            log.warning("%s", line)
        self._said.pop(said, None)
        self._said[said] = mqttrl
        while len(self._said) > MAX_REMEMBERED:
            del self._said[next(iter(self._said))]
        raise Rejected("protocol_version", line, quiet=True)

    def check_state(self, worker: str, st: WorkerState) -> None:
        """A worker's birth names its protocol: another one is refused (and remembered), this one
        clears the name. Its offline state is refused when its birth was."""
        if not st.online:
            self.refuse_known(worker)
        elif st.protocol is None or st.protocol == PROTOCOL_VERSION:
            self.workers.pop(worker, None)
        else:
            self.workers.pop(worker, None)
            self.workers[worker] = (st.protocol, st.mqttrl)
            while len(self.workers) > MAX_REMEMBERED:
                del self.workers[next(iter(self.workers))]
            self.check(worker, st.protocol, st.mqttrl)

    def refuse_known(self, worker: str) -> None:
        """Refuse (quietly) a message of a worker whose birth said it speaks another protocol."""
        known = self.workers.get(worker)
        if known is not None:
            raise Rejected("protocol_version", mismatch_line(worker, *known), quiet=True)


def mismatch_line(worker: str, protocol: int, mqttrl: str | None) -> str:
    """The one line that names the worker and both sides' versions, and what to do."""
    theirs = f"protocol {protocol}" + (f" (mqttrl {mqttrl})" if mqttrl else "")
    return (
        f"worker {worker} speaks {theirs}, this learner protocol {PROTOCOL_VERSION} (mqttrl {__version__}): "
        "its messages are refused; install the learner's mqttrl version on that worker's host"
    )
