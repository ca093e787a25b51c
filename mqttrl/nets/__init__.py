"""Network torsos shared by the algorithms: MLP, Nature CNN, MinAtar CNN.

* :mod:`.spec`: the torso as plain data (name, observation shape and layout, scale, layers),
  the JSON-able description that travels in the weights' ``info``, and its tensors' names and shapes;
* :mod:`.numpy_torso`: its forward in numpy (workers without torch);
* :mod:`.torch_torso`: its ``nn.Module`` (learners, torch forwards); imports torch, so it is
  not imported here.

Observations reach a torso in their native dtype (uint8, bool, float32); it converts to float
itself, so images stay small on the wire, in replay and on the way to a GPU.
"""

from __future__ import annotations

from .numpy_torso import NumpyTorso, factorised_noise, initial_weights, orthogonal
from .spec import (
    LAYOUTS,
    NETWORKS,
    ObsSize,
    conv_shapes,
    describe,
    flat_size,
    input_dtype,
    obs_scale,
    out_size,
    pick_layout,
    pick_network,
    validate,
    weight_shapes,
)

__all__ = [
    "LAYOUTS",
    "NETWORKS",
    "NumpyTorso",
    "ObsSize",
    "conv_shapes",
    "describe",
    "factorised_noise",
    "flat_size",
    "initial_weights",
    "input_dtype",
    "obs_scale",
    "orthogonal",
    "out_size",
    "pick_layout",
    "pick_network",
    "validate",
    "weight_shapes",
]
