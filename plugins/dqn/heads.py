"""DQN's heads in torch: noisy linear layers, and the losses of the plain, C51 and QR-DQN heads.

The layout (layer names, outputs per action, the dueling combination per output) is
:mod:`.numpy_heads`'s, which the numpy forward follows too.

1. ``NoisyLinear``: Fortunato et al. 2018's factorised Gaussian noisy layer;
2. ``combine`` / ``expected_q``: the layers' outputs -> per-action outputs -> expected Q;
3. the losses, per sample (prioritized replay's priorities with ``initial_priority = "max"``):
   ``c51_project`` (the categorical projection of r + discount * z onto the support, O(B K)),
   ``edge_mass`` (the share of that target on the two edge atoms: is the support wide enough?),
   ``c51_loss`` (cross-entropy to it), ``quantile_huber_loss`` (QR-DQN), ``td_loss`` (dispatch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .numpy_heads import HeadSpec

# --------------------------------------------------------------------------
# 1. Noisy linear layer
# --------------------------------------------------------------------------


def scale_noise(x: torch.Tensor) -> torch.Tensor:
    """f(x) = sign(x) sqrt(|x|)."""
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """``y = x (W_mu + W_sigma * outer(eps_out, eps_in))^T + b_mu + b_sigma * eps_out`` (factorised
    Gaussian noise, eps = f(standard normal)). The noise lives in buffers that are not part of the
    state dict (weights and checkpoints carry mu and sigma only): :meth:`reset_noise` draws it, one
    draw for the batch or one per row; until the first draw it is zero (the layer is its mean).
    ``forward(x, noise=False)`` is the mean layer whatever the buffers hold."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)

    def reset_noise(self, rows: int | None = None, generator: torch.Generator | None = None) -> None:
        """New noise: one draw (``rows`` None) or one per row of the next batch of ``rows``."""
        lead = () if rows is None else (rows,)
        dev = self.weight_mu.device
        e_in = torch.randn(*lead, self.in_features, generator=generator, device=dev if generator is None else "cpu")
        e_out = torch.randn(*lead, self.out_features, generator=generator, device=dev if generator is None else "cpu")
        self.set_noise(scale_noise(e_in), scale_noise(e_out))

    def set_noise(self, eps_in: torch.Tensor, eps_out: torch.Tensor) -> None:
        """Given noise (already f-scaled): (in,), (out,) or per row (N, in), (N, out)."""
        self.eps_in = eps_in.to(self.weight_mu.device, torch.float32)
        self.eps_out = eps_out.to(self.weight_mu.device, torch.float32)

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        if not noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        if self.eps_in.dim() == 1:  # one draw for the batch (the learner): one matmul with the noisy matrix
            weight = torch.addcmul(self.weight_mu, self.weight_sigma, torch.outer(self.eps_out, self.eps_in))
            return F.linear(x, weight, torch.addcmul(self.bias_mu, self.bias_sigma, self.eps_out))
        # a draw per row: the noisy matrices are never formed,
        # x (sigma * eps_out eps_in^T)^T = eps_out * ((x * eps_in) sigma^T)
        y = F.linear(x, self.weight_mu, self.bias_mu)
        return y + self.eps_out * (F.linear(x * self.eps_in, self.weight_sigma) + self.bias_sigma)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def linear_layer(spec: HeadSpec, width: int, out: int, sigma0: float) -> nn.Module:
    return NoisyLinear(width, out, sigma0) if spec.noisy else nn.Linear(width, out)


# --------------------------------------------------------------------------
# 2. Outputs -> expected Q
# --------------------------------------------------------------------------


def combine(spec: HeadSpec, outs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The layers' outputs -> per-action outputs (N, n_actions, K): dueling per output k."""
    n = outs[0].shape[0]
    if spec.dueling:
        value, adv = outs
        adv = adv.view(n, spec.n_actions, spec.k)
        return value.view(n, 1, spec.k) + adv - adv.mean(dim=1, keepdim=True)
    return outs[0].view(n, spec.n_actions, spec.k)


def expected_q(spec: HeadSpec, out: torch.Tensor, support: torch.Tensor | None) -> torch.Tensor:
    """Per-action outputs (N, A, K) -> expected Q (N, A)."""
    if spec.distributional == "c51":
        return torch.softmax(out, dim=2) @ support
    if spec.distributional == "qr":
        return out.mean(dim=2)
    return out[:, :, 0]


# --------------------------------------------------------------------------
# 3. Losses
# --------------------------------------------------------------------------


def c51_project(
    next_probs: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    support: torch.Tensor,
    ends: tuple[float, float] | None = None,
) -> torch.Tensor:
    """The categorical projection (Bellemare et al. 2017, Algorithm 1) of the distribution of
    ``reward + discount * Z``, Z with probabilities ``next_probs`` (B, K) on ``support`` (K,), onto the
    support: each shifted atom Tz_j = clip(r + discount z_j, v_min, v_max) splits its probability
    between its two neighbouring atoms in proportion to closeness, m_i = sum_j [1 - |Tz_j - z_i| /
    dz]_0^1 p_j. ``discount`` is the batch's n-step discount: 0 after a termination (all mass at r).

    O(B K): only the two atoms around Tz_j get a non-zero hat weight: l_j = min(floor((Tz_j - v_min) /
    dz), K - 2) and l_j + 1, each weighted by the hat formula itself (the same float arithmetic as
    the (B, K, K) form it replaced, ~7x slower at K = 51), added with two ``scatter_add``. A Tz_j
    exactly on an atom keeps all its mass there (v_max: weight 0 on K - 2, 1 on K - 1). ``ends``:
    the support's first and last atom as floats, when the caller knows them (read from a GPU's
    ``support`` they would cost the update a wait for the device)."""
    v_min, v_max = ends if ends is not None else (float(support[0]), float(support[-1]))
    k = support.numel()
    dz = (v_max - v_min) / (k - 1)
    tz = (reward.unsqueeze(1) + discount.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)  # B, K (j)
    low = ((tz - v_min) / dz).floor().clamp(0, k - 2).long()
    high = low + 1
    w_low = (1.0 - (tz - support[low]).abs() / dz).clamp(min=0.0)
    w_high = (1.0 - (tz - support[high]).abs() / dz).clamp(min=0.0)
    probs = next_probs.to(w_low.dtype)  # the support's precision (float32 under bf16 autocast too)
    m = torch.zeros_like(probs)
    m.scatter_add_(1, low, probs * w_low)
    m.scatter_add_(1, high, probs * w_high)
    return m


def edge_mass(target_probs: torch.Tensor) -> torch.Tensor:
    """The mean share of a projected C51 target's mass on the support's two edge atoms (v_min and
    v_max): near 0 when the support spans the returns; large when targets are being clipped to it
    (then the support is too narrow for the game's returns). A scalar tensor (no device sync)."""
    return (target_probs[:, 0] + target_probs[:, -1]).mean()


def c51_loss(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy -sum_i m_i log p_i of the taken action's logits (B, K) to the projected
    target (B, K); Rainbow's priority too (here only with ``initial_priority = "max"``)."""
    return -(target_probs * F.log_softmax(logits, dim=1)).sum(dim=1)


def quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """QR-DQN's per-sample loss (Dabney et al. 2018, eq. 10 with the quantile Huber loss):
    sum_i mean_j rho^kappa_{tau_hat_i}(T theta_j - theta_i), where rho^kappa_tau(u) = |tau - 1{u < 0}|
    L_kappa(u), L_kappa(u) = u^2 / 2 for |u| <= kappa, else kappa (|u| - kappa / 2) (not divided by
    kappa: QR-DQN's form; IQN's divides). ``quantiles`` (B, N): theta_i(s, a) of the online net;
    ``target`` (B, N'): the target quantiles (no gradient flows into them)."""
    n = quantiles.shape[1]
    # quantile_midpoints' values, made on the device (no host-to-device copy per update)
    tau = ((2 * torch.arange(n, device=quantiles.device, dtype=torch.float64) + 1) / (2.0 * n)).float().view(1, n, 1)
    u = target.unsqueeze(1) - quantiles.unsqueeze(2)  # B, i, j
    huber = F.huber_loss(u, torch.zeros_like(u), reduction="none", delta=kappa)
    rho = (tau - (u.detach() < 0).float()).abs() * huber
    return rho.mean(dim=2).sum(dim=1)


def td_loss(
    spec: HeadSpec,
    out: torch.Tensor,
    target_out: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    support: torch.Tensor | None,
    kappa: float = 1.0,
    stats: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample loss and the target's expected value, for the taken actions' outputs ``out``
    (B, K, with gradient) and the next state's outputs ``target_out`` (B, K, the target net's at the
    chosen next action): Huber to r + discount * Q' (plain), cross-entropy to the projected
    distribution (C51), quantile Huber loss to r + discount * theta' (QR). ``stats``, when given,
    gets C51's ``target_edge_mass`` (:func:`edge_mass`, a scalar tensor)."""
    with torch.no_grad():
        if spec.distributional == "c51":
            # the support's ends as float32 atoms hold them (linspace keeps both ends exact)
            # (numpy's float32, not a torch tensor: torch.compile would break its graph here)
            ends = (float(np.float32(spec.v_min)), float(np.float32(spec.v_max)))
            m = c51_project(torch.softmax(target_out, dim=1), reward, discount, support, ends)
            target_value = m @ support
            if stats is not None:
                stats["target_edge_mass"] = edge_mass(m)
        else:
            target_all = reward.unsqueeze(1) + discount.unsqueeze(1) * target_out  # B, K
            target_value = target_all.mean(dim=1)
    if spec.distributional == "c51":
        return c51_loss(out, m), target_value
    if spec.distributional == "qr":
        return quantile_huber_loss(out, target_all, kappa), target_value
    return F.smooth_l1_loss(out[:, 0], target_value, reduction="none"), target_value
