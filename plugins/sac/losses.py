"""SAC's and REDQ's losses as plain torch functions (tests check them against hand computations).

* ``squashed_log_prob``: log-density of ``a = tanh(u)``, ``u ~ N(mean, std)``, with the change of
  variables' correction ``- sum log(1 - tanh(u)^2)`` in the stable form ``2 (log 2 - u - softplus(-2u))``
  (the density of the squashed action in [-1, 1]; the box scaling is a constant and left out, as
  in SB3 and REDQ's reference, so the target entropy -|A| means the same for every box);
* ``soft_target``: ``r + discount * (min over the drawn target critics of Q'(s', a') - alpha log pi(a'|s'))``;
* ``critic_loss``: the sum over critics of each one's mean squared error to the one target;
* ``actor_loss``: ``mean(alpha log pi(a|s) - Q(s, a))``, Q the min (SAC) or mean (REDQ) over all critics;
* ``alpha_loss``: ``-mean(log_alpha * (log pi + target_entropy))``: its gradient raises alpha while the
  policy's entropy (``-log pi``) is below the target and lowers it above.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) for pre-squash samples ``u`` (B, A) of N(mean, exp(log_std)); (B,)."""
    z = (u - mean) / log_std.exp()
    gaussian = (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
    log_det = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)  # sum log(1 - tanh(u)^2)
    return gaussian - log_det


def soft_target(
    reward: torch.Tensor, discount: torch.Tensor, next_q: torch.Tensor, next_logp: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """The soft Bellman target (B,) from the drawn target critics' values ``next_q`` (M, B) at ``a' ~ pi(s')``."""
    return reward + discount * (next_q.min(dim=0).values - alpha * next_logp)


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over the N critics (rows of ``q``, (N, B)) of the mean squared error to ``target`` (B,)."""
    return (q - target.unsqueeze(0)).pow(2).mean(dim=1).sum()


def actor_loss(q_pi: torch.Tensor, logp: torch.Tensor, alpha: torch.Tensor, reduce: str) -> torch.Tensor:
    """``mean(alpha * logp - Q)`` with Q the ``reduce`` ("min" or "mean") over the critics' rows of ``q_pi``."""
    q = q_pi.min(dim=0).values if reduce == "min" else q_pi.mean(dim=0)
    return (alpha * logp - q).mean()


def alpha_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """The temperature's loss; ``logp`` is treated as a constant."""
    return -(log_alpha * (logp.detach() + target_entropy)).mean()
