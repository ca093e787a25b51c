"""Batch renormalisation (Ioffe 2017, "Batch Renormalization"), CrossQ's normalisation layer, in torch.

``BatchRenorm`` normalises the features (last axis) over the rows (the axis before it) of inputs
``(B, F)``, or ``(N, B, F)`` for N networks held as one stacked ensemble (each with statistics and
an affine map of its own, ``shape = (N, F)``). In training mode, with ``mu_B`` and ``var_B`` the
batch's mean and unbiased variance, ``sigma_B = sqrt(var_B + eps)``, ``sigma = sqrt(running_var + eps)``:

* for the first ``warmup`` training forwards it is batch norm: ``x_hat = (x - mu_B) / sigma_B``;
* afterwards batch renorm: ``x_hat = (x - mu_B) / sigma_B * r + d`` with
  ``r = clip(sigma_B / sigma, 1 / r_max, r_max)`` and ``d = clip((mu_B - running_mean) / sigma,
  -d_max, d_max)``, both constants to the gradient (at ``r = 1, d = 0`` this is batch norm, where
  they do not clip it is the running statistics' normalisation);
* then the running statistics move ``momentum`` towards the batch's (after ``r`` and ``d`` are taken).

In eval mode it is ``(x - running_mean) / sigma``, no statistics change; then ``weight * x_hat + bias``.
The running statistics and the count of training forwards (``steps``) are buffers, so checkpoints
carry them. SB3-contrib's ``BatchRenorm1d`` (CrossQ's) is the same but for where ``eps`` enters
under renorm (it divides by ``sqrt(var_B / r^2 + eps)``), and it starts renorm one forward later.
"""

from __future__ import annotations

import torch
from torch import nn


class BatchRenorm(nn.Module):
    """Batch renormalisation over axis -2 of features of ``shape`` (``(F,)``, or ``(N, F)`` for an ensemble)."""

    #: buffers, registered in ``__init__`` (declared for type checkers)
    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor

    def __init__(
        self,
        shape: tuple[int, ...],
        eps: float = 1e-3,
        momentum: float = 0.01,
        warmup: int = 100_000,
        r_max: float = 3.0,
        d_max: float = 5.0,
    ):
        super().__init__()
        self.eps, self.momentum, self.warmup, self.r_max, self.d_max = eps, momentum, warmup, r_max, d_max
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        #: training forwards so far (batch norm while below ``warmup``); one element, not a 0-d tensor,
        #: as weights travel to the workers in arrays of at least one dimension
        self.register_buffer("steps", torch.zeros(1, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x_hat = (x - self.running_mean.unsqueeze(-2)) / (self.running_var + self.eps).sqrt().unsqueeze(-2)
        else:
            mean = x.mean(dim=-2)
            centered = x - mean.unsqueeze(-2)
            # the unbiased variance; torch's x.var is ~10x slower on a CPU over this axis
            var = centered.pow(2).sum(dim=-2) / (x.shape[-2] - 1)
            x_hat = centered / (var + self.eps).sqrt().unsqueeze(-2)
            if int(self.steps) >= self.warmup:
                r, d = self.corrections(mean.detach(), var.detach())
                x_hat = x_hat * r.unsqueeze(-2) + d.unsqueeze(-2)
            with torch.no_grad():
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_var.lerp_(var.detach(), self.momentum)
                self.steps += 1
        return x_hat * self.weight.unsqueeze(-2) + self.bias.unsqueeze(-2)

    def corrections(self, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Renorm's ``(r, d)`` for a batch of ``mean`` and ``var``, against the running statistics."""
        sigma = (self.running_var + self.eps).sqrt()
        r = ((var + self.eps).sqrt() / sigma).clamp(1.0 / self.r_max, self.r_max)
        d = ((mean - self.running_mean) / sigma).clamp(-self.d_max, self.d_max)
        return r, d

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, momentum={self.momentum}, warmup={self.warmup}, eps={self.eps}"
