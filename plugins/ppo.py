"""PPO (clipped surrogate, GAE), one synchronous round per model version.

Read top to bottom, like CleanRL's ``ppo.py``:

1. ``PPOParams``: the hyperparameters (``[algorithm]`` in a config file);
2. ``Agent``: separate actor and critic MLPs; a Categorical policy for
   Discrete actions, a Gaussian with a state-independent log-std for Box
   actions; ``RunningMeanStd`` and ``normalize_obs`` for optional observation
   normalisation;
3. ``sample_spec``: what one transition of a finished rollout looks like on the wire;
4. ``compute_gae``: GAE(lambda) advantages and returns;
5. ``PPOActor``: worker side; samples actions, records ``rollout_steps`` steps
   per env, bootstraps truncated episodes, computes advantages and returns,
   then hands the whole rollout over as one batch;
6. ``PPOLearner``: ``train_round`` runs ``epochs`` passes of minibatch PPO
   updates over the round's batches; checkpoints as numpy arrays plus JSON
   metadata (no pickle, no torch.load);
7. the ``mqttrl_register_algorithms`` hook.

The sync protocol, as PPO sees it. With model version v every worker's actor
collects ``rollout_steps`` steps in each of its envs (``pending()`` is 0
until then), computes advantages with its copy of the critic and sends the
rollout as one batch. The learner trains on all batches of round v and
publishes v+1; workers wait for it before they step again. A rollout is
therefore always on-policy: logprob and value in a batch come from exactly the
weights the learner starts the round from.

Observation normalisation (``obs_norm``). The running mean and variance are
part of the weights (``obs_norm.mean``, ``obs_norm.var``), so an actor
normalises with exactly the statistics of the version it acts with. Batches
carry the *raw* observations. The learner normalises them with its current
statistics, which are the ones it exported with version v (so training sees
the very inputs the actors saw), trains, and only then folds the round's raw
observations into the statistics, which go out with v+1. Updating before
training would train on inputs that differ from the ones the actors' logprobs
and values were computed on, and ratio and value clipping would be off from
the first minibatch. Both sides normalise with the same numpy function, so
their inputs are bitwise identical.

Truncation is bootstrapped (as in SB3 and recent CleanRL): where an episode
was truncated (time limit) rather than terminated, the actor adds
``gamma * V(final obs)`` to that step's reward, computed with its own critic;
GAE then cuts the trace there like at a termination.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs
import gymnasium as gym
import numpy as np
import torch
from torch import nn

from mqttrl.algorithm import ActorContext, AlgorithmInfo
from mqttrl.config import ConfigError
from mqttrl.hookspecs import hookimpl
from mqttrl.wire import FieldSpec, SampleBatch, SampleSpec

Tensors = dict[str, np.ndarray]


# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------


def _positive(inst, attribute, value):
    if value <= 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0")


def _non_negative(inst, attribute, value):
    if value < 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be >= 0")


def _unit(inst, attribute, value):
    if not 0 <= value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be between 0 and 1")


def _unit_positive(inst, attribute, value):
    if not 0 < value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0 and <= 1")


def _check_hidden(inst, attribute, value):
    if not value or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value):
        raise ConfigError(f"{attribute.name}={value!r}: must be a non-empty list of positive integers, e.g. [64, 64]")


ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _check_activation(inst, attribute, value):
    if value not in ACTIVATIONS:
        raise ConfigError(f"{attribute.name}={value!r}: allowed values are {', '.join(map(repr, ACTIVATIONS))}")


@attrs.define
class PPOParams:
    # --- rollouts (worker side)
    #: env steps each env of each worker collects per round; a worker's batch is num_envs * rollout_steps
    rollout_steps: int = attrs.field(default=64, validator=_positive)
    #: discount per env step
    gamma: float = attrs.field(default=0.98, validator=_unit_positive)
    #: GAE lambda (0: one-step TD advantages, 1: Monte Carlo returns minus the value)
    gae_lambda: float = attrs.field(default=0.8, validator=_unit)
    # --- optimisation (learner side)
    #: Adam learning rate at the start
    lr: float = attrs.field(default=1e-3, validator=_positive)
    #: Adam epsilon
    adam_eps: float = attrs.field(default=1e-5, validator=_positive)
    #: passes over each round's transitions
    epochs: int = attrs.field(default=20, validator=_positive)
    #: transitions per gradient step; a round of N transitions is split into
    #: round(N / minibatch_size) (at least 1) near-equal shuffled minibatches
    minibatch_size: int = attrs.field(default=256, validator=_positive)
    #: PPO clip range of the probability ratio
    clip_coef: float = attrs.field(default=0.2, validator=_positive)
    #: clip the value loss around the rollout's values (CleanRL style; the range is clip_coef, never annealed)
    clip_vloss: bool = False
    #: weight of the value loss (0.5 * squared error, as CleanRL; vf_coef=1 equals SB3's vf_coef=0.5)
    vf_coef: float = attrs.field(default=1.0, validator=_non_negative)
    #: weight of the entropy bonus
    ent_coef: float = attrs.field(default=0.0, validator=_non_negative)
    #: clip the gradient's global norm to this (0: no clipping)
    max_grad_norm: float = attrs.field(default=0.5, validator=_non_negative)
    #: normalise advantages to mean 0, std 1 within each minibatch
    norm_adv: bool = True
    #: stop a round's remaining epochs once the approximate KL exceeds this (0: never)
    target_kl: float = attrs.field(default=0.0, validator=_non_negative)
    # --- schedules: linear in env steps trained on (summed over all workers),
    # so a config means the same with 1 or 10 workers; the learner counts them
    # itself (samples_added), the value at round r uses the count before r
    #: anneal lr linearly from lr to lr * anneal_final_frac
    anneal_lr: bool = True
    #: anneal clip_coef the same way (the value-loss clip range stays fixed)
    anneal_clip: bool = True
    #: env steps over which the annealed values fall; afterwards they stay at their final value
    anneal_env_steps: int = attrs.field(default=100_000, validator=_positive)
    #: final value of an annealed quantity as a share of its start value (0: SB3/CleanRL's decay to 0)
    anneal_final_frac: float = attrs.field(default=0.0, validator=_unit)
    # --- network
    #: sizes of the hidden layers of both the actor and the critic MLP
    hidden: list = attrs.field(factory=lambda: [64, 64], validator=_check_hidden)
    #: hidden-layer activation: "tanh" or "relu"
    activation: str = attrs.field(default="tanh", validator=_check_activation)
    #: orthogonal init (hidden gain sqrt(2), policy head 0.01, value head 1), zero biases
    ortho_init: bool = True
    #: Box actions: initial log standard deviation of the Gaussian policy
    log_std_init: float = 0.0
    # --- observation normalisation (statistics travel with the weights)
    #: normalise observations with a running mean and variance
    obs_norm: bool = False
    #: clip normalised observations to [-obs_clip, obs_clip]
    obs_clip: float = attrs.field(default=10.0, validator=_positive)


# --------------------------------------------------------------------------
# 2. Networks and observation statistics
# --------------------------------------------------------------------------


def _spaces(obs_space: gym.Space, act_space: gym.Space) -> tuple[int, bool, int]:
    """(flat obs size, continuous?, number of actions or flat action size)."""
    if not isinstance(obs_space, gym.spaces.Box) or obs_space.shape is None:
        raise TypeError(f"ppo needs a Box observation space, got {obs_space!r}")
    obs_dim = int(np.prod(obs_space.shape, dtype=np.int64))
    if isinstance(act_space, gym.spaces.Discrete):
        if act_space.start != 0:
            raise TypeError(f"ppo needs Discrete actions numbered from 0, got {act_space!r}")
        return obs_dim, False, int(act_space.n)
    if isinstance(act_space, gym.spaces.Box) and np.issubdtype(act_space.dtype, np.floating):
        return obs_dim, True, int(np.prod(act_space.shape, dtype=np.int64))
    raise TypeError(f"ppo supports Discrete or float Box action spaces, got {act_space!r}")


def _layer(layer: nn.Linear, std: float, ortho: bool) -> nn.Linear:
    if ortho:
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(inp: int, hidden: list[int], out: int, activation: str, out_std: float, ortho: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = inp
    for h in hidden:
        layers += [_layer(nn.Linear(width, h), math.sqrt(2), ortho), ACTIVATIONS[activation]()]
        width = h
    layers.append(_layer(nn.Linear(width, out), out_std, ortho))
    return nn.Sequential(*layers)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class Agent(nn.Module):
    """Actor and critic MLPs over flattened (possibly normalised) observations."""

    def __init__(self, obs_dim: int, act_dim: int, continuous: bool, hidden: list[int], activation: str,
                 ortho_init: bool = True, log_std_init: float = 0.0):
        super().__init__()
        self.continuous = continuous
        self.critic = _mlp(obs_dim, hidden, 1, activation, 1.0, ortho_init)
        self.actor = _mlp(obs_dim, hidden, act_dim, activation, 0.01, ortho_init)
        if continuous:
            self.actor_logstd = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def sample(self, x: torch.Tensor, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A sampled action and its log-probability."""
        out = self.actor(x)
        if self.continuous:
            std = self.actor_logstd.exp().expand_as(out)
            action = out + std * torch.randn(out.shape, generator=gen, dtype=out.dtype)
        else:
            action = torch.multinomial(torch.softmax(out, dim=-1), 1, generator=gen).squeeze(-1)
        logprob, _ = self._logprob_entropy(out, action)
        return action, logprob

    def mode(self, x: torch.Tensor) -> torch.Tensor:
        """The greedy action: the argmax, or the Gaussian's mean."""
        out = self.actor(x)
        return out if self.continuous else out.argmax(dim=-1)

    def evaluate(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability of ``action``, policy entropy and value (the learner's forward pass)."""
        logprob, entropy = self._logprob_entropy(self.actor(x), action)
        return logprob, entropy, self.value(x)

    def _logprob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.continuous:
            logstd = self.actor_logstd.expand_as(out)
            logprob = (-0.5 * ((action - out) / logstd.exp()) ** 2 - logstd - _LOG_SQRT_2PI).sum(-1)
            entropy = (0.5 + _LOG_SQRT_2PI + logstd).sum(-1)
        else:
            logp = torch.log_softmax(out, dim=-1)
            logprob = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp.exp() * logp).sum(-1)
        return logprob, entropy


class RunningMeanStd:
    """Running mean and variance of observations (parallel/Chan update, as SB3's)."""

    def __init__(self, dim: int):
        self.mean = np.zeros(dim, np.float64)
        self.var = np.ones(dim, np.float64)
        self.count = 1e-4

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(len(x), -1)
        if not len(x):
            return
        b_mean, b_var, b_count = x.mean(0), x.var(0), len(x)
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean = self.mean + delta * b_count / total
        self.var = (self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total) / total
        self.count = total


def normalize_obs(obs: np.ndarray, mean: np.ndarray | None, var: np.ndarray | None, clip: float) -> np.ndarray:
    """Flattened float32 observations, normalised when statistics are given.

    Actor and learner both call this, so they feed the networks identical inputs.
    """
    x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    if mean is None:
        return x
    return np.clip((x - mean) / np.sqrt(var + 1e-8), -clip, clip).astype(np.float32)


def _net_info(obs_dim: int, continuous: bool, act_dim: int, params: PPOParams) -> dict[str, Any]:
    return {
        "obs_dim": obs_dim,
        "continuous": continuous,
        "act_dim": act_dim,
        "hidden": list(params.hidden),
        "activation": params.activation,
        "obs_norm": bool(params.obs_norm),
        "obs_clip": float(params.obs_clip),
    }


def _agent_from_info(info: Mapping[str, Any]) -> Agent:
    return Agent(int(info["obs_dim"]), int(info["act_dim"]), bool(info["continuous"]),
                 [int(h) for h in info["hidden"]], str(info["activation"]), ortho_init=False)


def _load_net(net: nn.Module, tensors: Mapping[str, np.ndarray], prefix: str = "") -> None:
    """Copy numpy arrays into ``net``; names and shapes must match exactly."""
    own = net.state_dict()
    names = {k[len(prefix):] for k in tensors if k.startswith(prefix) and not k.startswith(prefix + "obs_norm.")}
    if names != set(own):
        raise ValueError(
            f"weights do not fit the network: missing {sorted(set(own) - names)}, unexpected {sorted(names - set(own))}"
        )
    new = {}
    for name, ref in own.items():
        arr = np.asarray(tensors[prefix + name])
        if tuple(arr.shape) != tuple(ref.shape):
            raise ValueError(f"weight {prefix + name} has shape {arr.shape}, the network needs {tuple(ref.shape)}")
        new[name] = torch.as_tensor(np.array(arr, dtype=np.float32))  # a copy: the source may be read-only
    net.load_state_dict(new, strict=True)


def _export_net(net: nn.Module, prefix: str = "") -> Tensors:
    return {prefix + k: v.detach().cpu().numpy().astype(np.float32, copy=True) for k, v in net.state_dict().items()}


# --------------------------------------------------------------------------
# 3. Sample spec: one transition of a finished rollout
# --------------------------------------------------------------------------


def sample_spec(params: PPOParams, obs_space: gym.Space, act_space: gym.Space) -> SampleSpec:
    """``obs`` is raw (never normalised); ``action`` the raw policy sample (Box: before clipping
    to the bounds); ``logprob``/``value`` as the actor computed them; ``advantage``/``ret`` from GAE."""
    _, continuous, act_dim = _spaces(obs_space, act_space)
    if continuous:
        action = FieldSpec("float32", tuple(int(s) for s in act_space.shape))
    else:
        action = FieldSpec("int64", (), low=0, high=act_dim - 1)
    return SampleSpec(
        fields={
            "obs": FieldSpec("float32", tuple(int(s) for s in obs_space.shape)),
            "action": action,
            "logprob": FieldSpec("float32", ()),
            "value": FieldSpec("float32", ()),
            "advantage": FieldSpec("float32", ()),
            "ret": FieldSpec("float32", ()),
        }
    )


# --------------------------------------------------------------------------
# 4. Generalised advantage estimation
# --------------------------------------------------------------------------


def compute_gae(rewards: np.ndarray, values: np.ndarray, ended: np.ndarray, last_value: np.ndarray,
                gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) over arrays of shape (T, num_envs).

    ``ended[t]``: the episode ended at step t (terminated or truncated), so
    step t+1 starts a new one and nothing flows back across it (a truncated
    step's reward already holds its bootstrap). ``last_value``: V of the obs
    after step T-1. Returns (advantages, returns), float64.
    """
    T = len(rewards)
    adv = np.zeros((T, *np.shape(last_value)), np.float64)
    last = np.zeros(np.shape(last_value), np.float64)
    for t in reversed(range(T)):
        next_value = last_value if t == T - 1 else values[t + 1]
        nonterminal = 1.0 - ended[t]
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + values


# --------------------------------------------------------------------------
# 5. Actor (worker side)
# --------------------------------------------------------------------------


@attrs.frozen
class _Policy:
    """What one model version consists of; swapped as a whole."""

    agent: Agent
    mean: np.ndarray | None
    var: np.ndarray | None
    round: int


class PPOActor:
    def __init__(self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext):
        self.params = p = params
        self.obs_dim, self.continuous, self.act_dim = _spaces(obs_space, act_space)
        self.obs_shape = tuple(obs_space.shape)
        self.act_shape = tuple(act_space.shape) if self.continuous else ()
        if self.continuous:
            self.low = np.asarray(act_space.low, np.float32).reshape(self.act_shape)
            self.high = np.asarray(act_space.high, np.float32).reshape(self.act_shape)
        self.num_envs = ctx.num_envs
        self.info = _net_info(self.obs_dim, self.continuous, self.act_dim, p)
        self.gen = torch.Generator().manual_seed(ctx.seed)
        with torch.random.fork_rng(devices=[]):  # leave the process-wide torch RNG alone
            torch.manual_seed(ctx.seed)
            agent = Agent(self.obs_dim, self.act_dim, self.continuous, list(p.hidden), p.activation, p.ortho_init, p.log_std_init)
        agent.eval()
        stats = (np.zeros(self.obs_dim), np.ones(self.obs_dim)) if p.obs_norm else (None, None)
        self.policy = _Policy(agent, *stats, round=-1)
        #: finished rollouts waiting for take()
        self.ready: list[Tensors] = []
        self._new_rollout()

    def _new_rollout(self) -> None:
        T, E = self.params.rollout_steps, self.num_envs
        self.t = 0
        self.buf_obs = np.zeros((T, E, *self.obs_shape), np.float32)
        self.buf_action = np.zeros((T, E, *self.act_shape), np.float32 if self.continuous else np.int64)
        self.buf_logprob = np.zeros((T, E), np.float32)
        self.buf_value = np.zeros((T, E), np.float32)
        self.buf_reward = np.zeros((T, E), np.float64)
        self.buf_ended = np.zeros((T, E), np.float64)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Swap in a new model version (nets and obs statistics together).

        A rollout half collected with another version is dropped, so a batch
        never mixes versions (in the sync protocol this happens only when a
        round went on without this worker); finished rollouts are kept.
        """
        for key in ("obs_dim", "continuous", "act_dim", "obs_norm"):
            if key in info and info[key] != self.info[key]:
                raise ValueError(f"weights are for {key}={info[key]!r}, this actor has {key}={self.info[key]!r}")
        full = {**self.info, **{k: info[k] for k in ("hidden", "activation", "obs_clip") if k in info}}
        with torch.random.fork_rng(devices=[]):
            agent = _agent_from_info(full)
        _load_net(agent, tensors)  # raises before anything is replaced
        agent.eval()
        mean = var = None
        if self.params.obs_norm:
            mean = np.array(tensors["obs_norm.mean"], np.float64).reshape(self.obs_dim)
            var = np.array(tensors["obs_norm.var"], np.float64).reshape(self.obs_dim)
        new_round = int(info.get("round", -1))
        if self.t and new_round != self.policy.round:
            self._new_rollout()
        self.info = full
        self.policy = _Policy(agent, mean, var, new_round)  # the swap: one assignment

    def discard(self) -> None:
        """Drop everything not yet taken (the sync worker calls this when a round finished
        without it: its partial share was made with a version the learner has moved past)."""
        self.ready = []
        self._new_rollout()

    def _input(self, policy: _Policy, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(normalize_obs(obs, policy.mean, policy.var, self.info["obs_clip"]))

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Env-ready actions (Box: clipped to the bounds) and extras: logprob, value and,
        for Box actions, the raw sample ``raw_action`` the logprob belongs to."""
        policy = self.policy
        x = self._input(policy, obs)
        with torch.inference_mode():
            if greedy:
                action = policy.agent.mode(x).numpy()
                return self._env_action(action), {}
            if len(obs) != self.num_envs:
                raise ValueError(f"act() got {len(obs)} observations for {self.num_envs} envs (greedy=False needs one per env)")
            action, logprob = policy.agent.sample(x, self.gen)
            value = policy.agent.value(x)
        action = action.numpy()
        extras = {"logprob": logprob.numpy().astype(np.float32), "value": value.numpy().astype(np.float32)}
        if self.continuous:
            extras["raw_action"] = action.astype(np.float32).reshape(len(obs), *self.act_shape)
        return self._env_action(action), extras

    def _env_action(self, action: np.ndarray) -> np.ndarray:
        if not self.continuous:
            return action.astype(np.int64)
        return np.clip(action.reshape(len(action), *self.act_shape), self.low, self.high).astype(np.float32)

    def _values(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self.policy.agent.value(self._input(self.policy, obs)).numpy().astype(np.float64)

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated) -> None:
        p, t = self.params, self.t
        if "logprob" not in extras or "value" not in extras:
            raise ValueError("ppo record() needs the extras of a non-greedy act() (logprob, value)")
        terminated = np.asarray(terminated, bool)
        ended = terminated | np.asarray(truncated, bool)
        last = t == p.rollout_steps - 1
        reward = np.asarray(rewards, np.float64).copy()
        # V(next_obs): for truncated episodes (the true final obs) and after the last step (bootstrap)
        need = (ended & ~terminated) | last
        next_value = self._values(next_obs) if need.any() else None
        bootstrap = ended & ~terminated
        if bootstrap.any():
            reward[bootstrap] += p.gamma * next_value[bootstrap]
        self.buf_obs[t] = np.asarray(obs, np.float32).reshape(self.num_envs, *self.obs_shape)
        raw = extras["raw_action"] if self.continuous else actions
        self.buf_action[t] = np.asarray(raw).reshape(self.num_envs, *self.act_shape)
        self.buf_logprob[t] = extras["logprob"]
        self.buf_value[t] = extras["value"]
        self.buf_reward[t] = reward
        self.buf_ended[t] = ended
        self.t += 1
        if last:
            self._finish(next_value)

    def _finish(self, last_value: np.ndarray) -> None:
        """Advantages and returns for the finished rollout; it becomes ready to take()."""
        p = self.params
        values = self.buf_value.astype(np.float64)
        adv, ret = compute_gae(self.buf_reward, values, self.buf_ended, last_value, p.gamma, p.gae_lambda)
        n = p.rollout_steps * self.num_envs
        self.ready.append({
            "obs": self.buf_obs.reshape(n, *self.obs_shape),
            "action": self.buf_action.reshape(n, *self.act_shape),
            "logprob": self.buf_logprob.reshape(n),
            "value": self.buf_value.reshape(n),
            "advantage": adv.astype(np.float32).reshape(n),
            "ret": ret.astype(np.float32).reshape(n),
        })
        self._new_rollout()

    def pending(self) -> int:
        return sum(len(r["logprob"]) for r in self.ready)

    def take(self) -> Tensors:
        ready, self.ready = self.ready, []
        if not ready:
            return {}  # the worker sends nothing for an empty dict
        if len(ready) == 1:
            return ready[0]
        return {k: np.concatenate([r[k] for r in ready]) for k in ready[0]}


# --------------------------------------------------------------------------
# 6. Learner
# --------------------------------------------------------------------------


def _json_rng(state: Any) -> Any:
    """A bit-generator state with its big integers as strings (JSON-safe everywhere)."""
    if isinstance(state, dict):
        return {k: _json_rng(v) for k, v in state.items()}
    if isinstance(state, (int, np.integer)) and not isinstance(state, bool):
        return str(int(state))
    return state


def _unjson_rng(state: Any) -> Any:
    if isinstance(state, dict):
        return {k: _unjson_rng(v) for k, v in state.items()}
    if isinstance(state, str) and state.lstrip("-").isdigit():
        return int(state)
    return state


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    var = float(np.var(target))
    return float("nan") if var == 0 else 1.0 - float(np.var(target - pred)) / var


class PPOLearner:
    def __init__(self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, device: str = "cpu", seed: int = 0):
        self.params = p = params
        self.obs_dim, self.continuous, self.act_dim = _spaces(obs_space, act_space)
        self.spec = sample_spec(params, obs_space, act_space)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.agent = Agent(self.obs_dim, self.act_dim, self.continuous, list(p.hidden), p.activation, p.ortho_init,
                           p.log_std_init).to(self.device)
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=p.lr, eps=p.adam_eps)
        self.obs_rms = RunningMeanStd(self.obs_dim) if p.obs_norm else None
        #: gradient (minibatch) steps done; what the node reports and checkpoints count
        self.updates = 0
        #: rounds trained (train_round calls with data); the version published after round r is r+1 ahead of the first
        self.rounds = 0
        #: transitions trained on, summed over all rounds (drives the schedules)
        self.samples_added = 0

    # ---- the async protocol does not apply

    def add(self, batch: SampleBatch) -> int:
        raise NotImplementedError("ppo is a sync algorithm: the node gives each round's batches to train_round(), never add()")

    def train_due(self) -> bool:
        return False

    def behind(self) -> bool:
        return False

    def train_step(self) -> dict[str, float]:
        raise NotImplementedError("ppo is a sync algorithm: the node calls train_round(batches), not train_step()")

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
        p = self.params
        batches = [b for b in batches if b.count]
        for b in batches:
            self.spec.validate(b.arrays, b.count)  # raises Rejected; nothing is dropped silently
        n = sum(b.count for b in batches)
        if n == 0:
            return {"transitions": 0.0, "rounds": float(self.rounds), "updates": float(self.updates)}
        cat = {k: np.concatenate([np.asarray(b.arrays[k]) for b in batches]) for k in self.spec.fields}

        # normalise with the statistics of the version the actors used (see the module docstring)
        dev = self.device
        obs = torch.from_numpy(normalize_obs(cat["obs"], *self._stats(), p.obs_clip)).to(dev)
        act_np = cat["action"].reshape(n, -1) if self.continuous else cat["action"]
        action = torch.from_numpy(np.ascontiguousarray(act_np)).to(dev)
        old_logprob = torch.from_numpy(cat["logprob"]).to(dev)  # np.concatenate made writable copies
        old_value = torch.from_numpy(cat["value"]).to(dev)
        advantage = torch.from_numpy(cat["advantage"]).to(dev)
        ret = torch.from_numpy(cat["ret"]).to(dev)

        lr, clip = self.current_lr(), self.current_clip()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n_mb = max(1, round(n / p.minibatch_size))
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0, "grad_norm": 0.0}
        steps = 0
        stopped_early = False
        for _epoch in range(p.epochs):
            epoch_kl = 0.0
            for mb in np.array_split(self.rng.permutation(n), n_mb):
                idx = torch.from_numpy(mb).to(dev)
                stats = self._update(obs[idx], action[idx], old_logprob[idx], old_value[idx], advantage[idx], ret[idx], clip)
                for k, v in stats.items():
                    sums[k] += v
                epoch_kl += stats["approx_kl"]
                steps += 1
            if p.target_kl and epoch_kl / n_mb > p.target_kl:
                stopped_early = True
                break

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
        return metrics

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

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if p.max_grad_norm > 0:
            grad_norm = float(nn.utils.clip_grad_norm_(self.agent.parameters(), p.max_grad_norm))
        else:
            grad_norm = float(torch.linalg.vector_norm(torch.stack([g.grad.norm() for g in self.agent.parameters() if g.grad is not None])))
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
        return _net_info(self.obs_dim, self.continuous, self.act_dim, self.params)

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        """Actor and critic (the actor computes values for GAE) plus, with obs_norm, the statistics
        (float64) that go with them; ``info["round"]`` is the number of rounds trained."""
        tensors = _export_net(self.agent)
        if self.obs_rms is not None:
            tensors["obs_norm.mean"] = self.obs_rms.mean.copy()
            tensors["obs_norm.var"] = self.obs_rms.var.copy()
        return tensors, {**self._info(), "round": self.rounds}

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        """``include_replay`` is ignored: PPO keeps no data between rounds."""
        tensors = _export_net(self.agent, "agent.")
        if self.obs_rms is not None:
            tensors["obs_norm.mean"] = self.obs_rms.mean.copy()
            tensors["obs_norm.var"] = self.obs_rms.var.copy()

        # Adam: tensors (moments, step counts) by flat name; the rest goes to meta
        opt = self.optimizer.state_dict()
        opt_meta: dict[str, Any] = {"state": {}, "param_groups": []}
        for pid, st in opt["state"].items():
            entry = {}
            for key, val in st.items():
                if torch.is_tensor(val):
                    tensors[f"optim.state.{pid}.{key}"] = val.detach().cpu().numpy().copy()
                    entry[key] = {"tensor": f"optim.state.{pid}.{key}"}
                else:
                    entry[key] = {"value": val}
            opt_meta["state"][str(pid)] = entry
        for group in opt["param_groups"]:
            opt_meta["param_groups"].append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()})

        tensors["rng.torch"] = torch.get_rng_state().numpy().copy()
        meta: dict[str, Any] = {
            "algorithm": "ppo",
            "net": self._info(),
            "updates": self.updates,
            "rounds": self.rounds,
            "samples_added": self.samples_added,
            "obs_norm_count": self.obs_rms.count if self.obs_rms is not None else None,
            "optimizer": opt_meta,
            "rng_numpy": _json_rng(self.rng.bit_generator.state),
        }
        return tensors, meta

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if meta.get("algorithm") != "ppo":
            raise ValueError(f"not a ppo checkpoint (algorithm={meta.get('algorithm')!r})")
        mine = self._info()
        if dict(meta["net"]) != mine:
            raise ValueError(f"checkpoint network {dict(meta['net'])} differs from the configured one {mine}")
        _load_net(self.agent, {k: v for k, v in tensors.items() if k.startswith("agent.")}, "agent.")

        opt_meta = meta["optimizer"]
        state = {}
        for pid, entry in opt_meta["state"].items():
            st = {}
            for key, val in entry.items():
                if "tensor" in val:
                    st[key] = torch.from_numpy(np.array(tensors[val["tensor"]])).to(self.device)
                else:
                    st[key] = val["value"]
            state[int(pid)] = st
        groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in opt_meta["param_groups"]]
        self.optimizer.load_state_dict({"state": state, "param_groups": groups})
        # step counts must stay on the CPU for Adam; moments follow the parameters
        for st in self.optimizer.state.values():
            if "step" in st and torch.is_tensor(st["step"]):
                st["step"] = st["step"].cpu()

        if self.obs_rms is not None:
            self.obs_rms.mean = np.array(tensors["obs_norm.mean"], np.float64)
            self.obs_rms.var = np.array(tensors["obs_norm.var"], np.float64)
            self.obs_rms.count = float(meta["obs_norm_count"])
        self.updates = int(meta["updates"])
        self.rounds = int(meta["rounds"])
        self.samples_added = int(meta["samples_added"])
        self.rng.bit_generator.state = _unjson_rng(meta["rng_numpy"])
        torch.set_rng_state(torch.from_numpy(np.array(tensors["rng.torch"], dtype=np.uint8)))


# --------------------------------------------------------------------------
# 7. Registration
# --------------------------------------------------------------------------


@hookimpl
def mqttrl_register_algorithms(register):
    register(
        AlgorithmInfo(
            name="ppo",
            description="PPO (clipped surrogate, GAE, separate actor/critic MLPs), one synchronous round per model version",
            params=PPOParams,
            mode="sync",
            sample_spec=sample_spec,
            make_actor=PPOActor,
            make_learner=PPOLearner,
        )
    )
