"""A torso's forward in numpy (float32): what a worker without torch acts with.

Convolutions are im2col: ``sliding_window_view`` gathers every patch into one matrix and one
matmul per layer does the rest. Weights are re-laid out once, at load: conv kernels to the
patch order, the first layer pre-multiplied by ``obs_scale`` (no pass over the input to scale
it), the first dense layer's columns permuted from torch's (C, H, W) flatten order to the
(H, W, C) order the activations have here. Equal to :mod:`.torch_torso` to float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
    torso: Mapping[str, Any],
    rng: np.random.Generator,
    prefix: str = "",
    gain: float | None = None,
    noisy_sigma0: float | None = None,
) -> dict[str, np.ndarray]:
    """Fresh float32 torso tensors (what an actor acts with before the first model version): with
    ``gain`` orthogonal with that gain and zero biases, else torch's default init (weights and
    biases uniform in +-1/sqrt(fan_in)). The values differ from a torch-made network's. With
    ``noisy_sigma0`` the dense layers are noisy (:func:`.spec.weight_shapes`): mu as a plain layer's,
    sigma = noisy_sigma0 / sqrt(fan_in) (Fortunato et al.'s factorised initialisation)."""
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
        if noisy_sigma0 is not None and len(shape) == 2:
            sigma = noisy_sigma0 / math.sqrt(fan_in)
            tensors[f"{base}.weight_mu"], tensors[f"{base}.bias_mu"] = w.astype(np.float32), b.astype(np.float32)
            tensors[f"{base}.weight_sigma"] = np.full(shape, sigma, np.float32)
            tensors[f"{base}.bias_sigma"] = np.full(shape[0], sigma, np.float32)
            continue
        tensors[f"{base}.weight"] = w.astype(np.float32)
        tensors[f"{base}.bias"] = b.astype(np.float32)
    return tensors


def factorised_noise(
    rng: np.random.Generator, n_in: int, n_out: int, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(eps_in, eps_out) = (f(e_in), f(e_out)), f(x) = sign(x) sqrt|x| of standard normals, float32: a
    noisy layer's weight noise is outer(eps_out, eps_in), its bias noise eps_out. ``rows``: one draw
    per row, shapes (rows, n_in) and (rows, n_out); else one draw, (n_in,) and (n_out,)."""
    lead = () if rows is None else (rows,)
    e_in, e_out = rng.standard_normal((*lead, n_in)), rng.standard_normal((*lead, n_out))
    return (
        (np.sign(e_in) * np.sqrt(np.abs(e_in))).astype(np.float32),
        (np.sign(e_out) * np.sqrt(np.abs(e_out))).astype(np.float32),
    )


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
    has the wrong shape (other names in ``tensors`` are the caller's business).

    ``noisy``: the dense layers are factorised Gaussian noisy layers (``.weight_mu``, ``.weight_sigma``,
    ``.bias_mu``, ``.bias_sigma``); ``torso(obs, noise)`` then takes one (eps_in, eps_out) per dense
    layer (:meth:`sample_noise`: one draw, or one per row), in torch's feature order, or None (the
    mean weights)."""

    def __init__(
        self, torso: Mapping[str, Any], tensors: Mapping[str, np.ndarray], prefix: str = "", noisy: bool = False
    ):
        self.torso = t = validate(torso)
        self.noisy = noisy
        shapes = weight_shapes(t, prefix, noisy)
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
        #: (W^T (in, out), b, W_sigma^T or None, b_sigma or None, the input's order or None) per dense
        #: layer (W the plain layer's weight or a noisy one's mu; the order: torch's feature index of
        #: each input here, where the two differ, to lay out eps_in)
        self.dense: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]] = []
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
        w_kind, b_kind = (".weight_mu", ".bias_mu") if noisy else (".weight", ".bias")
        for j in range(len(t["dense"])):
            name = f"{prefix}{2 * layer}"
            ws = [arrays[name + w_kind]] + ([arrays[name + ".weight_sigma"]] if noisy else [])  # out, in
            order = None
            if j == 0 and self.convs:  # torch flattens (C, H, W); the activations here are (H, W, C)
                c, h, wd = conv_shapes(t)[-1]
                ws = [w.reshape(len(w), c, h, wd).transpose(0, 2, 3, 1).reshape(len(w), -1) for w in ws]
                order = np.arange(c * h * wd).reshape(c, h, wd).transpose(1, 2, 0).reshape(-1)
            elif j == 0:
                ws = [w * scale for w in ws]
            ws = [np.ascontiguousarray(w.T, np.float32) for w in ws]
            b = arrays[name + b_kind].copy()
            if noisy:
                self.dense.append((ws[0], b, ws[1], arrays[name + ".bias_sigma"].copy(), order))
            else:
                self.dense.append((ws[0], b, None, None, None))
            layer += 1
        #: an mlp without dense layers passes the scaled observation through
        self._scale_out = scale if not self.convs and not self.dense else None

    def sample_noise(self, rng: np.random.Generator, rows: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Fresh factorised noise for each dense layer (:func:`factorised_noise`), torch's order; [] if
        the torso is not noisy."""
        if not self.noisy:
            return []
        return [factorised_noise(rng, w.shape[0], w.shape[1], rows) for w, *_ in self.dense]

    def __call__(self, obs: np.ndarray, noise: Sequence[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
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
        for j, (w, b, ws, bs, order) in enumerate(self.dense):
            y = x @ w
            y += b
            if noise is not None and ws is not None:  # + eps_out * ((x * eps_in) W_sigma^T + b_sigma)
                eps_in, eps_out = noise[j]
                eps_in = eps_in if order is None else eps_in[..., order]
                y += eps_out * ((x * eps_in) @ ws + bs)
            x = np.maximum(y, 0.0, out=y)
        return x
