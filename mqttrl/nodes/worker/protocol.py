"""A run served in another wire protocol version: the worker ends in one line, naming both.

The retained config names the learner's protocol (``RunConfig.to_dict``). A worker of another
version can never be served: the learner's weights would be refused one by one here, and this
worker's batches there, while the worker waited for a model "is a learner running?". So a config
of another protocol is refused (reason ``protocol_version``) and the worker stops with
:class:`ProtocolMismatch`, a config error: one line, exit 2. Pure: the shell feeds it the config
and learner-state messages before its core gets them, and asks it after each message.
"""

from __future__ import annotations

from collections.abc import Callable

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import ConfigError
from mqttrl.wire import LearnerState, Rejected, decode_json


class ProtocolMismatch(ConfigError):
    """The run's learner speaks another wire protocol than this worker (exit 2, one line)."""


class ProtocolCheck:
    """What the config and the learner's state say of the learner's protocol and mqttrl version."""

    def __init__(self, run: str):
        self.run = run
        #: the protocol the run's config names, when it is not this worker's (None: the same, or unnamed)
        self.other: int | None = None
        #: the learner's mqttrl version, from its state (None: not heard yet)
        self.learner_mqttrl: str | None = None

    def config(self, handler: Callable[[bytes], None]) -> Callable[[bytes], None]:
        """``handler`` (the core's ``on_config``) behind the check: a config of another protocol is
        refused, counted and never parsed (its keys may mean something else)."""

        def checked(payload: bytes) -> None:
            protocol = decode_json(payload).get("protocol") if payload else None
            if isinstance(protocol, int) and not isinstance(protocol, bool) and protocol != PROTOCOL_VERSION:
                self.other = protocol
                raise Rejected("protocol_version", self.line(), quiet=True)
            handler(payload)

        return checked

    def learner_state(
        self, handler: Callable[[bytes, float], None], clock: Callable[[], float]
    ) -> Callable[[str, bytes], None]:
        """``handler`` (the core's ``on_learner_state``, fed ``clock()``) as the dispatcher's, noting the
        learner's mqttrl version for the line."""

        def noted(_name: str, payload: bytes) -> None:
            if payload:
                self.learner_mqttrl = LearnerState.decode(payload).mqttrl or self.learner_mqttrl
            handler(payload, clock())

        return noted

    def raise_if_other(self) -> None:
        """:class:`ProtocolMismatch` once the run's config named another protocol."""
        if self.other is not None:
            raise ProtocolMismatch(self.line())

    def line(self) -> str:
        theirs = f"protocol {self.other}" + (f" (mqttrl {self.learner_mqttrl})" if self.learner_mqttrl else "")
        return (
            f"the learner of run {self.run!r} speaks {theirs}, this worker protocol {PROTOCOL_VERSION} "
            f"(mqttrl {__version__}): it can never be served; install the learner's mqttrl version on this host"
        )
