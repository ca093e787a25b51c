"""What a network's torso is, as plain data: the description that travels in the weights' ``info``.

numpy only, so a worker without torch can read it. A torso turns a batch of observations in
their native dtype (uint8, bool or float) into a batch of feature vectors; the algorithms put
their heads on top. The description is a JSON-able dict, for example::

    {"network": "nature_cnn", "obs_shape": [4, 84, 84], "layout": "chw", "obs_scale": 1/255,
     "convs": [[32, 8, 4], [64, 4, 2], [64, 3, 1]], "dense": [512]}

Both forwards (:mod:`.numpy_torso`, :mod:`.torch_torso`) are built from it alone, so a learner
and a worker that agree on it compute the same function. The torso's tensors are named as
the layers of one ``nn.Sequential`` of (layer, ReLU) pairs, convolutions first: layer ``i``
owns ``"{2i}.weight"`` and ``"{2i}.bias"``, so an MLP's names are today's ``trunk.0``,
``trunk.2``, ... under a ``trunk.`` prefix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

#: the network names a config may ask for
NETWORKS = ("auto", "mlp", "nature_cnn", "minatar_cnn")
#: where an image's channels are: "chw" (axis 0, torch's order), "hwc" (last axis, gymnasium's
#: pixel wrappers and MinAtar); "flat" is the MLP's (the observation is flattened)
LAYOUTS = ("auto", "chw", "hwc")

#: the convolutions (out channels, kernel, stride) and dense widths of each CNN
CNNS: dict[str, tuple[tuple[tuple[int, int, int], ...], tuple[int, ...]]] = {
    # Mnih et al. 2015 (Nature DQN), also CleanRL's ppo_atari
    "nature_cnn": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), (512,)),
    # Young & Tian 2019 (MinAtar)
    "minatar_cnn": (((16, 3, 1),), (128,)),
}

#: "auto" picks minatar_cnn for images with a side shorter than this, else nature_cnn
SMALL_IMAGE = 36


def input_dtype(space: gym.Space, who: str = "the network") -> np.dtype:
    """The dtype observations reach the network in: uint8 and bool stay (4x fewer bytes than
    float32 on the wire, in replay and on the way to a GPU), every float becomes float32.
    Raises TypeError for other dtypes (an int16 or int64 Box has no agreed scale)."""
    if not isinstance(space, gym.spaces.Box) or space.shape is None:
        raise TypeError(f"{who} needs a Box observation space, got {space!r}")
    dtype = np.dtype(space.dtype)
    if dtype == np.uint8 or dtype == np.bool_:
        return dtype
    if np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    raise TypeError(f"{who} needs observations of uint8, bool or float dtype, got a Box of {dtype}: {space!r}")


class ObsSize(int):
    """An observation's flattened size (an ``int``, as algorithms have long passed it around) that also
    keeps the observation's ``shape`` and the ``dtype`` it reaches the network in, so that code which
    only hands on the size can still describe an image torso from it."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __new__(cls, shape: Sequence[int], dtype: Any) -> ObsSize:
        shape = tuple(int(s) for s in shape)
        size = super().__new__(cls, math.prod(shape))
        size.shape, size.dtype = shape, np.dtype(dtype)
        return size

    @classmethod
    def of(cls, space: gym.Space, who: str = "the network") -> ObsSize:
        """The size of a Box space's observations; TypeError for dtypes networks do not take."""
        return cls(space.shape, input_dtype(space, who))

    def __reduce__(self):
        return ObsSize, (self.shape, self.dtype)


def obs_scale(dtype: np.dtype) -> float:
    """What the network multiplies its float input by: 1/255 for uint8 pixels, else 1."""
    return 1.0 / 255.0 if np.dtype(dtype) == np.uint8 else 1.0


def pick_layout(obs_shape: Sequence[int], layout: str = "auto") -> str:
    """ "chw" or "hwc" for an image (2-D shapes are one channel: "chw"). "auto": CHW when the first
    axis is no longer than the last ((4, 84, 84): a frame stack), else HWC ((10, 10, 4), (84, 84, 3))."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: allowed values are {', '.join(map(repr, LAYOUTS))}")
    shape = tuple(obs_shape)
    if len(shape) not in (2, 3):
        raise ValueError(f"an image has 2 or 3 axes, the observation shape is {shape}")
    if len(shape) == 2 or layout != "auto":
        return "chw" if len(shape) == 2 else layout
    return "chw" if shape[0] <= shape[-1] else "hwc"


def image_chw(obs_shape: Sequence[int], layout: str) -> tuple[int, int, int]:
    """(channels, height, width) of an image observation of ``layout``."""
    shape = tuple(int(s) for s in obs_shape)
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    return shape if layout == "chw" else (shape[2], shape[0], shape[1])


def pick_network(network: str, obs_shape: Sequence[int], layout: str = "auto") -> str:
    """The network "auto" stands for: mlp unless the observation is an image (2 or 3 axes);
    minatar_cnn for images with a side under ``SMALL_IMAGE`` pixels, else nature_cnn. An image
    too small for even minatar_cnn's 3x3 convolution gets the mlp."""
    if network not in NETWORKS:
        raise ValueError(f"network={network!r}: allowed values are {', '.join(map(repr, NETWORKS))}")
    if network != "auto":
        return network
    if len(obs_shape) not in (2, 3):
        return "mlp"
    _, h, w = image_chw(obs_shape, pick_layout(obs_shape, layout))
    if min(h, w) < 3:
        return "mlp"
    return "minatar_cnn" if min(h, w) < SMALL_IMAGE else "nature_cnn"


def describe(
    network: str, obs_shape: Sequence[int], dtype: Any, hidden: Sequence[int] = (), layout: str = "auto"
) -> dict[str, Any]:
    """The torso ``network`` builds for observations of ``obs_shape`` and ``dtype``; ``hidden`` are
    the mlp's dense widths (the CNNs have theirs). Raises ValueError for an unknown name or an
    image too small for the CNN's convolutions."""
    shape = [int(s) for s in obs_shape]
    name = pick_network(network, shape, layout)
    if name == "mlp":
        torso = {"network": "mlp", "obs_shape": shape, "layout": "flat", "obs_scale": obs_scale(dtype), "convs": []}
        torso["dense"] = [int(h) for h in hidden]
    else:
        if len(shape) not in (2, 3):
            raise ValueError(
                f"{name} needs an image observation (2 or 3 axes), the observation shape is {tuple(shape)}"
            )
        convs, dense = CNNS[name]
        torso = {
            "network": name,
            "obs_shape": shape,
            "layout": pick_layout(shape, layout),
            "obs_scale": obs_scale(dtype),
            "convs": [list(c) for c in convs],
            "dense": list(dense),
        }
    return validate(torso)


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise ValueError(f"torso {what} must be a list of positive integers, got {value!r}")
    return [int(v) for v in value]


def validate(torso: Mapping[str, Any]) -> dict[str, Any]:
    """A checked, normalised copy of a torso description (e.g. one read from received weights'
    ``info``); raises ValueError for missing or malformed keys, or convolutions that do not fit."""
    keys = {"network", "obs_shape", "layout", "obs_scale", "convs", "dense"}
    if not isinstance(torso, Mapping) or set(torso) != keys:
        got = sorted(torso) if isinstance(torso, Mapping) else type(torso).__name__
        raise ValueError(f"a torso description has the keys {sorted(keys)}, got {got}")
    network, layout, scale = torso["network"], torso["layout"], torso["obs_scale"]
    if network not in NETWORKS[1:]:
        raise ValueError(f"torso network {network!r} is not one of {', '.join(NETWORKS[1:])}")
    shape = _ints(torso["obs_shape"], "obs_shape")
    if not shape:
        raise ValueError("torso obs_shape is empty")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"torso obs_scale must be a positive number, got {scale!r}")
    if not isinstance(torso["convs"], (list, tuple)):
        raise ValueError(f"torso convs must be a list of [out, kernel, stride], got {torso['convs']!r}")
    convs = [_ints(c, "conv") for c in torso["convs"]]
    if any(len(c) != 3 for c in convs):
        raise ValueError(f"each torso conv is [out channels, kernel, stride], got {torso['convs']!r}")
    dense = _ints(torso["dense"], "dense")
    if layout == "flat":
        if convs:
            raise ValueError("a flat (mlp) torso has no convolutions")
    elif layout in ("chw", "hwc"):
        if len(shape) not in (2, 3) or (len(shape) == 2 and layout != "chw"):
            raise ValueError(f"a {layout} torso needs an image shape (2 or 3 axes, 2 axes: chw), got {shape}")
        if not convs:
            raise ValueError(f"a {layout} (CNN) torso needs at least one convolution")
    else:
        raise ValueError(f"torso layout {layout!r} is not one of 'flat', 'chw', 'hwc'")
    out = {
        "network": str(network),
        "obs_shape": shape,
        "layout": str(layout),
        "obs_scale": float(scale),
        "convs": convs,
        "dense": dense,
    }
    conv_shapes(out)  # raises if the image is too small
    return out


def conv_shapes(torso: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(channels, height, width) of the image before the first and after each convolution;
    raises ValueError naming the sizes when a convolution does not fit."""
    if torso["layout"] == "flat":
        return []
    c, h, w = image_chw(torso["obs_shape"], torso["layout"])
    shapes = [(c, h, w)]
    for i, (out, k, s) in enumerate(torso["convs"]):
        if h < k or w < k:
            raise ValueError(
                f"{torso['network']}: an observation of shape {tuple(torso['obs_shape'])} ({torso['layout']}) is "
                f"{shapes[0][1]}x{shapes[0][2]} pixels, too small for its convolutions: conv {i} "
                f"({k}x{k}, stride {s}) gets a {h}x{w} input; use a larger image or another network"
            )
        c, h, w = out, (h - k) // s + 1, (w - k) // s + 1
        shapes.append((c, h, w))
    return shapes


def flat_size(torso: Mapping[str, Any]) -> int:
    """Width of the flattened input to the first dense layer (or to the heads)."""
    if torso["layout"] == "flat":
        return int(np.prod(torso["obs_shape"], dtype=np.int64))
    return math.prod(conv_shapes(torso)[-1])


def out_size(torso: Mapping[str, Any]) -> int:
    """Width of the torso's output: what the heads take in."""
    return int(torso["dense"][-1]) if torso["dense"] else flat_size(torso)


def weight_shapes(torso: Mapping[str, Any], prefix: str = "", noisy: bool = False) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the torso's tensors (torch's layouts: conv (out, in, kh, kw), dense
    (out, in)), layer ``i`` named ``f"{prefix}{2i}.weight"`` / ``.bias``. ``noisy``: the dense layers
    are factorised Gaussian noisy layers, ``.weight_mu``, ``.weight_sigma``, ``.bias_mu``, ``.bias_sigma``
    (the convolutions stay plain)."""
    shapes: dict[str, tuple[int, ...]] = {}
    layer = 0
    if torso["layout"] != "flat":
        for (cin, _, _), (out, k, _) in zip(conv_shapes(torso), torso["convs"]):
            shapes[f"{prefix}{2 * layer}.weight"] = (out, cin, k, k)
            shapes[f"{prefix}{2 * layer}.bias"] = (out,)
            layer += 1
    width = flat_size(torso)
    for h in torso["dense"]:
        for kind in ("_mu", "_sigma") if noisy else ("",):
            shapes[f"{prefix}{2 * layer}.weight{kind}"] = (int(h), width)
            shapes[f"{prefix}{2 * layer}.bias{kind}"] = (int(h),)
        width = int(h)
        layer += 1
    return shapes
