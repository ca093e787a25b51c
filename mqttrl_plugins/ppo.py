"""PPO (clipped surrogate, GAE), one synchronous round per model version.

This module needs only numpy (plus gymnasium and mqttrl's own modules): a
worker without torch imports it, builds the actor with the numpy forward or a
remote one (an inference server) and plays. Everything that needs torch (the
``Agent`` module, ``PPOLearner``, ``TorchForward``) lives in
:mod:`mqttrl_plugins.ppo_torch`, imported only inside the factories
(``make_learner``, ``make_forward(..., "torch")``). ``PPOLearner`` and
``Agent`` can still be imported from here; that import loads torch.

Read top to bottom, like CleanRL's ``ppo.py``:

1. ``PPOParams``: the hyperparameters (``[algorithm]`` in a config file);
2. the network in numpy: ``RunningMeanStd`` and ``normalize_obs`` for optional
   observation normalisation, the weight layout, ``NumpyForward``;
3. ``sample_spec``: what one transition of a finished rollout looks like on the wire;
4. ``compute_gae``: GAE(lambda) advantages and returns;
5. ``PPOActor``: worker side; samples actions in numpy from the outputs of its
   forward, records ``rollout_steps`` steps per env, bootstraps truncated
   episodes, computes advantages and returns, then hands the whole rollout
   over as one batch;
6. the factories and the ``mqttrl_register_algorithms`` hook.

The forward. ``forward(obs)`` takes raw float32 observations ``[N, obs_dim]``
and returns, for Discrete actions, ``{"logits": [N, n], "value": [N]}`` and,
for Box actions, ``{"mean": [N, act_dim], "log_std": [N, act_dim], "value": [N]}``
(all float32). It normalises the observations itself (the statistics come with
the weights), so an inference server answers for raw observations. The network
is two MLPs over the flattened (possibly normalised) observation: an actor
(policy logits or Gaussian mean, plus a state-independent log-std for Box
actions) and a critic (value). ``NumpyForward`` here and ``TorchForward`` in
``ppo_torch`` compute the same function from the same tensors (float32, equal
to ~1e-6); sampling, log-probabilities and greedy actions are the actor's.

The sync protocol, as PPO sees it. With model version v every worker's actor
collects ``rollout_steps`` steps in each of its envs (``pending()`` is 0
until then), computes advantages with its copy of the critic and sends the
rollout as one batch. The learner trains on all batches of round v and
publishes v+1; workers wait for it before they step again. A rollout is
therefore on-policy: logprob and value in a batch come from the weights the
learner starts the round from (the actor's numpy log-probabilities equal the
learner's to float32 rounding, so the first ratio is 1 to ~1e-6).

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
``gamma * V(final obs)`` to that step's reward, computed with its forward;
GAE then cuts the trace there like at a termination.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.algorithm import ActorContext, AlgorithmInfo
from mqttrl.config import ConfigError, layer_sizes, non_negative, positive, unit_interval, unit_positive
from mqttrl.plugin.spec import hookimpl
from mqttrl.wire import FieldSpec, SampleSpec

Tensors = dict[str, np.ndarray]


# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------


#: hidden-layer activations (numpy here, torch in ppo_torch)
ACTIVATIONS = ("tanh", "relu")


def _check_activation(inst, attribute, value):
    if value not in ACTIVATIONS:
        raise ConfigError(f"{attribute.name}={value!r}: allowed values are {', '.join(map(repr, ACTIVATIONS))}")


@attrs.define
class PPOParams:
    # --- rollouts (worker side)
    #: env steps each env of each worker collects per round; a worker's batch is num_envs * rollout_steps
    rollout_steps: int = attrs.field(default=64, validator=positive)
    #: discount per env step
    gamma: float = attrs.field(default=0.98, validator=unit_positive)
    #: GAE lambda (0: one-step TD advantages, 1: Monte Carlo returns minus the value)
    gae_lambda: float = attrs.field(default=0.8, validator=unit_interval)
    # --- optimisation (learner side)
    #: Adam learning rate at the start
    lr: float = attrs.field(default=1e-3, validator=positive)
    #: Adam epsilon
    adam_eps: float = attrs.field(default=1e-5, validator=positive)
    #: passes over each round's transitions
    epochs: int = attrs.field(default=20, validator=positive)
    #: transitions per gradient step; a round of N transitions is split into
    #: round(N / minibatch_size) (at least 1) near-equal shuffled minibatches
    minibatch_size: int = attrs.field(default=256, validator=positive)
    #: PPO clip range of the probability ratio
    clip_coef: float = attrs.field(default=0.2, validator=positive)
    #: clip the value loss around the rollout's values (CleanRL style; the range is clip_coef, never annealed)
    clip_vloss: bool = False
    #: weight of the value loss (0.5 * squared error, as CleanRL; vf_coef=1 equals SB3's vf_coef=0.5)
    vf_coef: float = attrs.field(default=1.0, validator=non_negative)
    #: weight of the entropy bonus
    ent_coef: float = attrs.field(default=0.0, validator=non_negative)
    #: clip the gradient's global norm to this (0: no clipping)
    max_grad_norm: float = attrs.field(default=0.5, validator=non_negative)
    #: normalise advantages to mean 0, std 1 within each minibatch
    norm_adv: bool = True
    #: stop a round's remaining epochs once the approximate KL exceeds this (0: never)
    target_kl: float = attrs.field(default=0.0, validator=non_negative)
    # --- schedules: linear in env steps trained on (summed over all workers),
    # so a config means the same with 1 or 10 workers; the learner counts them
    # itself (samples_added), the value at round r uses the count before r
    #: anneal lr linearly from lr to lr * anneal_final_frac
    anneal_lr: bool = True
    #: anneal clip_coef the same way (the value-loss clip range stays fixed)
    anneal_clip: bool = True
    #: env steps over which the annealed values fall; afterwards they stay at their final value
    anneal_env_steps: int = attrs.field(default=100_000, validator=positive)
    #: final value of an annealed quantity as a share of its start value (0: SB3/CleanRL's decay to 0)
    anneal_final_frac: float = attrs.field(default=0.0, validator=unit_interval)
    # --- network
    #: sizes of the hidden layers of both the actor and the critic MLP
    hidden: list = attrs.field(factory=lambda: [64, 64], validator=layer_sizes)
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
    obs_clip: float = attrs.field(default=10.0, validator=positive)


# --------------------------------------------------------------------------
# 2. The network in numpy, and observation statistics
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


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


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


def _obs_std(var: np.ndarray) -> np.ndarray:
    return np.sqrt(np.asarray(var, np.float64) + 1e-8)


def _scale(x: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float) -> np.ndarray:
    return np.clip((x - mean) / std, -clip, clip).astype(np.float32)


def normalize_obs(obs: np.ndarray, mean: np.ndarray | None, var: np.ndarray | None, clip: float) -> np.ndarray:
    """Flattened float32 observations, normalised when statistics are given.

    The learner and both forwards compute exactly this (the forwards with the
    square root cached), so they feed the networks bitwise identical inputs.
    """
    x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    if mean is None:
        return x
    return _scale(x, mean, _obs_std(var), clip)


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


def _full_info(own: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """The network that weights' ``info`` describes, checked against the spaces this side has.

    Architecture keys (hidden sizes, activation, obs_norm, obs_clip) follow the
    weights; the spaces must match.
    """
    for key in ("obs_dim", "continuous", "act_dim"):
        if key in info and info[key] != own[key]:
            raise ValueError(f"weights are for {key}={info[key]!r}, the network here has {key}={own[key]!r}")
    full = {**own, **{k: info[k] for k in ("hidden", "activation", "obs_norm", "obs_clip") if k in info}}
    if full["activation"] not in ACTIVATIONS:
        raise ValueError(f"weights use activation {full['activation']!r}; known: {', '.join(ACTIVATIONS)}")
    return full


def _layer_sizes(info: Mapping[str, Any], head: str) -> list[tuple[int, int]]:
    """(out, in) of each Linear of ``head`` ("critic" or "actor"); hidden layers, then the output."""
    outs = [int(h) for h in info["hidden"]] + [1 if head == "critic" else int(info["act_dim"])]
    ins = [int(info["obs_dim"])] + outs[:-1]
    return list(zip(outs, ins))


def weight_shapes(info: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the exported network tensors (the layout of ``ppo_torch.Agent.state_dict()``:
    ``critic.{2i}.weight`` / ``.bias`` (out, in) / (out,), the same for ``actor``, and for Box
    actions ``actor_logstd`` (1, act_dim)). With obs_norm the weights also hold ``obs_norm.mean``
    and ``obs_norm.var`` (float64)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for head in ("critic", "actor"):
        for i, (out, inp) in enumerate(_layer_sizes(info, head)):
            shapes[f"{head}.{2 * i}.weight"] = (out, inp)
            shapes[f"{head}.{2 * i}.bias"] = (out,)
    if info["continuous"]:
        shapes["actor_logstd"] = (1, int(info["act_dim"]))
    return shapes


def _orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """Like ``torch.nn.init.orthogonal_`` (QR of a Gaussian matrix, signs fixed by R's diagonal)."""
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    return gain * (q if rows >= cols else q.T)


def initial_weights(info: Mapping[str, Any], seed: int, ortho_init: bool = True, log_std_init: float = 0.0) -> Tensors:
    """Fresh weights in the exported layout, made in numpy: what an actor acts with before the first
    model version arrives. Orthogonal init as the learner's (hidden gain sqrt(2), policy head 0.01,
    value head 1, zero biases), else torch's default Linear init; the values differ from the learner's."""
    rng = np.random.default_rng([int(seed), 0x99])
    tensors: Tensors = {}
    for head in ("critic", "actor"):
        sizes = _layer_sizes(info, head)
        for i, (out, inp) in enumerate(sizes):
            if ortho_init:
                gain = math.sqrt(2) if i < len(sizes) - 1 else (1.0 if head == "critic" else 0.01)
                w, b = _orthogonal(rng, out, inp, gain), np.zeros(out)
            else:
                bound = 1 / math.sqrt(inp)
                w, b = rng.uniform(-bound, bound, (out, inp)), rng.uniform(-bound, bound, out)
            tensors[f"{head}.{2 * i}.weight"] = w.astype(np.float32)
            tensors[f"{head}.{2 * i}.bias"] = b.astype(np.float32)
    if info["continuous"]:
        tensors["actor_logstd"] = np.full((1, int(info["act_dim"])), log_std_init, np.float32)
    if info["obs_norm"]:
        tensors["obs_norm.mean"] = np.zeros(int(info["obs_dim"]), np.float64)
        tensors["obs_norm.var"] = np.ones(int(info["obs_dim"]), np.float64)
    return tensors


def checked_weights(tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> Tensors:
    """float32 copies of the network tensors (the source may be read-only), after checking that
    names and shapes fit the network ``info`` describes exactly; raises ValueError otherwise."""
    shapes = weight_shapes(info)
    names = {k for k in tensors if not k.startswith("obs_norm.")}
    if names != set(shapes):
        raise ValueError(
            f"weights do not fit the network: missing {sorted(set(shapes) - names)}, unexpected {sorted(names - set(shapes))}"
        )
    out: Tensors = {}
    for name, shape in shapes.items():
        arr = np.asarray(tensors[name])
        if tuple(arr.shape) != shape:
            raise ValueError(f"weight {name} has shape {arr.shape}, the network needs {shape}")
        out[name] = np.array(arr, dtype=np.float32)
    return out


def obs_stats(tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(mean, var) as float64 when ``info`` says obs_norm, else None; raises ValueError if they are missing."""
    if not info["obs_norm"]:
        return None
    dim = int(info["obs_dim"])
    stats = []
    for name in ("obs_norm.mean", "obs_norm.var"):
        if name not in tensors:
            raise ValueError(f"weights do not fit the network: missing {[name]} (obs_norm is on)")
        arr = np.array(tensors[name], np.float64)
        if arr.size != dim:
            raise ValueError(f"{name} has {arr.size} entries, observations have {dim}")
        stats.append(arr.reshape(dim))
    return stats[0], stats[1]


def _tanh(h: np.ndarray) -> np.ndarray:
    return np.tanh(h, out=h)


def _relu(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0, out=h)


_NP_ACTIVATIONS = {"tanh": _tanh, "relu": _relu}


@attrs.frozen
class _NumpyNet:
    """One model version, ready to run: weights pre-transposed to (in, out), contiguous, float32."""

    #: first layers of critic and actor side by side (both read the same input): (in, 2 * hidden[0])
    first_w: np.ndarray
    first_b: np.ndarray
    #: columns of the first layer's output that belong to the critic
    split: int
    #: the remaining layers of each head as (W^T, b); an activation follows all but the last
    critic: tuple
    actor: tuple
    #: Box actions: log-std (act_dim,); None for Discrete
    log_std: np.ndarray | None
    #: (mean, sqrt(var + 1e-8)) with obs_norm, else None
    stats: tuple | None
    clip: float
    activate: Any


def _tail(h: np.ndarray, layers: tuple, activate) -> np.ndarray:
    for i, (w, b) in enumerate(layers):
        h = h @ w
        h += b
        if i < len(layers) - 1:
            activate(h)
    return h


class NumpyForward:
    """PPO's forward in numpy: float32 matmuls ``x @ W.T + b`` with ``W.T`` cached at load time.

    ``forward(obs)`` returns ``{"logits", "value"}`` (Discrete) or ``{"mean", "log_std", "value"}``
    (Box) for raw observations, normalised inside with the statistics of the loaded weights.
    Until weights are loaded it holds fresh ones (:func:`initial_weights` with ``seed``).
    """

    def __init__(self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        obs_dim, continuous, act_dim = _spaces(obs_space, act_space)
        self.obs_dim = obs_dim
        self.info = _net_info(obs_dim, continuous, act_dim, params)
        self.load_weights(initial_weights(self.info, seed, params.ortho_init, params.log_std_init), self.info)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors :meth:`PPOLearner.export_weights` makes; raises before anything is replaced."""
        full = _full_info(self.info, info)
        arrays = checked_weights(tensors, full)
        stats = obs_stats(tensors, full)

        def head(name: str) -> list[tuple[np.ndarray, np.ndarray]]:
            n = len(full["hidden"]) + 1
            return [
                (np.ascontiguousarray(arrays[f"{name}.{2 * i}.weight"].T), arrays[f"{name}.{2 * i}.bias"])
                for i in range(n)
            ]

        critic, actor = head("critic"), head("actor")
        self._net = _NumpyNet(  # the swap: one assignment
            first_w=np.ascontiguousarray(np.concatenate([critic[0][0], actor[0][0]], axis=1)),
            first_b=np.concatenate([critic[0][1], actor[0][1]]),
            split=critic[0][0].shape[1],
            critic=tuple(critic[1:]),
            actor=tuple(actor[1:]),
            log_std=arrays["actor_logstd"].reshape(-1) if full["continuous"] else None,
            stats=None if stats is None else (stats[0], _obs_std(stats[1])),
            clip=float(full["obs_clip"]),
            activate=_NP_ACTIVATIONS[full["activation"]],
        )
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        net = self._net
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), self.obs_dim)
        if net.stats is not None:
            x = _scale(x, *net.stats, net.clip)
        h = x @ net.first_w
        h += net.first_b
        net.activate(h)
        value = _tail(h[:, : net.split], net.critic, net.activate).reshape(len(x))
        out = _tail(h[:, net.split :], net.actor, net.activate)
        if net.log_std is None:
            return {"logits": out, "value": value}
        return {"mean": out, "log_std": np.broadcast_to(net.log_std, out.shape).copy(), "value": value}


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


def compute_gae(
    rewards: np.ndarray, values: np.ndarray, ended: np.ndarray, last_value: np.ndarray, gamma: float, lam: float
) -> tuple[np.ndarray, np.ndarray]:
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
# 5. Actor (worker side): numpy only
# --------------------------------------------------------------------------


def categorical_logprob(logits: np.ndarray, action: np.ndarray) -> np.ndarray:
    """log softmax(logits)[i, action[i]] for each row i, in the logits' dtype (as torch's log_softmax)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z[np.arange(len(z)), action] - np.log(np.exp(z).sum(axis=-1))


def gaussian_logprob(action: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """Log-density of a diagonal Gaussian, summed over the action dims (the learner's formula, float32)."""
    return (-0.5 * ((action - mean) / np.exp(log_std)) ** 2 - log_std - np.float32(_LOG_SQRT_2PI)).sum(-1)


def _torch_importable() -> bool:
    try:
        import torch  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


class PPOActor:
    """Samples actions in numpy from what its forward returns (local numpy or torch, or a remote
    inference server); with ``forward=None`` it builds a local one: torch if it imports, else numpy."""

    def __init__(
        self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext, forward: Any = None
    ):
        self.params = p = params
        self.obs_dim, self.continuous, self.act_dim = _spaces(obs_space, act_space)
        self.obs_shape = tuple(obs_space.shape)
        self.act_shape = tuple(act_space.shape) if self.continuous else ()
        if self.continuous:
            self.low = np.asarray(act_space.low, np.float32).reshape(self.act_shape)
            self.high = np.asarray(act_space.high, np.float32).reshape(self.act_shape)
        self.num_envs = ctx.num_envs
        self.info = _net_info(self.obs_dim, self.continuous, self.act_dim, p)
        self.rng = np.random.default_rng(ctx.seed)
        if forward is None:
            # numpy: same outputs as torch (to ~1e-7) and 2-3x cheaper for these small MLPs
            forward = make_forward(p, obs_space, act_space, "numpy", seed=ctx.seed)
        self.forward = forward
        #: round of the loaded weights (-1: none yet); a new round drops a partial rollout
        self.round = -1
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
        """Swap in a new model version (the forward loads nets and obs statistics together).

        A rollout half collected with another version is dropped, so a batch
        never mixes versions (in the sync protocol this happens only when a
        round went on without this worker); finished rollouts are kept. A remote
        forward ignores the tensors (the inference servers load them).
        """
        for key in ("obs_dim", "continuous", "act_dim", "obs_norm"):
            if key in info and info[key] != self.info[key]:
                raise ValueError(f"weights are for {key}={info[key]!r}, this actor has {key}={self.info[key]!r}")
        full = {**self.info, **{k: info[k] for k in ("hidden", "activation", "obs_clip") if k in info}}
        self.forward.load_weights(tensors, full)  # raises before anything is replaced
        new_round = int(info.get("round", -1))
        if self.t and new_round != self.round:
            self._new_rollout()
        self.info = full
        self.round = new_round

    def discard(self) -> None:
        """Drop everything not yet taken (the sync worker calls this when a round finished
        without it: its partial share was made with a version the learner has moved past)."""
        self.ready = []
        self._new_rollout()

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Env-ready actions (Box: clipped to the bounds) and extras: logprob, value and,
        for Box actions, the raw sample ``raw_action`` the logprob belongs to."""
        if not greedy and len(obs) != self.num_envs:
            raise ValueError(
                f"act() got {len(obs)} observations for {self.num_envs} envs (greedy=False needs one per env)"
            )
        out = self.forward(obs)
        if self.continuous:
            mean = np.asarray(out["mean"], np.float32).reshape(len(obs), self.act_dim)
            if greedy:
                return self._env_action(mean), {}
            log_std = np.asarray(out["log_std"], np.float32).reshape(len(obs), self.act_dim)
            action = mean + np.exp(log_std) * self.rng.standard_normal(mean.shape, dtype=np.float32)
            logprob = gaussian_logprob(action, mean, log_std)
        else:
            logits = np.asarray(out["logits"], np.float32).reshape(len(obs), self.act_dim)
            if greedy:
                return self._env_action(logits.argmax(axis=-1)), {}
            action = (logits + self.rng.gumbel(size=logits.shape)).argmax(axis=-1)  # Gumbel-max: a Categorical sample
            logprob = categorical_logprob(logits, action)
        extras = {
            "logprob": logprob.astype(np.float32),
            "value": np.asarray(out["value"], np.float32).reshape(len(obs)),
        }
        if self.continuous:
            extras["raw_action"] = action.reshape(len(obs), *self.act_shape)
        return self._env_action(action), extras

    def _env_action(self, action: np.ndarray) -> np.ndarray:
        if not self.continuous:
            return action.astype(np.int64)
        return np.clip(action.reshape(len(action), *self.act_shape), self.low, self.high).astype(np.float32)

    def _values(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self.forward(obs)["value"], np.float64).reshape(len(obs))

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
        self.ready.append(
            {
                "obs": self.buf_obs.reshape(n, *self.obs_shape),
                "action": self.buf_action.reshape(n, *self.act_shape),
                "logprob": self.buf_logprob.reshape(n),
                "value": self.buf_value.reshape(n),
                "advantage": adv.astype(np.float32).reshape(n),
                "ret": ret.astype(np.float32).reshape(n),
            }
        )
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
# 6. Factories and registration
# --------------------------------------------------------------------------


def make_forward(params: PPOParams, obs_space: gym.Space, act_space: gym.Space, backend: str = "numpy", seed: int = 0):
    """A local forward: backend "numpy" (:class:`NumpyForward`), "torch" (``ppo_torch.TorchForward``)
    or "auto" (torch if it imports, else numpy). ``seed`` picks its weights until the first load."""
    if backend == "auto":
        backend = "torch" if _torch_importable() else "numpy"
    if backend == "numpy":
        return NumpyForward(params, obs_space, act_space, seed=seed)
    if backend == "torch":
        from .ppo_torch import TorchForward

        return TorchForward(params, obs_space, act_space, seed=seed)
    raise ValueError(f"unknown forward backend {backend!r}; use 'numpy', 'torch' or 'auto'")


def make_learner(params: PPOParams, obs_space: gym.Space, act_space: gym.Space, device: str = "cpu", seed: int = 0):
    """The learner needs torch; it is imported here, not when this module loads."""
    from .ppo_torch import PPOLearner

    return PPOLearner(params, obs_space, act_space, device, seed)


_TORCH_NAMES = frozenset({"Agent", "PPOLearner", "TorchForward"})


def __getattr__(name: str) -> Any:
    """``from mqttrl_plugins.ppo import PPOLearner`` (or Agent, TorchForward) still works; it imports torch."""
    if name in _TORCH_NAMES:
        from . import ppo_torch

        return getattr(ppo_torch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
            make_learner=make_learner,
            make_forward=make_forward,
        )
    )
