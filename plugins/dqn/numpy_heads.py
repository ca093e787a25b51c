"""DQN's heads, numpy only: what sits on the torso, described by the weights' ``info``, and its forward.

A head is one linear layer (``head``) or two (dueling: ``value`` and ``advantage``) over the torso's
features, each plain (``weight``, ``bias``) or noisy (Fortunato et al. 2018: ``weight_mu``,
``weight_sigma``, ``bias_mu``, ``bias_sigma``, factorised Gaussian noise). Each action gets ``K``
outputs: K = 1 (plain DQN: the Q-value), K = ``n_atoms`` (C51: logits of a categorical distribution
over the fixed support ``linspace(v_min, v_max, n_atoms)``) or K = ``n_quantiles`` (QR-DQN: the
quantiles at tau_hat_i = (2i + 1) / 2N). A layer's output ``a * K + k`` is action ``a``'s output ``k``;
dueling combines per output: ``value + advantage - mean over actions of advantage``. The expected
Q-value is the output itself, the distribution's mean (C51) or the quantiles' mean (QR).

1. ``HeadSpec``: the head as an ``info`` describes it (:func:`.common.net_info`), its tensors' shapes;
2. noise: ``scale_noise`` (f(x) = sign(x) sqrt|x|), ``factorised_noise``, fresh weights;
3. ``NumpyHead``: the forward (features -> per-action outputs -> expected Q), with given noise or none.

:mod:`.heads` is the same in torch (the learner's layers and losses); both follow this layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from .common import DISTRIBUTIONS

# --------------------------------------------------------------------------
# 1. The head as plain data
# --------------------------------------------------------------------------

#: the tensors of a plain and of a noisy linear layer, by suffix
PLAIN = ("weight", "bias")
NOISY = ("weight_mu", "weight_sigma", "bias_mu", "bias_sigma")


@attrs.frozen
class HeadSpec:
    """The head of a Q-network; :meth:`of` reads it from a network ``info``."""

    n_actions: int
    dueling: bool
    #: "none", "c51" or "qr"
    distributional: str = "none"
    #: outputs per action: 1, n_atoms or n_quantiles
    k: int = 1
    #: C51's support
    v_min: float = 0.0
    v_max: float = 0.0
    noisy: bool = False

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> HeadSpec:
        """The head of :func:`.common.net_info`'s ``info``; ValueError if it is malformed."""
        kind = info.get("distributional", "none")
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"distributional={kind!r}: one of {DISTRIBUTIONS}")
        k, v_min, v_max = 1, 0.0, 0.0
        if kind == "c51":
            k, v_min, v_max = int(info["n_atoms"]), float(info["v_min"]), float(info["v_max"])
            if k < 2 or not v_min < v_max:
                raise ValueError(f"c51 head with n_atoms={k}, v_min={v_min}, v_max={v_max}")
        elif kind == "qr":
            k = int(info["n_quantiles"])
            if k < 1:
                raise ValueError(f"qr head with n_quantiles={k}")
        return cls(int(info["n_actions"]), bool(info["dueling"]), kind, k, v_min, v_max, bool(info.get("noisy")))

    def layers(self) -> tuple[tuple[str, int], ...]:
        """(name, outputs) of each linear layer, in order."""
        if self.dueling:
            return (("value", self.k), ("advantage", self.n_actions * self.k))
        return (("head", self.n_actions * self.k),)

    def tensor_shapes(self, width: int) -> dict[str, tuple[int, ...]]:
        """The head's tensors (torch's layouts: weights are (out, in)) over ``width`` features."""
        shapes: dict[str, tuple[int, ...]] = {}
        for name, out in self.layers():
            if self.noisy:
                shapes.update({f"{name}.weight_mu": (out, width), f"{name}.weight_sigma": (out, width)})
                shapes.update({f"{name}.bias_mu": (out,), f"{name}.bias_sigma": (out,)})
            else:
                shapes.update({f"{name}.weight": (out, width), f"{name}.bias": (out,)})
        return shapes

    def support(self) -> np.ndarray:
        """C51's atoms, float32 (n_atoms,)."""
        return np.linspace(self.v_min, self.v_max, self.k, dtype=np.float64).astype(np.float32)


def quantile_midpoints(n: int) -> np.ndarray:
    """QR-DQN's tau_hat_i = (2i + 1) / 2N, the quantile levels each output stands for (float32)."""
    return ((2 * np.arange(n) + 1) / (2.0 * n)).astype(np.float32)


# --------------------------------------------------------------------------
# 2. Noise and fresh weights
# --------------------------------------------------------------------------


def scale_noise(x: np.ndarray) -> np.ndarray:
    """Factorised noise's f(x) = sign(x) sqrt(|x|), applied to standard normals."""
    return np.sign(x) * np.sqrt(np.abs(x))


def factorised_noise(
    rng: np.random.Generator, n_in: int, n_out: int, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(eps_in, eps_out) = (f(e_in), f(e_out)) of standard normals, float32: the weight noise is
    outer(eps_out, eps_in), the bias noise eps_out. ``rows``: one independent draw per row, shapes
    (rows, n_in) and (rows, n_out); else one draw, shapes (n_in,) and (n_out,)."""
    lead = () if rows is None else (rows,)
    eps_in = scale_noise(rng.standard_normal((*lead, n_in))).astype(np.float32)
    eps_out = scale_noise(rng.standard_normal((*lead, n_out))).astype(np.float32)
    return eps_in, eps_out


def initial_head_weights(spec: HeadSpec, width: int, rng: np.random.Generator, sigma0: float = 0.5) -> dict:
    """Fresh float32 head tensors, as torch's layers start: plain layers uniform in +-1/sqrt(width);
    noisy ones mu uniform in +-1/sqrt(width), sigma = sigma0 / sqrt(width) (Fortunato et al.'s
    factorised initialisation)."""
    bound = 1.0 / math.sqrt(width)
    tensors = {}
    for name, out in spec.layers():
        w = rng.uniform(-bound, bound, (out, width)).astype(np.float32)
        b = rng.uniform(-bound, bound, out).astype(np.float32)
        if spec.noisy:
            tensors.update({f"{name}.weight_mu": w, f"{name}.bias_mu": b})
            tensors[f"{name}.weight_sigma"] = np.full((out, width), sigma0 * bound, np.float32)
            tensors[f"{name}.bias_sigma"] = np.full(out, sigma0 * bound, np.float32)
        else:
            tensors.update({f"{name}.weight": w, f"{name}.bias": b})
    return tensors


# --------------------------------------------------------------------------
# 3. The forward
# --------------------------------------------------------------------------


def noisy_linear(
    x: np.ndarray,
    w_mu_t: np.ndarray,
    b_mu: np.ndarray,
    w_sigma_t: np.ndarray | None = None,
    b_sigma: np.ndarray | None = None,
    eps_in: np.ndarray | None = None,
    eps_out: np.ndarray | None = None,
) -> np.ndarray:
    """``x @ (W_mu + W_sigma * outer(eps_out, eps_in))^T + b_mu + b_sigma * eps_out`` without forming
    the noisy matrix: ``x @ W_mu^T + b_mu + eps_out * ((x * eps_in) @ W_sigma^T + b_sigma)``, so the
    noise may be one draw (vectors) or one per row ((N, n_in), (N, n_out)). Weights come transposed
    ((in, out)); without noise (``eps_in`` None) the layer is its mean, ``x @ W_mu^T + b_mu``."""
    y = x @ w_mu_t
    y += b_mu
    if eps_in is not None:
        y += eps_out * ((x * eps_in) @ w_sigma_t + b_sigma)
    return y


def combine(spec: HeadSpec, outs: Sequence[np.ndarray]) -> np.ndarray:
    """The layers' outputs -> per-action outputs (N, n_actions, K): dueling per output k."""
    n = len(outs[0])
    if spec.dueling:
        value, adv = outs
        adv = adv.reshape(n, spec.n_actions, spec.k)
        return value.reshape(n, 1, spec.k) + adv - adv.mean(axis=1, keepdims=True)
    return outs[0].reshape(n, spec.n_actions, spec.k)


def expected_q(spec: HeadSpec, out: np.ndarray, support: np.ndarray | None = None) -> np.ndarray:
    """Per-action outputs (N, A, K) -> expected Q (N, A): the value itself, C51's sum_k softmax_k z_k
    or QR's mean of the quantiles."""
    if spec.distributional == "c51":
        z = out - out.max(axis=2, keepdims=True)
        e = np.exp(z)
        return (e @ (spec.support() if support is None else support)) / e.sum(axis=2)
    if spec.distributional == "qr":
        return out.mean(axis=2)
    return out[:, :, 0]


class NumpyHead:
    """A head's forward in float32 from its tensors (torch's names and layouts, checked): features (N, width)
    -> expected Q (N, n_actions). ``noise``: None (the mean weights) or one (eps_in, eps_out) per layer
    (:func:`factorised_noise`, one draw or one per row)."""

    def __init__(self, spec: HeadSpec, tensors: Mapping[str, np.ndarray], width: int):
        self.spec = spec
        self.width = width
        for name, shape in spec.tensor_shapes(width).items():
            if name not in tensors:
                raise ValueError(f"weights do not fit the network: missing {name}")
            if tuple(np.shape(tensors[name])) != shape:
                raise ValueError(f"weight {name} has shape {np.shape(tensors[name])}, the network needs {shape}")
        #: per layer: (W_mu^T (in, out), b_mu, W_sigma^T or None, b_sigma or None)
        self.layers: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]] = []
        w_name, b_name = ("weight_mu", "bias_mu") if spec.noisy else PLAIN
        for name, _ in spec.layers():
            w = np.ascontiguousarray(np.asarray(tensors[f"{name}.{w_name}"], np.float32).T)
            b = np.array(tensors[f"{name}.{b_name}"], np.float32)
            ws: np.ndarray | None
            bs: np.ndarray | None
            if spec.noisy:
                ws = np.ascontiguousarray(np.asarray(tensors[f"{name}.weight_sigma"], np.float32).T)
                bs = np.array(tensors[f"{name}.bias_sigma"], np.float32)
            else:
                ws = bs = None
            self.layers.append((w, b, ws, bs))
        self._support = spec.support() if spec.distributional == "c51" else None

    def sample_noise(self, rng: np.random.Generator, rows: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Fresh factorised noise for each layer (see :func:`factorised_noise`)."""
        return [factorised_noise(rng, self.width, w.shape[1], rows) for w, _, _, _ in self.layers]

    def outputs(self, x: np.ndarray, noise: Sequence[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
        """Per-action outputs (N, n_actions, K): Q-values (K = 1), C51 logits or QR quantiles."""
        outs = []
        for j, (w, b, ws, bs) in enumerate(self.layers):
            if noise is None or ws is None:
                outs.append(noisy_linear(x, w, b))
            else:
                outs.append(noisy_linear(x, w, b, ws, bs, *noise[j]))
        return combine(self.spec, outs)

    def __call__(self, x: np.ndarray, noise: Sequence[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
        return expected_q(self.spec, self.outputs(x, noise), self._support)
