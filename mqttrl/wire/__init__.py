"""Wire formats: everything that crosses the broker is encoded and validated here.

No pickle and no ``torch.load``: sample batches are a versioned header plus raw
numpy buffers, weights are safetensors, control messages are JSON, each one a typed record
(:mod:`.record`; the catalogue of topics and records is :mod:`.catalog`).
"""

from .commands import Quicksave, QuicksaveReply
from .control import decode_json, encode_json
from .episodes import EpisodeReport, EpisodeStats, decode_episodes
from .errors import Rejected, RejectionCounter
from .evaluation import Evaluation
from .flow import Flow
from .heartbeat import GameReport, Heartbeat, StepRate
from .inference import (
    InferenceReply,
    InferenceRequest,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    request_obs,
    request_spec,
)
from .metrics import InferenceMetrics, LearnerMetrics
from .model_ref import NO_MODEL, ModelRef
from .samples import (
    COMPRESSIONS,
    BatchHeader,
    FieldSpec,
    SampleBatch,
    SampleSpec,
    check_compression,
    decode_batch,
    decode_header,
    encode_batch,
)
from .states import InferenceState, LearnerState, WorkerState
from .weights import WeightsMessage, decode_weights, encode_weights

__all__ = [
    "COMPRESSIONS",
    "NO_MODEL",
    "BatchHeader",
    "EpisodeReport",
    "EpisodeStats",
    "Evaluation",
    "FieldSpec",
    "Flow",
    "GameReport",
    "Heartbeat",
    "InferenceMetrics",
    "InferenceReply",
    "InferenceRequest",
    "InferenceState",
    "LearnerMetrics",
    "LearnerState",
    "ModelRef",
    "Quicksave",
    "QuicksaveReply",
    "Rejected",
    "RejectionCounter",
    "SampleBatch",
    "SampleSpec",
    "StepRate",
    "WeightsMessage",
    "WorkerState",
    "check_compression",
    "decode_batch",
    "decode_episodes",
    "decode_header",
    "decode_json",
    "decode_reply",
    "decode_request",
    "decode_weights",
    "encode_batch",
    "encode_json",
    "encode_reply",
    "encode_request",
    "encode_weights",
    "request_obs",
    "request_spec",
]
