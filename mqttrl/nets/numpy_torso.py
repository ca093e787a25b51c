"""A torso's forward in numpy (float32): what a worker without torch acts with.

Convolutions are im2col: ``sliding_window_view`` gathers every patch into one matrix and one
matmul per layer does the rest. Weights are re-laid out once, at load: conv kernels to the
patch order, the first layer pre-multiplied by ``obs_scale`` (no pass over the input to scale
it), the first dense layer's columns permuted from torch's (C, H, W) flatten order to the
(H, W, C) order the activations have here. Equal to :mod:`.torch_torso` to float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .spec import conv_shapes, validate, weight_shapes


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """Like ``torch.nn.init.orthogonal_`` on a (rows, cols) matrix (QR of a Gaussian matrix, signs
    fixed by R's diagonal); a conv kernel is its (out, in * kh * kw) matrix."""
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    return gain * (q if rows >= cols else q.T)


def initial_weights(
    torso: Mapping[str, Any], rng: np.random.Generator, prefix: str = "", gain: float | None = None
) -> dict[str, np.ndarray]:
    """Fresh float32 torso tensors (what an actor acts with before the first model version): with
    ``gain`` orthogonal with that gain and zero biases, else torch's default init (weights and
    biases uniform in +-1/sqrt(fan_in)). The values differ from a torch-made network's."""
    tensors: dict[str, np.ndarray] = {}
    for name, shape in weight_shapes(torso, prefix).items():
        if not name.endswith(".weight"):
            continue
        base = name[: -len(".weight")]
        fan_in = math.prod(shape[1:])
        if gain is not None:
            w, b = orthogonal(rng, shape[0], fan_in, gain).reshape(shape), np.zeros(shape[0])
        else:
            bound = 1.0 / math.sqrt(fan_in)
            w, b = rng.uniform(-bound, bound, shape), rng.uniform(-bound, bound, shape[0])
        tensors[f"{base}.weight"] = w.astype(np.float32)
        tensors[f"{base}.bias"] = b.astype(np.float32)
    return tensors


def _patches(x: np.ndarray, k: int, s: int, chw: bool) -> tuple[np.ndarray, tuple[int, int, int]]:
    """im2col: (N * Ho * Wo, C * k * k) for a CHW batch (patch order C, kh, kw), (N * Ho * Wo, k * k * C)
    for an HWC batch (kh, kw, C), so the innermost copied run is contiguous in both; and (N, Ho, Wo)."""
    if chw:
        v = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s]  # N, C, Ho, Wo, kh, kw
        n, c, ho, wo = v.shape[:4]
        return v.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * k * k), (n, ho, wo)
    v = sliding_window_view(x, (k, k), axis=(1, 2))[:, ::s, ::s]  # N, Ho, Wo, C, kh, kw
    n, ho, wo, c = v.shape[:4]
    return v.transpose(0, 1, 2, 4, 5, 3).reshape(n * ho * wo, k * k * c), (n, ho, wo)


def _space_to_depth(x: np.ndarray, k: int, s: int, chw: bool) -> np.ndarray:
    """An HWC batch of s x s blocks (block content (C, s, s) for CHW input, (s, s, C) for HWC), cropped
    to what a k x k / s convolution reads: that convolution is then a (k/s) x (k/s) / 1 one over it,
    whose patches copy runs of C * s * s values instead of k (2x faster on Atari frames)."""
    if chw:
        n, c, h, w = x.shape
    else:
        n, h, w, c = x.shape
    bh, bw = (h - k) // s + k // s, (w - k) // s + k // s
    if chw:
        b = x[:, :, : bh * s, : bw * s].reshape(n, c, bh, s, bw, s).transpose(0, 2, 4, 1, 3, 5)
    else:
        b = x[:, : bh * s, : bw * s].reshape(n, bh, s, bw, s, c).transpose(0, 1, 3, 2, 4, 5)
    return b.reshape(n, bh, bw, c * s * s)


def _first_conv_weight(w: np.ndarray, k: int, s: int, chw: bool, s2d: bool) -> np.ndarray:
    """The first conv's kernel (out, in, kh, kw) in the order of its patches' columns."""
    out, c = w.shape[:2]
    if s2d:  # kh = s * bi + ri: (out, bi, bj, C, ri, rj) for CHW blocks, (out, bi, bj, ri, rj, C) for HWC
        w = w.reshape(out, c, k // s, s, k // s, s)
        return w.transpose((0, 2, 4, 1, 3, 5) if chw else (0, 2, 4, 3, 5, 1)).reshape(out, -1)
    return (w if chw else w.transpose(0, 2, 3, 1)).reshape(out, -1)


class NumpyTorso:
    """The torso ``torso`` describes, from the tensors ``prefix + "{2i}.weight"`` / ``".bias"`` of
    ``tensors`` (torch's layouts); ``torso(obs)`` maps a batch of observations in their native dtype
    to float32 features (N, out_size). Raises ValueError at construction if a tensor is missing or
    has the wrong shape (other names in ``tensors`` are the caller's business)."""

    def __init__(self, torso: Mapping[str, Any], tensors: Mapping[str, np.ndarray], prefix: str = ""):
        self.torso = t = validate(torso)
        shapes = weight_shapes(t, prefix)
        missing = sorted(set(shapes) - set(tensors))
        if missing:
            raise ValueError(f"weights do not fit the network: missing {missing}")
        arrays = {}
        for name, shape in shapes.items():
            arr = np.asarray(tensors[name])
            if tuple(arr.shape) != shape:
                raise ValueError(f"weight {name} has shape {arr.shape}, the network needs {shape}")
            arrays[name] = np.asarray(arr, dtype=np.float32)
        self.obs_shape = tuple(t["obs_shape"])
        self._size = math.prod(self.obs_shape)
        self.layout = t["layout"]
        scale = np.float32(t["obs_scale"])
        #: (kernel, stride, W (patch, out), b) per convolution
        self.convs: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        #: (W^T (in, out), b) per dense layer
        self.dense: list[tuple[np.ndarray, np.ndarray]] = []
        layer = 0
        #: the first convolution reads the input as s x s blocks (see _space_to_depth)
        self._s2d = bool(t["convs"]) and t["convs"][0][2] > 1 and t["convs"][0][1] % t["convs"][0][2] == 0
        for i, (_, k, s) in enumerate(t["convs"]):
            w = arrays[f"{prefix}{2 * layer}.weight"]  # out, in, kh, kw
            if i == 0:
                w = _first_conv_weight(w, k, s, self.layout == "chw", self._s2d) * scale
                k, s = (k // s, 1) if self._s2d else (k, s)
            else:
                w = w.transpose(0, 2, 3, 1).reshape(len(w), -1)  # out, kh, kw, in: the HWC patch order
            self.convs.append((k, s, np.ascontiguousarray(w.T, np.float32), arrays[f"{prefix}{2 * layer}.bias"].copy()))
            layer += 1
        for j in range(len(t["dense"])):
            w = arrays[f"{prefix}{2 * layer}.weight"]  # out, in
            if j == 0 and self.convs:  # torch flattens (C, H, W); the activations here are (H, W, C)
                c, h, wd = conv_shapes(t)[-1]
                w = w.reshape(len(w), c, h, wd).transpose(0, 2, 3, 1).reshape(len(w), -1)
            elif j == 0:
                w = w * scale
            self.dense.append((np.ascontiguousarray(w.T, np.float32), arrays[f"{prefix}{2 * layer}.bias"].copy()))
            layer += 1
        #: an mlp without dense layers passes the scaled observation through
        self._scale_out = scale if not self.convs and not self.dense else None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        n = len(obs)
        if tuple(obs.shape[1:]) != self.obs_shape and (self.convs or math.prod(obs.shape[1:]) != self._size):
            raise ValueError(f"observations of shape {obs.shape[1:]}, the network takes {self.obs_shape}")
        if self.convs:
            x = obs.reshape(n, 1, *self.obs_shape) if len(self.obs_shape) == 2 else obs
            chw = self.layout == "chw"
            x = np.asarray(x, dtype=np.float32)  # converting first is cheaper than the (larger) patches
            if self._s2d:
                x, chw = _space_to_depth(x, *self.torso["convs"][0][1:], chw), False
            for k, s, w, b in self.convs:
                cols, (n, ho, wo) = _patches(x, k, s, chw)
                y = cols @ w
                y += b
                np.maximum(y, 0.0, out=y)
                x, chw = y.reshape(n, ho, wo, w.shape[1]), False
            x = x.reshape(n, math.prod(x.shape[1:]))  # (an empty batch has no -1 to infer)
        else:
            x = np.asarray(obs.reshape(n, self._size), dtype=np.float32)
            if self._scale_out is not None and self._scale_out != 1:
                x = x * self._scale_out
        for w, b in self.dense:
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        return x
