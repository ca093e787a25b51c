"""What SAC's and CrossQ's learners share, in torch: the replay and its pacing, the policy and
temperature update, and the checkpoint's layout.

``ReplayActorCritic`` is an :class:`~mqttrl.plugin.AsyncLearner` without networks: a subclass
builds ``actor`` (a :class:`.nets.PolicyNet`), ``critics`` and the optimisers ``actor_opt`` and
``critic_opt``, and writes ``train_step``. Pacing is DQN's: the learner trains while it has done
fewer than ``utd`` critic updates per transition received since the replay held
``learning_starts``, and pauses the workers while far behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

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

from .common import check_spaces, default_target_entropy, net_info, sample_spec
from .losses import actor_loss, alpha_loss
from .replay import Replay

if TYPE_CHECKING:
    from .nets import PolicyNet


class ReplayActorCritic:
    """The replay, pacing, temperature and checkpoints of an off-policy squashed-Gaussian learner."""

    #: the ``algorithm`` its checkpoints name
    ALGORITHM: ClassVar[str] = "sac"
    actor: PolicyNet
    critics: torch.nn.Module
    actor_opt: torch.optim.Optimizer
    critic_opt: torch.optim.Optimizer

    def __init__(
        self,
        params: Any,
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
        assert isinstance(act_space, gym.spaces.Box)  # check_spaces took it
        self.info = net_info(self.obs_dim, act_space, p)
        self.spec = sample_spec(p, obs_space, act_space)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        #: the policy's sampling noise: the learner's own generator (CPU), saved in checkpoints
        self.noise = torch.Generator().manual_seed(seed)
        self.log_alpha = torch.tensor([float(np.log(p.alpha))], device=self.device, requires_grad=True)
        self.target_entropy = default_target_entropy(p, self.act_dim)
        # fused Adam (one kernel for all parameters) where torch has it: the same update, ~10 % less per
        # critic update at REDQ's sizes on a CPU, where Python's per-parameter loop is a large share
        self.fused = self.device.type in ("cpu", "cuda")
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=p.alpha_lr, fused=self.fused)
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

    def _pacing_metrics(self) -> dict[str, float]:
        return {
            "alpha": self.alpha,
            "buffer_size": float(self.size),
            "utd": self.updates / max(1, self.samples_added - (self.start_samples or 0)),
            "updates_forgiven": self.forgiven,
        }

    def _policy_step(self, obs: torch.Tensor, reduce: str) -> dict[str, float]:
        """The policy's update against the ``reduce`` ("min" or "mean") of the critics, held fixed,
        and, with autotune, the temperature's."""
        action, logp = self.actor.sample(obs, self.noise)
        self.critics.requires_grad_(False)
        try:
            q_pi = self.critics(obs, action)
        finally:
            self.critics.requires_grad_(True)
        loss_pi = actor_loss(q_pi, logp, self.log_alpha.detach().exp(), reduce)
        self.actor_opt.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.actor_opt.step()
        self.policy_updates += 1
        metrics = {"actor_loss": float(loss_pi.detach()), "entropy": float(-logp.detach().mean())}
        if self.params.autotune:
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

    def _networks(self) -> dict[str, torch.nn.Module]:
        """The modules a checkpoint holds, by prefix (SAC adds its target critics)."""
        return {"actor": self.actor, "critics": self.critics}

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_opt, "critic": self.critic_opt, "alpha": self.alpha_opt}

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        tensors: dict[str, np.ndarray] = {}
        for name, net in self._networks().items():
            tensors.update(export_module(net, f"{name}."))
        tensors["log_alpha"] = self.log_alpha.detach().cpu().numpy().copy()
        tensors["rng.noise"] = self.noise.get_state().numpy().copy()
        optimizers = {}
        for name, opt in self._optimizers().items():
            moments, steps = adam_moments(opt, f"opt.{name}.")
            tensors.update(moments)
            optimizers[name] = steps
        meta: dict[str, Any] = {
            "algorithm": self.ALGORITHM,
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
        if meta.get("algorithm") != self.ALGORITHM:
            raise ValueError(f"not a {self.ALGORITHM} checkpoint (algorithm={meta.get('algorithm')!r})")
        if dict(meta["net"]) != self.info or int(meta["critics"]) != self.params.critics:
            raise ValueError(
                f"checkpoint network {dict(meta['net'])} with {meta['critics']} critics differs from the "
                f"configured one {self.info} with {self.params.critics}"
            )
        for name, net in self._networks().items():
            load_module(net, tensors, f"{name}.")
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(np.array(tensors["log_alpha"], np.float32)))
        self.noise.set_state(torch.from_numpy(np.array(tensors["rng.noise"], np.uint8)))
        for name, opt in self._optimizers().items():
            load_adam_moments(opt, tensors, f"opt.{name}.", meta["optimizers"][name])
        self.updates = int(meta["updates"])
        self.policy_updates = int(meta["policy_updates"])
        self.samples_added = int(meta["samples_added"])
        self.start_samples = None if meta["start_samples"] is None else int(meta["start_samples"])
        self.forgiven = float(meta["updates_forgiven"])
        generator_from_json(self.rng, meta["rng_numpy"])
        if meta.get("replay"):
            self.replay.load_state(tensors, meta["replay"])
