"""DQN's heads in torch: noisy linear layers, and the math of the C51 and QR-DQN heads' losses.

The layout (layer names, outputs per action, the dueling combination per output) is
:mod:`.numpy_heads`'s, which the numpy forward follows too.

1. ``NoisyLinear``: Fortunato et al. 2018's factorised Gaussian noisy layer;
2. ``combine`` / ``expected_q``: the layers' outputs -> per-action outputs -> expected Q;
3. the losses, per sample (prioritized replay's priorities with ``initial_priority = "max"``):
   ``c51_project`` (the categorical projection of r + discount * z onto the support, O(B K)),
   ``edge_mass`` (the share of that target on the two edge atoms: is the support wide enough?),
   ``c51_loss`` (cross-entropy to it), ``quantile_huber_loss`` (QR-DQN). Which loss an update
   takes, and its targets, are :mod:`.losses`'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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

    #: a torso (:class:`mqttrl.nets.torch_torso.Torso`) hands its ``noise`` flag to such layers
    noisy = True
    #: the noise (buffers, registered in ``__init__``; declared for type checkers)
    eps_in: torch.Tensor
    eps_out: torch.Tensor

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
        reset_noise_of([self], rows, generator)

    def set_noise(self, eps_in: torch.Tensor, eps_out: torch.Tensor) -> None:
        """Given noise (already f-scaled): (in,), (out,) or per row (N, in), (N, out)."""
        dev = self.weight_mu.device
        # straight into the buffers (Module.__setattr__ and no-op .to() calls cost more than the draw)
        for name, eps in (("eps_in", eps_in), ("eps_out", eps_out)):
            self._buffers[name] = (
                eps if eps.device == dev and eps.dtype == torch.float32 else eps.to(dev, torch.float32)
            )

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


def reset_noise_of(
    layers: Sequence[NoisyLinear], rows: int | None = None, generator: torch.Generator | None = None
) -> None:
    """New factorised noise for every layer of ``layers`` from one draw of standard normals (one
    ``randn`` and one f(x) = sign(x) sqrt|x| for all of them, split in views: a noisy net's eight or
    more little draws cost more than its matmuls on a CPU): one draw for the batch (``rows`` None)
    or one per row of the next ``rows``, in the order e_in, e_out of each layer in turn. Drawn on
    ``generator``'s device (the layers' without one), then moved to the layers' device."""
    if not layers:
        return
    sizes = [n for layer in layers for n in (layer.in_features, layer.out_features)]
    lead = () if rows is None else (rows,)
    dev = generator.device if generator is not None else layers[0].weight_mu.device
    e = torch.randn(*lead, sum(sizes), generator=generator, device=dev)
    e = torch.copysign(e.abs().sqrt_(), e)  # f(x), as scale_noise
    parts = e.split(sizes, dim=-1)
    for i, layer in enumerate(layers):
        layer.set_noise(parts[2 * i], parts[2 * i + 1])


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
        assert support is not None  # C51's atoms: every caller passes them
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
    the (B, K, K) form it replaced, ~7x slower at K = 51), added with one ``scatter_add``. A Tz_j
    exactly on an atom keeps all its mass there (v_max: weight 0 on K - 2, 1 on K - 1). ``ends``:
    the support's first and last atom as floats, when the caller knows them (read from a GPU's
    ``support`` they would cost the update a wait for the device)."""
    v_min, v_max = ends if ends is not None else (float(support[0]), float(support[-1]))
    k, b = support.numel(), reward.shape[0]
    dz = (v_max - v_min) / (k - 1)
    tz = torch.addcmul(reward.unsqueeze(1), discount.unsqueeze(1), support).clamp_(v_min, v_max)  # B, K (j)
    low = (tz - v_min).div_(dz).floor_().clamp_(0, k - 2)
    # both neighbours at once, (B, 2, K): [:, 0] = l_j, [:, 1] = l_j + 1 (fewer kernels, each on K-long rows)
    pair = torch.stack((low, low + 1.0), dim=1).long().view(b, 2 * k)
    w = (tz.unsqueeze(1) - support.index_select(0, pair.view(-1)).view(b, 2, k)).abs_().div_(dz)
    w = w.neg_().add_(1.0).clamp_(min=0.0)  # the hat weights 1 - |Tz_j - z_i| / dz, at least 0
    probs = next_probs.to(w.dtype)  # the support's precision (float32 under bf16 autocast too)
    return torch.zeros_like(probs).scatter_add_(1, pair, w.mul_(probs.unsqueeze(1)).view(b, 2 * k))


def edge_mass(target_probs: torch.Tensor) -> torch.Tensor:
    """The mean share of a projected C51 target's mass on the support's two edge atoms (v_min and
    v_max): near 0 when the support spans the returns; large when targets are being clipped to it
    (then the support is too narrow for the game's returns). A scalar tensor (no device sync)."""
    return (target_probs[:, 0] + target_probs[:, -1]).mean()


def c51_loss(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy -sum_i m_i log p_i of the taken action's logits (B, K) to the projected
    target (B, K); Rainbow's priority too (here only with ``initial_priority = "max"``)."""
    return -(target_probs * F.log_softmax(logits, dim=1)).sum(dim=1)


#: whether torch.compile is tracing (torch >= 2.3 says; older ones never trace this Function)
_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
#: the (B, N, N') pair tensors of the last quantile loss, reused while the shapes stay (see _pairs)
_PAIRS: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _pairs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Three (B, N, N') work tensors, kept from one update to the next: at B = 128, N = 51 each is 1.3 MB,
    and freshly allocated memory of that size is returned to the OS when freed and faulted in again
    page by page, which made each pass over a new tensor ~10x slower than one over reused memory."""
    key = (shape, dtype, device)
    got = _PAIRS.get(key)
    if got is None:
        _PAIRS.clear()  # one shape at a time (a learner's batch)
        got = _PAIRS[key] = tuple(torch.empty(shape, dtype=dtype, device=device) for _ in range(3))
    return got


class _QuantileHuber(torch.autograd.Function):
    """QR-DQN's per-sample loss with its gradient formed in the same pass (see
    :func:`quantile_huber_loss`): the (B, N, N') pairs are made once, in reused memory, a handful of
    in-place passes over them give both the loss and the gradients' sums, and only (B, N) / (B, N')
    sums are kept for the backward (autograd through the textbook form kept every intermediate pair
    tensor and walked them again: 4x slower at B = 128, N = 51 on a CPU)."""

    @staticmethod
    def forward(ctx, quantiles, target, tau, one_minus_2tau, kappa):
        b, n, m = quantiles.shape[0], quantiles.shape[1], target.shape[1]
        dtype = torch.promote_types(quantiles.dtype, target.dtype)
        if _compiling():  # (no module state under torch.compile)
            u, c, g = (torch.empty((b, n, m), dtype=dtype, device=quantiles.device) for _ in range(3))
        else:
            u, c, g = _pairs((b, n, m), dtype, quantiles.device)
        torch.sub(target.unsqueeze(1), quantiles.unsqueeze(2), out=u)  # B, i, j: T theta_j - theta_i
        torch.clamp(u, -kappa, kappa, out=c)  # L_kappa'(u); L_kappa(u) = c (u - c / 2)
        # rho' = |tau - 1{u < 0}| c = tau c + (1 - 2 tau) min(c, 0) (c has u's sign)
        torch.clamp(c, max=0.0, out=g).mul_(one_minus_2tau).addcmul_(tau, c)
        # d loss_b / d theta_i = -mean_j rho'_ij; d loss_b / d T_j = sum_i rho'_ij / N'
        d_q = g.sum(dim=2).div_(-m).to(quantiles.dtype) if ctx.needs_input_grad[0] else None
        d_t = g.sum(dim=1).div_(m).to(target.dtype) if ctx.needs_input_grad[1] else None
        ctx.save_for_backward(d_q, d_t)
        # rho = rho' (u - c / 2), summed over the pairs
        return g.mul_(u.sub_(c, alpha=0.5)).view(b, -1).sum(dim=1).div_(m)

    @staticmethod
    def backward(ctx, grad):
        d_q, d_t = ctx.saved_tensors
        grad = grad.unsqueeze(1)
        return (
            d_q * grad.to(d_q.dtype) if d_q is not None else None,
            d_t * grad.to(d_t.dtype) if d_t is not None else None,
            None,
            None,
            None,
        )


def quantile_huber_loss(quantiles: torch.Tensor, target: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """QR-DQN's per-sample loss (Dabney et al. 2018, eq. 10 with the quantile Huber loss):
    sum_i mean_j rho^kappa_{tau_hat_i}(T theta_j - theta_i), where rho^kappa_tau(u) = |tau - 1{u < 0}|
    L_kappa(u), L_kappa(u) = u^2 / 2 for |u| <= kappa, else kappa (|u| - kappa / 2) (not divided by
    kappa: QR-DQN's form; IQN's divides). ``quantiles`` (B, N): theta_i(s, a) of the online net;
    ``target`` (B, N'): the target quantiles (gradients flow into both when they ask for them).

    Computed as rho = rho'(u) (u - c / 2) with c = clamp(u, -kappa, kappa) = L_kappa'(u) and rho'(u) =
    |tau - 1{u < 0}| c (:class:`_QuantileHuber`: the loss and its gradient in one pass over the pairs);
    equal to the textbook form to float rounding (tests/test_rainbow.py: loops, by hand)."""
    n = quantiles.shape[1]
    dtype = torch.promote_types(quantiles.dtype, target.dtype)
    # quantile_midpoints' values, made on the device (no host-to-device copy per update)
    tau = ((2 * torch.arange(n, device=quantiles.device, dtype=torch.float64) + 1) / (2.0 * n)).to(dtype).view(1, n, 1)
    return _QuantileHuber.apply(quantiles, target, tau, 1.0 - 2.0 * tau, float(kappa))
