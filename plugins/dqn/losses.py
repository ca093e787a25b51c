"""DQN's losses: one update's objective from a sampled batch, chosen once from the config.

As Acme's DQN (``acme/agents/jax/dqn/losses.py``), where Rainbow is DQN's learner with another
loss: :func:`make_loss` picks a :class:`TDLoss` from :class:`~.common.DQNParams`, and the update
(:mod:`.update`) only calls it. A loss is two choices:

* the next action, at which the target net's outputs are the bootstrap: the target net's own
  greedy action, or the online net's (``double``: van Hasselt et al. 2016);
* the head's TD loss (:func:`head_loss`): Huber to r + discount * Q' (a plain head), the
  cross-entropy to the projected categorical target (C51), the quantile Huber loss to
  r + discount * theta' (QR-DQN); the math is :mod:`.heads`'.

n-step returns are the batch's: ``reward`` is the discounted sum of up to n rewards, ``discount``
gamma ** k, 0 after a termination. A dueling head changes the network's outputs only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from . import heads
from .common import DQNParams

if TYPE_CHECKING:
    from .learner import QNetwork


class LossOutput(NamedTuple):
    """What an update needs from its loss: the step's scalar and the per-sample figures behind the
    priorities and the metrics."""

    #: mean of the per-sample loss, weighted by the importance-sampling weights when prioritized
    loss: torch.Tensor
    #: per-sample loss (B,): a sample's priority when the actors send none (Rainbow's)
    elementwise: torch.Tensor
    #: the target's expected value (B,)
    target: torch.Tensor
    #: the online net's expected Q of the taken action (B,), no gradient
    q: torch.Tensor
    #: C51: the share of the projected targets on the two edge atoms (a scalar); else None
    edge_mass: torch.Tensor | None = None


class HuberTD:
    """A plain head: Huber loss of Q(s, a) to r + discount * Q'."""

    def __call__(self, out, next_out, reward, discount, support):
        """(per-sample loss, target value, None) for the taken actions' outputs ``out`` (B, 1) and
        the bootstrap outputs ``next_out`` (B, 1)."""
        with torch.no_grad():
            target = (reward.unsqueeze(1) + discount.unsqueeze(1) * next_out).mean(dim=1)
        return F.smooth_l1_loss(out[:, 0], target, reduction="none"), target, None


class QuantileTD:
    """QR-DQN: the quantile Huber loss of theta(s, a) to r + discount * theta' (Dabney et al. 2018)."""

    def __init__(self, kappa: float):
        self.kappa = kappa

    def __call__(self, out, next_out, reward, discount, support):
        with torch.no_grad():
            target_all = reward.unsqueeze(1) + discount.unsqueeze(1) * next_out  # B, N'
            target = target_all.mean(dim=1)
        return heads.quantile_huber_loss(out, target_all, self.kappa), target, None


class CategoricalTD:
    """C51: cross-entropy of the taken action's logits to the projection of r + discount * Z'
    onto the support (Bellemare et al. 2017); also the target's mass on the edge atoms."""

    def __init__(self, v_min: float, v_max: float):
        # the support's ends as its float32 atoms hold them (linspace keeps both ends exact); numpy's
        # float32, not a tensor read from the device: no sync, and no graph break under torch.compile
        self.ends = (float(np.float32(v_min)), float(np.float32(v_max)))

    def __call__(self, out, next_out, reward, discount, support):
        with torch.no_grad():  # (heads' projection looked up here: benchmarks/bench_heads.py swaps in another)
            m = heads.c51_project(torch.softmax(next_out, dim=1), reward, discount, support, self.ends)
            target = m @ support
            edge = heads.edge_mass(m)
        return heads.c51_loss(out, m), target, edge


class TDLoss:
    """The loss function of an update (Acme's ``LossFn``): both nets and a batch in, a
    :class:`LossOutput` out. ``head``: :func:`head_loss`'s; ``double``: the online net picks the
    next action."""

    def __init__(self, head, double: bool):
        self.head = head
        self.double = double

    def next_outputs(self, online: QNetwork, target: QNetwork, next_obs: torch.Tensor) -> torch.Tensor:
        """The target net's outputs (B, K) at the next action."""
        with torch.no_grad():
            next_target = target.outputs(next_obs)  # B, A, K
            if self.double:  # the online net's expected Q picks the next action
                next_action = online(next_obs).argmax(dim=1)
            else:
                next_action = online.q_values(next_target).argmax(dim=1)
            return next_target[torch.arange(len(next_action), device=next_obs.device), next_action]

    def __call__(self, online, target, obs, action, reward, next_obs, discount, weights=None) -> LossOutput:
        """The loss of one batch; ``weights``: prioritized replay's importance-sampling weights."""
        next_out = self.next_outputs(online, target, next_obs)
        out_all = online.outputs(obs)
        out = out_all[torch.arange(len(action), device=action.device), action]  # B, K
        elementwise, target_value, edge = self.head(out, next_out, reward, discount, online.support)
        q = online.q_values(out_all.detach()).gather(1, action.unsqueeze(1)).squeeze(1)
        loss = (weights * elementwise).mean() if weights is not None else elementwise.mean()
        return LossOutput(loss, elementwise, target_value, q, edge)


def head_loss(params: DQNParams) -> HuberTD | QuantileTD | CategoricalTD:
    """The TD loss of the configured head (``distributional``)."""
    if params.distributional == "c51":
        assert params.v_min is not None and params.v_max is not None  # given or derived (DQNParams)
        return CategoricalTD(params.v_min, params.v_max)
    if params.distributional == "qr":
        return QuantileTD(params.qr_kappa)
    return HuberTD()


def make_loss(params: DQNParams) -> TDLoss:
    """The loss the config asks for: its head's TD loss at plain or double Q-learning's next action."""
    return TDLoss(head_loss(params), params.double)
