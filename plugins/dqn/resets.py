"""Periodic network resets by shrink-and-perturb (Ash & Adams 2020), as "The Primacy Bias in Deep
RL" (Nikishin et al. 2022) and BBF (Schwarzer et al. 2023) use them against a net that has overfit
its early data at high replay ratios: theta <- alpha theta + (1 - alpha) theta_fresh, theta_fresh a
new random initialisation of the same network (alpha 0: a full reset; 1: nothing changes).

Torch only; the learner's :class:`NetworkResets` calls :func:`shrink_and_perturb` every
``reset_every`` updates (:class:`~.common.DQNParams`), with a fresh net it builds from a seed of its
own so that a run resumed from a checkpoint resets alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

log = logging.getLogger("mqttrl.dqn")


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


class NetworkResets:
    """``reset_every`` (0: never): after every so many updates, the update's online net shrunk towards
    a fresh one from ``make_net`` and its Adam moments dropped. The fresh net is drawn from (seed,
    updates), so a resumed run resets alike."""

    def __init__(self, params, update, make_net: Callable[[], nn.Module], seed: int):
        self.params, self.update, self.make_net, self.seed = params, update, make_net, seed

    def stepped(self, updates: int) -> None:
        every = self.params.reset_every
        if every and updates % every == 0:
            self.reset(updates)

    def reset(self, updates: int) -> None:
        p, online = self.params, self.update.online
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 1_000_003 + updates)
            fresh = self.make_net()
        head = {name for name, _ in online.spec.layers()}
        changed = shrink_and_perturb(online, fresh, p.reset_alpha, p.reset_head_alpha, head)
        forget_moments(self.update.optimizer, online)
        log.info(
            "update %d: network reset (%d tensors; alpha %g, head %g)",
            updates,
            changed,
            p.reset_alpha,
            p.reset_head_alpha,
        )
