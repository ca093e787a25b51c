"""Wire formats: everything that crosses the broker is encoded and validated here.

No pickle and no ``torch.load``: sample batches are a versioned header plus raw
numpy buffers, weights are safetensors, control messages are JSON.
"""

from .errors import Rejected, RejectionCounter
from .samples import FieldSpec, SampleBatch, SampleSpec, decode_batch, encode_batch
from .weights import WeightsMessage, decode_weights, encode_weights
from .control import StepRate, decode_episodes, decode_json, encode_json

__all__ = [
    "Rejected",
    "RejectionCounter",
    "FieldSpec",
    "SampleBatch",
    "SampleSpec",
    "decode_batch",
    "encode_batch",
    "WeightsMessage",
    "decode_weights",
    "encode_weights",
    "StepRate",
    "decode_episodes",
    "decode_json",
    "encode_json",
]
