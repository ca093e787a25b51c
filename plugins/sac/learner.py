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
the policy once per env step (``policy_every = 0``: every ``utd`` critic updates). Checkpoints are numpy arrays plus JSON metadata (no pickle, no torch.load).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from mqttrl.plugin import (
    LearnerContext,
    SampleBatch,
    Tensors,
    adam_moments,
    export_module,
    generator_from_json,
    generator_to_json,
    load_adam_moments,
    load_module,
)

from .common import SACParams, check_spaces, default_target_entropy, net_info, sample_spec
from .losses import actor_loss, alpha_loss, critic_loss, soft_target
from .nets import CriticEnsemble, PolicyNet
from .replay import Replay

__all__ = ["SACLearner"]


class SACLearner:
    """SAC (twin critics) or REDQ (an ensemble, a random subset in the target) over one replay."""

    def __init__(
        self,
        params: SACParams,
        obs_space: gym.Space,
        act_space: gym.Space,
        device: str = "cpu",
        seed: int = 0,
        context: LearnerContext | None = None,
    ):
        self.params = p = params
        #: the learner node's block timer (``context``): drawing rows from the replay is its "sample" block
        self.timed = (context or LearnerContext()).timed
        self.obs_dim, self.act_dim = check_spaces(obs_space, act_space)
        self.info = net_info(self.obs_dim, act_space, p)
        self.spec = sample_spec(p, obs_space, act_space)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        #: the policy's sampling noise: the learner's own generator (CPU), saved in checkpoints
        self.noise = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = PolicyNet(self.info).to(self.device)
            self.critics = CriticEnsemble(p.critics, self.obs_dim, self.act_dim, p.hidden).to(self.device)
            self.target = CriticEnsemble(p.critics, self.obs_dim, self.act_dim, p.hidden).to(self.device)
        self.target.load_state_dict(self.critics.state_dict())
        self.target.requires_grad_(False)
        self.log_alpha = torch.tensor([float(np.log(p.alpha))], device=self.device, requires_grad=True)
        self.target_entropy = default_target_entropy(p, self.act_dim)
        # fused Adam (one kernel for all parameters) where torch has it: the same update, ~10 % less per
        # critic update at REDQ's sizes on a CPU, where Python's per-parameter loop is a large share
        fused = self.device.type in ("cpu", "cuda")
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=p.actor_lr, fused=fused)
        self.critic_opt = torch.optim.Adam(self.critics.parameters(), lr=p.critic_lr, fused=fused)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=p.alpha_lr, fused=fused)
        self._target_params = list(self.target.parameters())
        self._critic_params = list(self.critics.parameters())
        self.replay = Replay(p.buffer_size, self.obs_dim, self.act_dim)
        #: critic updates done
        self.updates = 0
        #: policy updates done
        self.policy_updates = 0
        #: transitions ever added
        self.samples_added = 0
        #: updates owed beyond forgive_debt_above transitions' worth, written off
        self.forgiven = 0.0
        #: transitions received when the replay first held learning_starts (None: not yet)
        self.start_samples: int | None = None
        self._paused = False
        self._last_policy: dict[str, float] = {}

    # ---- pacing (as DQN's: train while below the ratio, pause workers while far below)

    def _debt(self) -> float:
        """Critic updates owed to reach ``utd`` updates per transition received since training could start
        (the transitions that filled the replay up to ``learning_starts`` owe none, as in SB3 and REDQ)."""
        if self.start_samples is None:
            return 0.0
        return (self.samples_added - self.start_samples) * self.params.utd - self.updates - self.forgiven

    @property
    def size(self) -> int:
        return self.replay.size

    def _ready(self) -> bool:
        return self.size >= max(self.params.learning_starts, self.params.batch_size)

    def train_due(self) -> bool:
        return self._ready() and self._debt() > 0

    def behind(self) -> bool:
        if not self._ready():  # nothing can be trained yet: pausing workers would deadlock
            return False
        limit = self.params.max_debt_transitions * self.params.utd
        debt = self._debt()
        self._paused = debt > (limit / 2 if self._paused else limit)  # hysteresis
        return self._paused

    def add(self, batch: SampleBatch) -> int:
        self.spec.validate(batch.arrays, batch.count)  # raises Rejected
        n = batch.count
        self.replay.add(batch.arrays, n)
        self.samples_added += n
        if self.start_samples is None and self._ready():  # training starts: owe utd updates per transition from here
            self.start_samples = self.samples_added - 1
        over = self._debt() - self.params.forgive_debt_above * self.params.utd
        if over > 0:
            self.forgiven += over
        return n

    # ---- training

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def _batch(self) -> dict[str, torch.Tensor]:
        idx = self.rng.integers(0, self.size, self.params.batch_size)
        with self.timed("sample"):  # the learner node's "sample" block: the rows out of the replay
            rows = self.replay.sample(idx)
        return {k: torch.from_numpy(v).to(self.device) for k, v in rows.items()}

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
            self._last_policy = self._policy_step(b["obs"])
        return {
            "critic_loss": float(loss_q.detach()),
            "q_mean": float(q.detach().mean()),
            "target_mean": float(y.mean()),
            **self._last_policy,
            "alpha": self.alpha,
            "buffer_size": float(self.size),
            "utd": self.updates / max(1, self.samples_added - (self.start_samples or 0)),
            "updates_forgiven": self.forgiven,
        }

    def _policy_step(self, obs: torch.Tensor) -> dict[str, float]:
        """The policy's update (critics held fixed) and, with autotune, the temperature's."""
        p = self.params
        action, logp = self.actor.sample(obs, self.noise)
        self.critics.requires_grad_(False)
        try:
            q_pi = self.critics(obs, action)
        finally:
            self.critics.requires_grad_(True)
        loss_pi = actor_loss(q_pi, logp, self.log_alpha.detach().exp(), p.policy_q)
        self.actor_opt.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.actor_opt.step()
        self.policy_updates += 1
        metrics = {"actor_loss": float(loss_pi.detach()), "entropy": float(-logp.detach().mean())}
        if p.autotune:
            loss_a = alpha_loss(self.log_alpha, logp, self.target_entropy)
            self.alpha_opt.zero_grad(set_to_none=True)
            loss_a.backward()
            self.alpha_opt.step()
            metrics["alpha_loss"] = float(loss_a.detach())
        return metrics

    # ---- weights and checkpoints

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        """The policy (what actors need) and its description, with ``updates`` (0: actors explore uniformly)."""
        return export_module(self.actor), {**self.info, "updates": self.updates}

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        tensors = {
            **export_module(self.actor, "actor."),
            **export_module(self.critics, "critics."),
            **export_module(self.target, "target."),
            "log_alpha": self.log_alpha.detach().cpu().numpy().copy(),
            "rng.noise": self.noise.get_state().numpy().copy(),
        }
        optimizers = {}
        for name, opt in (("actor", self.actor_opt), ("critic", self.critic_opt), ("alpha", self.alpha_opt)):
            moments, steps = adam_moments(opt, f"opt.{name}.")
            tensors.update(moments)
            optimizers[name] = steps
        meta: dict[str, Any] = {
            "algorithm": "sac",
            "net": dict(self.info),
            "critics": self.params.critics,
            "updates": self.updates,
            "policy_updates": self.policy_updates,
            "samples_added": self.samples_added,
            "start_samples": self.start_samples,
            "updates_forgiven": self.forgiven,
            "optimizers": optimizers,
            "rng_numpy": generator_to_json(self.rng),
            "replay": None,
        }
        if include_replay:
            replay_tensors, meta["replay"] = self.replay.state()
            tensors.update(replay_tensors)
        return tensors, meta

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if meta.get("algorithm") != "sac":
            raise ValueError(f"not a sac checkpoint (algorithm={meta.get('algorithm')!r})")
        if dict(meta["net"]) != self.info or int(meta["critics"]) != self.params.critics:
            raise ValueError(
                f"checkpoint network {dict(meta['net'])} with {meta['critics']} critics differs from the "
                f"configured one {self.info} with {self.params.critics}"
            )
        load_module(self.actor, tensors, "actor.")
        load_module(self.critics, tensors, "critics.")
        load_module(self.target, tensors, "target.")
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(np.array(tensors["log_alpha"], np.float32)))
        self.noise.set_state(torch.from_numpy(np.array(tensors["rng.noise"], np.uint8)))
        for name, opt in (("actor", self.actor_opt), ("critic", self.critic_opt), ("alpha", self.alpha_opt)):
            load_adam_moments(opt, tensors, f"opt.{name}.", meta["optimizers"][name])
        self.updates = int(meta["updates"])
        self.policy_updates = int(meta["policy_updates"])
        self.samples_added = int(meta["samples_added"])
        self.start_samples = None if meta["start_samples"] is None else int(meta["start_samples"])
        self.forgiven = float(meta["updates_forgiven"])
        generator_from_json(self.rng, meta["rng_numpy"])
        if meta.get("replay"):
            self.replay.load_state(tensors, meta["replay"])
