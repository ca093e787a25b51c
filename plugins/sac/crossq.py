"""CrossQ's learner, in torch (Bhatt et al., ICLR 2024): SAC without target critics, with batch
renormalisation in the critics and the policy.

One ``train_step`` is one critic update, on a batch of B transitions:

1. ``a' ~ pi(s')`` with the policy's normalisation in eval mode (its running statistics), no gradient;
2. the joint forward: the critics, in training mode, take the 2B rows ``[(s, a); (s', a')]`` in one
   call, so their BatchRenorm layers normalise current and next state-actions with the same
   statistics (CrossQ's point: with a target network the two would see different ones); the output
   splits into ``Q(s, a)`` and ``Q(s', a')``;
3. ``y = r + discount (min over the critics of Q(s', a') - alpha log pi(a'|s'))``, a constant to the
   gradient (no target network: the same critics, detached); every critic regresses on ``y``
   (the sum of their mean squared errors, :func:`.losses.critic_loss`; SB3 halves it, which Adam
   does not see);
4. every ``policy_delay`` critic updates (the 1st, the 1 + delay-th, ...: SB3 starts at the
   delay-th, so a first model is trained at once here): the policy, its normalisation in training mode (its
   running statistics follow the replay's states), maximises ``min Q(s, a) - alpha log pi(a|s)``
   with the critics in eval mode (their running statistics, no update of them), and with
   ``autotune`` the temperature follows the entropy target, as SAC's.

Adam with ``(adam_beta1, adam_beta2)`` (CrossQ's 0.5, 0.999) for policy and critics; the
temperature's Adam keeps the default betas (SB3-contrib's). Outside a train step both networks
stay in eval mode. The policy is SAC's :class:`.nets.PolicyNet` with ``norm.{i}`` layers, so SAC's
actor, numpy forward, export and checkpoint reader serve CrossQ unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import torch

from mqttrl.plugin import LearnerContext

from .base import ReplayActorCritic
from .crossq_params import CrossQParams
from .losses import critic_loss, soft_target
from .nets import CriticEnsemble, PolicyNet

__all__ = ["CrossQLearner"]


class CrossQLearner(ReplayActorCritic):
    """CrossQ over one replay: BatchRenorm critics without targets, a joint forward, a delayed policy."""

    ALGORITHM = "crossq"

    def __init__(
        self,
        params: CrossQParams,
        obs_space: gym.Space,
        act_space: gym.Space,
        device: str = "cpu",
        seed: int = 0,
        context: LearnerContext | None = None,
    ):
        super().__init__(params, obs_space, act_space, device, seed, context)
        p = params
        norm = {"eps": p.batch_norm_eps, **p.renorm}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = PolicyNet(self.info, p.renorm).to(self.device).eval()
            self.critics = CriticEnsemble(p.critics, self.obs_dim, self.act_dim, p.critic_hidden, norm)
            self.critics = self.critics.to(self.device).eval()
        betas = (p.adam_beta1, p.adam_beta2)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=p.actor_lr, betas=betas, fused=self.fused)
        self.critic_opt = torch.optim.Adam(self.critics.parameters(), lr=p.critic_lr, betas=betas, fused=self.fused)

    def joint_forward(self, b: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Q(s, a), Q(s', a'), log pi(a'|s'))``, (N, B), (N, B) and (B,): one training-mode critic
        forward over both halves; ``a'`` from the policy in eval mode; the next-state half detached."""
        with torch.no_grad():
            next_action, next_logp = self.actor.sample(b["next_obs"], self.noise)
        self.critics.train()
        try:
            q_all = self.critics(torch.cat([b["obs"], b["next_obs"]]), torch.cat([b["action"], next_action]))
        finally:
            self.critics.eval()
        q, next_q = q_all.split(len(b["obs"]), dim=1)
        return q, next_q.detach(), next_logp

    def train_step(self) -> dict[str, float]:
        """One critic update, and a policy/temperature update every ``policy_delay``."""
        b = self._batch()
        q, next_q, next_logp = self.joint_forward(b)
        y = soft_target(b["reward"], b["discount"], next_q, next_logp, self.log_alpha.detach().exp())
        loss_q = critic_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        loss_q.backward()
        self.critic_opt.step()
        self.updates += 1
        if (self.updates - 1) % self.params.policy_delay == 0:  # the first update trains the policy too
            self.actor.train()
            try:
                self._last_policy = self._policy_step(b["obs"], "min")
            finally:
                self.actor.eval()
        return {
            "critic_loss": float(loss_q.detach()),
            "q_mean": float(q.detach().mean()),
            "target_mean": float(y.mean()),
            **self._last_policy,
            **self._pacing_metrics(),
        }
