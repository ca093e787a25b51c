"""SAC's and REDQ's learner, in torch: replay fed by any worker at any time, trained at ``utd``.

An :class:`~mqttrl.plugin.AsyncLearner` (Ape-X style, as DQN's): workers act with the newest
policy and stream one-step transitions; the learner keeps a replay and does ``utd`` critic
updates per transition received (REDQ's update-to-data ratio G). One ``train_step`` is one
critic update:

1. ``a' ~ pi(s')`` with its log-density; a random subset of ``target_subset`` (M) of the
   ``critics`` (N) target critics, drawn afresh; ``y = r + discount (min_M Q'(s', a') - alpha log pi(a'|s'))``;
2. every critic regresses on ``y`` (the sum of their mean squared errors), then each target
   critic moves ``tau`` towards its critic;
3. every ``policy_every`` critic updates the policy maximises ``min`` (SAC) or ``mean`` (REDQ) of
   all critics' ``Q(s, a) - alpha log pi(a|s)`` (a reparameterised ``a``), and with ``autotune``
   the temperature follows the entropy target.

SAC is N = M = 2, ``utd`` 1, ``policy_every`` 1; REDQ (preset "redq") N = 10, M = 2, ``utd`` 20,
the policy once per env step (``policy_every = 0``: every ``utd`` critic updates). The replay, pacing,
temperature and checkpoints (numpy arrays plus JSON metadata: no pickle, no torch.load) are
:class:`.base.ReplayActorCritic`'s, shared with CrossQ.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch

from mqttrl.plugin import LearnerContext

from .base import ReplayActorCritic
from .common import SACParams
from .losses import critic_loss, soft_target
from .nets import CriticEnsemble, PolicyNet

__all__ = ["SACLearner"]


class SACLearner(ReplayActorCritic):
    """SAC (twin critics) or REDQ (an ensemble, a random subset in the target) over one replay."""

    ALGORITHM = "sac"

    def __init__(
        self,
        params: SACParams,
        obs_space: gym.Space,
        act_space: gym.Space,
        device: str = "cpu",
        seed: int = 0,
        context: LearnerContext | None = None,
    ):
        super().__init__(params, obs_space, act_space, device, seed, context)
        p = params
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = PolicyNet(self.info).to(self.device)
            self.critics = CriticEnsemble(p.critics, self.obs_dim, self.act_dim, p.hidden).to(self.device)
            self.target = CriticEnsemble(p.critics, self.obs_dim, self.act_dim, p.hidden).to(self.device)
        self.target.load_state_dict(self.critics.state_dict())
        self.target.requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=p.actor_lr, fused=self.fused)
        self.critic_opt = torch.optim.Adam(self.critics.parameters(), lr=p.critic_lr, fused=self.fused)
        self._target_params: list[torch.Tensor] = list(self.target.parameters())
        self._critic_params: list[torch.Tensor] = list(self.critics.parameters())

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {**super()._networks(), "target": self.target}

    def target_subset(self) -> torch.Tensor:
        """The target critics this update takes the minimum over: M of N, drawn without replacement."""
        p = self.params
        if p.target_subset == p.critics:
            return torch.arange(p.critics, device=self.device)
        chosen = np.sort(self.rng.choice(p.critics, p.target_subset, replace=False))
        return torch.as_tensor(chosen, device=self.device)

    def critic_targets(self, b: Mapping[str, torch.Tensor], subset: torch.Tensor) -> torch.Tensor:
        """The soft targets (B,) of batch ``b``: ``a' ~ pi(s')``, the minimum over the target critics ``subset``."""
        with torch.no_grad():
            next_action, next_logp = self.actor.sample(b["next_obs"], self.noise)
            next_q = self.target(b["next_obs"], next_action, subset)
            return soft_target(b["reward"], b["discount"], next_q, next_logp, self.log_alpha.exp())

    def train_step(self) -> dict[str, float]:
        """One critic update, and a policy/temperature update every ``policy_every``."""
        p = self.params
        b = self._batch()
        y = self.critic_targets(b, self.target_subset())
        q = self.critics(b["obs"], b["action"])
        loss_q = critic_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        loss_q.backward()
        self.critic_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, p.tau)
        self.updates += 1
        if self.updates % p.policy_period == 0:
            self._last_policy = self._policy_step(b["obs"], p.policy_q)
        return {
            "critic_loss": float(loss_q.detach()),
            "q_mean": float(q.detach().mean()),
            "target_mean": float(y.mean()),
            **self._last_policy,
            **self._pacing_metrics(),
        }
