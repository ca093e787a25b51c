"""Wire formats: everything that crosses the broker is encoded and validated here.

No pickle and no ``torch.load``: sample batches are a versioned header plus raw
numpy buffers, weights are safetensors, control messages are JSON.
"""

from .control import StepRate, decode_episodes, decode_json, encode_json
from .errors import Rejected, RejectionCounter
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
from .weights import WeightsMessage, decode_weights, encode_weights

__all__ = [
    "COMPRESSIONS",
    "BatchHeader",
    "FieldSpec",
    "InferenceReply",
    "InferenceRequest",
    "Rejected",
    "RejectionCounter",
    "SampleBatch",
    "SampleSpec",
    "StepRate",
    "WeightsMessage",
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
