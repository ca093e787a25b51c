"""PPO's learner side, in torch: the ``Agent`` module, a torch forward and the learner.

Only the learner process (and a worker or inference server that asks for the
torch forward) imports this module; :mod:`mqttrl_plugins.ppo` imports it
lazily, so a worker without torch never does. The weights layout, the
observation normalisation and the sample spec come from :mod:`.common`, so
``TorchForward`` and ``numpy_net.NumpyForward`` load the same tensors and
compute the same outputs, and the learner's log-probabilities of the actors'
(numpy) samples equal the actors' own to float32 rounding.

1. ``Agent``: actor and critic MLPs, or a CNN torso (:mod:`mqttrl.nets`) shared by an actor
   head and a critic head (CleanRL's layouts and initialisation);
2. ``TorchForward``: the forward contract of :mod:`.numpy_net`, in torch;
3. ``PPOLearner`` (a :class:`~mqttrl.plugin.algorithm.SyncLearner`): one
   ``train_round`` per model version, clipped surrogate, value loss, entropy
   bonus, linear schedules in env steps; checkpoints as numpy arrays plus JSON
   metadata (no pickle, no torch.load).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from mqttrl.plugin import (
    SampleBatch,
    Tensors,
    TorchTorso,
    export_module,
    load_module,
    load_optimizer_state,
    optimizer_state,
    orthogonal_init,
    rng_from_json,
    rng_to_json,
)

from .common import (
    LOG_SQRT_2PI,
    PPOParams,
    RunningMeanStd,
    check_spaces,
    full_info,
    initial_weights,
    mlp_scale,
    net_info,
    normalize_obs,
    obs_stats,
    obs_std,
    sample_spec,
    scale_obs,
)

#: torch modules of the hidden-layer activations (the names of ``common.ACTIVATIONS``)
TORCH_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


# --------------------------------------------------------------------------
# 1. The network
# --------------------------------------------------------------------------


def _layer(layer: nn.Linear, std: float, ortho: bool) -> nn.Linear:
    if ortho:
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(inp: int, hidden: list[int], out: int, activation: str, out_std: float, ortho: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = inp
    for h in hidden:
        layers += [_layer(nn.Linear(width, h), math.sqrt(2), ortho), TORCH_ACTIVATIONS[activation]()]
        width = h
    layers.append(_layer(nn.Linear(width, out), out_std, ortho))
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """The network of a ``net_info``: actor and critic MLPs over flattened (possibly normalised)
    observations, or a CNN torso shared by a linear actor head and a linear critic head.

    Every method takes observations as they come (uint8, bool or float; with obs_norm the
    normalised float32 ones) and converts inside, so a uint8 batch crosses to a GPU as uint8.
    """

    def __init__(self, info: Mapping[str, Any], ortho_init: bool = True, log_std_init: float = 0.0):
        super().__init__()
        self.continuous = continuous = bool(info["continuous"])
        act_dim = int(info["act_dim"])
        self.cnn = "torso" in info
        self.actor: nn.Module  # a Linear head over the torso, or an MLP
        self.critic: nn.Module
        if self.cnn:  # CleanRL's ppo_atari: network (gain sqrt(2)), actor (0.01), critic (1)
            self.torso = TorchTorso(info["torso"])
            self.actor = _layer(nn.Linear(self.torso.out_size, act_dim), 0.01, ortho_init)
            self.critic = _layer(nn.Linear(self.torso.out_size, 1), 1.0, ortho_init)
            if ortho_init:
                orthogonal_init(self.torso, math.sqrt(2))
            self.obs_scale = 1.0  # the torso scales
        else:
            hidden, activation = [int(h) for h in info["hidden"]], str(info["activation"])
            obs_dim = int(info["obs_dim"])
            self.critic = _mlp(obs_dim, hidden, 1, activation, 1.0, ortho_init)
            self.actor = _mlp(obs_dim, hidden, act_dim, activation, 0.01, ortho_init)
            self.obs_scale = 1.0 if info["obs_norm"] else mlp_scale(info)
        if continuous:
            self.actor_logstd = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """What the heads read: the torso's output, or the MLPs' flattened float input."""
        if self.cnn:
            return self.torso(x)
        x = x.float().flatten(1)
        return x * self.obs_scale if self.obs_scale != 1.0 else x

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy output: logits or Gaussian mean, value)."""
        h = self.features(x)
        return self.actor(h), self.critic(h).squeeze(-1)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(x)).squeeze(-1)

    def evaluate(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability of ``action``, policy entropy and value (the learner's forward pass)."""
        out, value = self(x)
        logprob, entropy = self._logprob_entropy(out, action)
        return logprob, entropy, value

    def _logprob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.continuous:
            logstd = self.actor_logstd.expand_as(out)
            logprob = (-0.5 * ((action - out) / logstd.exp()) ** 2 - logstd - LOG_SQRT_2PI).sum(-1)
            entropy = (0.5 + LOG_SQRT_2PI + logstd).sum(-1)
        else:
            logp = torch.log_softmax(out, dim=-1)
            logprob = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp.exp() * logp).sum(-1)
        return logprob, entropy


def _agent_from_info(info: Mapping[str, Any]) -> Agent:
    return Agent(info, ortho_init=False)


# --------------------------------------------------------------------------
# 2. The torch forward (worker or inference server)
# --------------------------------------------------------------------------


class TorchForward:
    """PPO's forward in torch; the same outputs as ``numpy_net.NumpyForward``.

    ``forward(obs)`` returns ``{"logits", "value"}`` (Discrete) or ``{"mean", "log_std", "value"}``
    (Box) as float32 numpy arrays for raw observations, normalised inside with the statistics
    of the loaded weights. Until weights are loaded it holds fresh ones (``initial_weights(seed)``).
    Leaves torch's thread count and global RNG alone.
    """

    def __init__(
        self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0, device: str = "cpu"
    ):
        obs_dim, continuous, act_dim = check_spaces(obs_space, act_space)
        self.obs_dim = obs_dim
        self.obs_shape = obs_dim.shape
        self.info = net_info(obs_dim, continuous, act_dim, params)
        self.device = torch.device(device)
        self.load_weights(initial_weights(self.info, seed, params.ortho_init, params.log_std_init), self.info)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors :meth:`PPOLearner.export_weights` makes; raises before anything is replaced."""
        full = full_info(self.info, info, self.obs_shape)
        with torch.random.fork_rng(devices=[]):  # building the modules draws from the global RNG
            agent = _agent_from_info(full)
        load_module(agent, tensors, ignore=("obs_norm.",))
        stats = obs_stats(tensors, full)
        agent.eval().to(self.device)
        self._state = (
            agent,
            None if stats is None else (stats[0], obs_std(stats[1])),
            float(full["obs_clip"]),
        )  # the swap
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        agent, stats, clip = self._state
        x = np.asarray(obs)  # in its own dtype: the agent converts (a uint8 batch goes to a GPU as uint8)
        if stats is not None:
            x = scale_obs(np.asarray(x, np.float32).reshape(len(x), self.obs_dim), *stats, clip)
        elif not x.flags.writeable:  # e.g. a request decoded from the wire; torch warns about read-only arrays
            x = x.copy()
        with torch.inference_mode():
            xt = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
            out, value = agent(xt)
            res = {"value": value.cpu().numpy()}
            if agent.continuous:
                res["mean"] = out.cpu().numpy()
                res["log_std"] = agent.actor_logstd.expand_as(out).contiguous().cpu().numpy()
            else:
                res["logits"] = out.cpu().numpy()
        return res

    def close(self) -> None:
        """Nothing to release."""


# --------------------------------------------------------------------------
# 3. The learner
# --------------------------------------------------------------------------


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    var = float(np.var(target))
    return float("nan") if var == 0 else 1.0 - float(np.var(target - pred)) / var


class PPOLearner:
    """PPO's learner: each round's batches (one per worker, all made with the current model
    version) are trained on for ``epochs`` passes, then the next version goes out."""

    #: demonstrations kept for fine-tuning (``demos.bc_coef``; :class:`.demo_clone.BCAnchor`)
    demo_bc = None

    def __init__(
        self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, device: str = "cpu", seed: int = 0
    ):
        self.params = p = params
        self.obs_dim, self.continuous, self.act_dim = check_spaces(obs_space, act_space)
        self.spec = sample_spec(params, obs_space, act_space)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.agent = Agent(self._info(), p.ortho_init, p.log_std_init).to(self.device)
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=p.lr, eps=p.adam_eps)
        self.obs_rms = RunningMeanStd(self.obs_dim) if p.obs_norm else None
        #: gradient (minibatch) steps done; what the node reports and checkpoints count
        self.updates = 0
        #: rounds trained (train_round calls with data); the version published after round r is r+1 ahead of the first
        self.rounds = 0
        #: transitions trained on, summed over all rounds (drives the schedules)
        self.samples_added = 0

    # ---- schedules

    def anneal_frac(self) -> float:
        """Multiplier of annealed values now: 1 at the start, anneal_final_frac after anneal_env_steps."""
        p = self.params
        done = min(1.0, self.samples_added / p.anneal_env_steps)
        return 1.0 - done * (1.0 - p.anneal_final_frac)

    def current_lr(self) -> float:
        return self.params.lr * (self.anneal_frac() if self.params.anneal_lr else 1.0)

    def current_clip(self) -> float:
        return self.params.clip_coef * (self.anneal_frac() if self.params.anneal_clip else 1.0)

    # ---- training

    def _stats(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        return (self.obs_rms.mean, self.obs_rms.var) if self.obs_rms is not None else (None, None)

    def train_round(self, batches: list[SampleBatch]) -> dict[str, float]:
        """Train ``epochs`` passes over the round's batches (validated, concatenated), then count the
        round; the obs statistics take in its observations only after (the next version carries them)."""
        batches = [b for b in batches if b.count]
        for b in batches:
            self.spec.validate(b.arrays, b.count)  # raises Rejected; nothing is dropped silently
        n = sum(b.count for b in batches)
        if n == 0:
            return {"transitions": 0.0, "rounds": float(self.rounds), "updates": float(self.updates)}
        cat = {k: np.concatenate([np.asarray(b.arrays[k]) for b in batches]) for k in self.spec.fields}
        data = self._round_tensors(cat, n)

        lr, clip = self.current_lr(), self.current_clip()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_mb = max(1, round(n / self.params.minibatch_size))
        sums, steps, stopped_early = self._epochs(data, n, n_mb, clip)

        # only now fold this round's raw observations into the statistics (they go out with the next version)
        if self.obs_rms is not None:
            self.obs_rms.update(cat["obs"])
        self.updates += steps
        self.rounds += 1
        self.samples_added += n
        metrics = {k: v / steps for k, v in sums.items()}
        metrics.update(
            explained_variance=explained_variance(cat["value"].astype(np.float64), cat["ret"].astype(np.float64)),
            lr=lr,
            clip_coef=clip,
            transitions=float(n),
            batches=float(len(batches)),
            # should be 1: the node gives a round only batches made with the current version
            model_versions=float(len({b.model_version for b in batches})),
            rounds=float(self.rounds),
            updates=float(self.updates),
            epochs_done=steps / n_mb,
            stopped_early=float(stopped_early),
            value_mean=float(cat["value"].mean()),
            ret_mean=float(cat["ret"].mean()),
        )
        if self.continuous:
            metrics["log_std_mean"] = float(self.agent.actor_logstd.detach().mean())
        if self.demo_bc is not None:
            metrics["demo_bc_weight"] = self.demo_bc.weight(self.samples_added)
        return metrics

    def _round_tensors(self, cat: dict[str, np.ndarray], n: int) -> tuple[torch.Tensor, ...]:
        """(obs, action, old_logprob, old_value, advantage, ret) of the round on the device, the obs
        normalised with the statistics of the version the actors used (see common's module docstring)."""
        # without obs_norm the observations go to the device in their own dtype and the agent converts
        dev, clip = self.device, self.params.obs_clip
        raw = normalize_obs(cat["obs"], *self._stats(), clip) if self.obs_rms is not None else cat["obs"]
        obs = torch.from_numpy(raw).to(dev)
        act_np = cat["action"].reshape(n, -1) if self.continuous else cat["action"]
        action = torch.from_numpy(np.ascontiguousarray(act_np)).to(dev)
        old_logprob = torch.from_numpy(cat["logprob"]).to(dev)  # np.concatenate made writable copies
        old_value = torch.from_numpy(cat["value"]).to(dev)
        advantage = torch.from_numpy(cat["advantage"]).to(dev)
        ret = torch.from_numpy(cat["ret"]).to(dev)
        return obs, action, old_logprob, old_value, advantage, ret

    def _epochs(
        self, data: tuple[torch.Tensor, ...], n: int, n_mb: int, clip: float
    ) -> tuple[dict[str, float], int, bool]:
        """Up to ``epochs`` passes of ``n_mb`` shuffled minibatches, stopping after an epoch whose mean
        KL passes ``target_kl``: (summed minibatch stats, gradient steps, whether it stopped early)."""
        p = self.params
        sums = dict.fromkeys(("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm"), 0.0)
        steps = 0
        for _epoch in range(p.epochs):
            epoch_kl = 0.0
            for mb in np.array_split(self.rng.permutation(n), n_mb):
                idx = torch.from_numpy(mb).to(self.device)
                obs, action, old_logprob, old_value, advantage, ret = (t[idx] for t in data)
                stats = self._update(obs, action, old_logprob, old_value, advantage, ret, clip)
                for k, v in stats.items():
                    sums[k] += v
                epoch_kl += stats["approx_kl"]
                steps += 1
            if p.target_kl and epoch_kl / n_mb > p.target_kl:
                return sums, steps, True
        return sums, steps, False

    def _update(self, obs, action, old_logprob, old_value, advantage, ret, clip: float) -> dict[str, float]:
        """One gradient step of the clipped PPO objective on one minibatch."""
        p = self.params
        logprob, entropy, value = self.agent.evaluate(obs, action)
        logratio = logprob - old_logprob
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()  # http://joschu.net/blog/kl-approx.html
            clipfrac = ((ratio - 1.0).abs() > clip).float().mean()

        if p.norm_adv and len(advantage) > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        pg_loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - clip, 1 + clip)).mean()

        if p.clip_vloss:
            v_clipped = old_value + (value - old_value).clamp(-p.clip_coef, p.clip_coef)
            v_loss = 0.5 * torch.max((value - ret) ** 2, (v_clipped - ret) ** 2).mean()
        else:
            v_loss = 0.5 * ((value - ret) ** 2).mean()
        entropy_mean = entropy.mean()
        loss = pg_loss - p.ent_coef * entropy_mean + p.vf_coef * v_loss
        if self.demo_bc is not None:  # demonstrations: the decaying cloning term (demo_clone.BCAnchor)
            loss = loss + self.demo_bc.loss(self)

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if p.max_grad_norm > 0:
            grad_norm = float(nn.utils.clip_grad_norm_(self.agent.parameters(), p.max_grad_norm))
        else:
            grad_norm = float(
                torch.linalg.vector_norm(
                    torch.stack([g.grad.norm() for g in self.agent.parameters() if g.grad is not None])
                )
            )
        self.optimizer.step()
        return {
            "policy_loss": float(pg_loss.detach()),
            "value_loss": float(v_loss.detach()),
            "entropy": float(entropy_mean.detach()),
            "approx_kl": float(approx_kl),
            "clipfrac": float(clipfrac),
            "grad_norm": grad_norm,
        }

    # ---- weights and checkpoints

    def _info(self) -> dict[str, Any]:
        return net_info(self.obs_dim, self.continuous, self.act_dim, self.params)

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        """Actor and critic (the actor computes values for GAE) plus, with obs_norm, the statistics
        (float64) that go with them; ``info["round"]`` is the number of rounds trained."""
        tensors = export_module(self.agent)
        if self.obs_rms is not None:
            tensors["obs_norm.mean"] = self.obs_rms.mean.copy()
            tensors["obs_norm.var"] = self.obs_rms.var.copy()
        return tensors, {**self._info(), "round": self.rounds}

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        """``include_replay`` is ignored: PPO keeps no data between rounds."""
        tensors = export_module(self.agent, "agent.")
        if self.obs_rms is not None:
            tensors["obs_norm.mean"] = self.obs_rms.mean.copy()
            tensors["obs_norm.var"] = self.obs_rms.var.copy()

        opt_meta = optimizer_state(self.optimizer, tensors)  # Adam moments and steps by flat name

        tensors["rng.torch"] = torch.get_rng_state().numpy().copy()
        meta: dict[str, Any] = {
            "algorithm": "ppo",
            "net": self._info(),
            "updates": self.updates,
            "rounds": self.rounds,
            "samples_added": self.samples_added,
            "obs_norm_count": self.obs_rms.count if self.obs_rms is not None else None,
            "optimizer": opt_meta,
            "rng_numpy": rng_to_json(self.rng.bit_generator.state),
        }
        return tensors, meta

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if meta.get("algorithm") != "ppo":
            raise ValueError(f"not a ppo checkpoint (algorithm={meta.get('algorithm')!r})")
        mine = self._info()
        if dict(meta["net"]) != mine:
            raise ValueError(f"checkpoint network {dict(meta['net'])} differs from the configured one {mine}")
        load_module(
            self.agent, {k: v for k, v in tensors.items() if k.startswith("agent.")}, "agent.", ignore=("obs_norm.",)
        )

        load_optimizer_state(self.optimizer, tensors, meta["optimizer"], self.device)

        if self.obs_rms is not None:
            self.obs_rms.mean = np.array(tensors["obs_norm.mean"], np.float64)
            self.obs_rms.var = np.array(tensors["obs_norm.var"], np.float64)
            self.obs_rms.count = float(meta["obs_norm_count"])
        self.updates = int(meta["updates"])
        self.rounds = int(meta["rounds"])
        self.samples_added = int(meta["samples_added"])
        self.rng.bit_generator.state = rng_from_json(meta["rng_numpy"])
        torch.set_rng_state(torch.from_numpy(np.array(tensors["rng.torch"], dtype=np.uint8)))
