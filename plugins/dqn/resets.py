"""Periodic network resets by shrink-and-perturb (Ash & Adams 2020), as "The Primacy Bias in Deep
RL" (Nikishin et al. 2022) and BBF (Schwarzer et al. 2023) use them against a net that has overfit
its early data at high replay ratios: theta <- alpha theta + (1 - alpha) theta_fresh, theta_fresh a
new random initialisation of the same network (alpha 0: a full reset; 1: nothing changes).

Torch only; the learner calls :func:`shrink_and_perturb` every ``reset_every`` updates
(:class:`~.common.DQNParams`), with a fresh net it builds from a seed of its own so that a run
resumed from a checkpoint resets alike.
"""

from __future__ import annotations

import torch
from torch import nn


def shrink_and_perturb(net: nn.Module, fresh: nn.Module, alpha: float, head_alpha: float, head: set[str]) -> int:
    """Mix every parameter of ``net`` in place with ``fresh``'s (same architecture): the parameters
    of the top-level modules named in ``head`` with ``head_alpha``, the others (the torso) with
    ``alpha``. Returns the parameters changed (a count for the log)."""
    fresh_params = dict(fresh.named_parameters())
    changed = 0
    with torch.no_grad():
        for name, param in net.named_parameters():
            keep = head_alpha if name.split(".", 1)[0] in head else alpha
            if keep >= 1.0:
                continue
            param.mul_(keep).add_(fresh_params[name].to(param.device, param.dtype), alpha=1.0 - keep)
            changed += 1
    return changed


def forget_moments(optimizer: torch.optim.Optimizer, net: nn.Module) -> None:
    """Adam's state of ``net``'s parameters dropped (moments and step count start afresh at the
    next step, as for a new net)."""
    for param in net.parameters():
        optimizer.state.pop(param, None)
