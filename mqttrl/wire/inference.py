"""Central inference requests and replies: what a worker's client and a server agree on.

Both are sample batches (:mod:`.samples`), so they get the same bound checks:
a request holds one ``obs`` array plus a correlation id (and, where the client picks
the server by name, that server's name; the reply goes to the sender's own
``infer/<worker>/reply``, named by the request's topic, never by its payload); a reply holds the forward's outputs, the same id and the model version that
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


def request_spec(obs_shape: tuple[int, ...], dtype: str | np.dtype = "float32") -> SampleSpec:
    """What a request for observations of ``obs_shape`` and ``dtype`` must hold (the server
    validates against it). Observations travel in the dtype they reach the network in (uint8
    frames, bool grids, float32 vectors: see :func:`request_obs`), never widened to float32."""
    field = FieldSpec(np.dtype(dtype).name, tuple(int(d) for d in obs_shape))
    return SampleSpec({"obs": field}, max_transitions=MAX_REQUEST_ROWS)


def request_obs(obs: np.ndarray) -> np.ndarray:
    """Observations as a request carries them: their own dtype, except that floats are float32
    (what :func:`mqttrl.envs.rollout.obs_dtype` gives the network); contiguous."""
    obs = np.asarray(obs)
    return np.ascontiguousarray(obs, dtype=np.float32 if obs.dtype.kind == "f" else obs.dtype)


@attrs.frozen
class InferenceRequest:
    #: correlation id, echoed in the reply
    id: int
    #: the reply topic the sender named (informational: servers answer on the topic of the
    #: worker the request topic names, so no worker can direct answers to another)
    reply_to: str
    obs: np.ndarray
    #: the sender's sequence number, echoed in the reply's header
    seq: int
    #: the worker the header names (the server checks it is the one the topic names)
    worker: str = ""
    #: the server asked by name ("": any server of the pool)
    server: str = ""
    #: the model version the sender holds (a reply computed with an older one is asked again)
    model_version: int = 0
    #: the run the header names
    run: str = ""

    @property
    def count(self) -> int:
        return len(self.obs)

    def encode(self) -> bytes:
        """This request on the wire, what :func:`decode_request` reads back."""
        extra = {"id": self.id, "reply_to": self.reply_to, **({"server": self.server} if self.server else {})}
        return encode_batch(
            self.run, self.worker, self.seq, self.model_version, {"obs": request_obs(self.obs)}, extra=extra
        )


@attrs.frozen
class InferenceReply:
    id: int
    #: the model version the server computed the outputs with
    model_version: int
    outputs: Mapping[str, np.ndarray]
    #: the learner epoch of that model
    epoch: int = 0
    #: the request's sequence number, echoed; the run and the answering server the header names
    seq: int = 0
    run: str = ""
    server: str = ""

    @property
    def order(self) -> tuple[int, int]:
        return (self.epoch, self.model_version)

    def encode(self) -> bytes:
        """This reply on the wire, what :func:`decode_reply` reads back."""
        outputs = dict(self.outputs)
        return encode_batch(
            self.run, self.server, self.seq, self.model_version, outputs, extra={"id": self.id}, epoch=self.epoch
        )


def encode_request(
    run: str, worker: str, request_id: int, model_version: int, obs: np.ndarray, reply_to: str, server: str = ""
) -> bytes:
    """:meth:`InferenceRequest.encode` from its fields one by one (the record is the way to call it)."""
    return InferenceRequest(
        request_id, reply_to, obs, request_id, worker, server, model_version=model_version, run=run
    ).encode()


def decode_request(payload: bytes, spec: SampleSpec) -> InferenceRequest:
    """Decode and validate a request; raises :class:`Rejected` for anything malformed."""
    batch = decode_batch(payload, max_bytes=MAX_REQUEST_BYTES)
    spec.validate(batch.arrays, batch.count)
    rid, reply_to = batch.extra.get("id"), batch.extra.get("reply_to")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise Rejected("bad_header", f"request id {rid!r} is not an integer")
    if not isinstance(reply_to, str):
        raise Rejected("bad_header", f"reply_to {reply_to!r} is not a topic")
    server = batch.extra.get("server", "")
    if not isinstance(server, str):
        raise Rejected("bad_header", f"server {server!r} is not a name")
    return InferenceRequest(
        rid,
        reply_to,
        batch.arrays["obs"],
        batch.seq,
        batch.worker,
        server,
        model_version=batch.model_version,
        run=batch.run,
    )


def encode_reply(
    run: str,
    server: str,
    request: InferenceRequest,
    model_version: int,
    outputs: Mapping[str, np.ndarray],
    epoch: int = 0,
) -> bytes:
    """:meth:`InferenceReply.encode` of the reply to ``request`` (the record is the way to call it)."""
    return InferenceReply(request.id, model_version, outputs, epoch, seq=request.seq, run=run, server=server).encode()


def decode_reply(payload: bytes) -> InferenceReply:
    """Decode a reply; raises :class:`Rejected` for anything malformed. Arrays are views of ``payload``."""
    batch = decode_batch(payload)
    rid = batch.extra.get("id")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise Rejected("bad_header", f"reply id {rid!r} is not an integer")
    return InferenceReply(
        rid, batch.model_version, batch.arrays, batch.epoch, seq=batch.seq, run=batch.run, server=batch.worker
    )
