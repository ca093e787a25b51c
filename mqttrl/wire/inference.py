"""Central inference requests and replies: what a worker's client and a server agree on.

Both are sample batches (:mod:`.samples`), so they get the same bound checks:
a request holds one ``obs`` array plus a correlation id and the topic to answer
on; a reply holds the forward's outputs, the same id and the model version that
computed them (a worker asks again when that version is older than its own).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from .errors import Rejected
from .samples import FieldSpec, SampleSpec, decode_batch, encode_batch

#: a request is one vector step of observations; bigger ones are refused before decoding
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_REQUEST_ROWS = 4096


def request_spec(obs_shape: tuple[int, ...]) -> SampleSpec:
    """What a request for observations of ``obs_shape`` must hold (the server validates against it)."""
    return SampleSpec({"obs": FieldSpec("float32", tuple(int(d) for d in obs_shape))}, max_transitions=MAX_REQUEST_ROWS)


@attrs.frozen
class InferenceRequest:
    #: correlation id, echoed in the reply
    id: int
    #: the topic the reply goes to (the server checks it is an inference reply topic of its run)
    reply_to: str
    obs: np.ndarray
    #: the sender's sequence number, echoed in the reply's header
    seq: int

    @property
    def count(self) -> int:
        return len(self.obs)


@attrs.frozen
class InferenceReply:
    id: int
    #: the model version the server computed the outputs with
    model_version: int
    outputs: Mapping[str, np.ndarray]
    #: the learner epoch of that model
    epoch: int = 0

    @property
    def order(self) -> tuple[int, int]:
        return (self.epoch, self.model_version)


def encode_request(run: str, worker: str, request_id: int, model_version: int, obs: np.ndarray, reply_to: str) -> bytes:
    return encode_batch(
        run, worker, request_id, model_version, {"obs": obs}, extra={"id": request_id, "reply_to": reply_to}
    )


def decode_request(payload: bytes, spec: SampleSpec) -> InferenceRequest:
    """Decode and validate a request; raises :class:`Rejected` for anything malformed."""
    batch = decode_batch(payload, max_bytes=MAX_REQUEST_BYTES)
    spec.validate(batch.arrays, batch.count)
    rid, reply_to = batch.extra.get("id"), batch.extra.get("reply_to")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise Rejected("bad_header", f"request id {rid!r} is not an integer")
    if not isinstance(reply_to, str):
        raise Rejected("bad_header", f"reply_to {reply_to!r} is not a topic")
    return InferenceRequest(rid, reply_to, batch.arrays["obs"], batch.seq)


def encode_reply(
    run: str,
    server: str,
    request: InferenceRequest,
    model_version: int,
    outputs: Mapping[str, np.ndarray],
    epoch: int = 0,
) -> bytes:
    return encode_batch(run, server, request.seq, model_version, dict(outputs), extra={"id": request.id}, epoch=epoch)


def decode_reply(payload: bytes) -> InferenceReply:
    """Decode a reply; raises :class:`Rejected` for anything malformed. Arrays are views of ``payload``."""
    batch = decode_batch(payload)
    rid = batch.extra.get("id")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise Rejected("bad_header", f"reply id {rid!r} is not an integer")
    return InferenceReply(rid, batch.model_version, batch.arrays, batch.epoch)
