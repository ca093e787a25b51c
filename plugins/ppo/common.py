"""What PPO's worker side and learner side share: hyperparameters, the network's layout,
observation normalisation, the sample spec and GAE.

Everything here is numpy: the actor (:mod:`.actor`), the numpy forward
(:mod:`.numpy_net`) and the torch learner (:mod:`.learner`) all import it, so
they agree on one weights layout and compute the same normalised inputs.

1. ``PPOParams``: the hyperparameters (``[algorithm]`` in a config file);
2. the network's description: ``check_spaces``, ``net_info`` / ``full_info``
   (what travels with the weights), ``weight_shapes``, ``initial_weights``,
   ``obs_stats``; the MLPs are described here, CNN torsos by :mod:`mqttrl.nets`;
3. observation normalisation: ``RunningMeanStd``, ``normalize_obs``;
4. ``sample_spec``: what one transition of a finished rollout looks like on the wire;
5. ``compute_gae``: GAE(lambda) advantages and returns.

Observation normalisation (``obs_norm``). The running mean and variance are
part of the weights (``obs_norm.mean``, ``obs_norm.var``), so an actor
normalises with exactly the statistics of the version it acts with. Batches
carry the *raw* observations. The learner normalises them with its current
statistics, which are the ones it exported with version v (so training sees
the very inputs the actors saw), trains, and only then folds the round's raw
observations into the statistics, which go out with v+1. Updating before
training would train on inputs that differ from the ones the actors' logprobs
and values were computed on, and ratio and value clipping would be off from
the first minibatch. Both sides normalise with the numpy functions of section 3,
so their inputs are bitwise identical.

Observations keep their dtype (uint8, bool or float32) from the env to the network, which
converts them to float itself (uint8 scaled by 1/255), so images stay small on the wire and
on the way to a GPU. ``obs_norm`` is for float vector observations and the mlp only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin import (
    NETWORKS,
    ConfigError,
    FieldSpec,
    ObsSize,
    SampleSpec,
    Tensors,
    describe_torso,
    initial_torso_weights,
    layer_sizes,
    non_negative,
    orthogonal_matrix,
    positive,
    torso_out_size,
    torso_weight_shapes,
    unit_interval,
    unit_positive,
    validate_torso,
)

#: log(sqrt(2 pi)), in the Gaussian log-density of Box actions (actor and learner)
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------


#: hidden-layer activations (numpy ones in numpy_net, torch ones in learner)
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
    #: "mlp" (separate actor and critic MLPs of ``hidden``), "nature_cnn" (Mnih et al. 2015) or "minatar_cnn"
    #: (Young & Tian 2019): one CNN torso shared by an actor and a critic head (CleanRL's ppo_atari), or
    #: "auto" (vectors: mlp; images: minatar_cnn when a side is under 36 pixels, else nature_cnn)
    network: str = attrs.field(default="auto", validator=attrs.validators.in_(NETWORKS))
    #: sizes of the hidden layers of both the actor and the critic MLP
    hidden: list = attrs.field(factory=lambda: [64, 64], validator=layer_sizes)
    #: hidden-layer activation of the MLPs: "tanh" or "relu" (CNN torsos use ReLU)
    activation: str = attrs.field(default="tanh", validator=_check_activation)
    #: orthogonal init (hidden gain sqrt(2), policy head 0.01, value head 1), zero biases
    ortho_init: bool = True
    #: Box actions: initial log standard deviation of the Gaussian policy
    log_std_init: float = 0.0
    # --- observation normalisation (statistics travel with the weights)
    #: normalise observations with a running mean and variance (float vector observations and the mlp only)
    obs_norm: bool = False
    #: clip normalised observations to [-obs_clip, obs_clip]
    obs_clip: float = attrs.field(default=10.0, validator=positive)


# --------------------------------------------------------------------------
# 2. The network's description
# --------------------------------------------------------------------------


def check_spaces(obs_space: gym.Space, act_space: gym.Space) -> tuple[ObsSize, bool, int]:
    """(flat obs size, continuous?, number of actions or flat action size); a Box of uint8, bool or
    float observations and Discrete or float Box actions are supported. The size is an
    :class:`~mqttrl.nets.ObsSize`, an ``int`` that keeps the observations' shape and dtype."""
    obs_dim = ObsSize.of(obs_space, "ppo")
    if isinstance(act_space, gym.spaces.Discrete):
        if act_space.start != 0:
            raise TypeError(f"ppo needs Discrete actions numbered from 0, got {act_space!r}")
        return obs_dim, False, int(act_space.n)
    if isinstance(act_space, gym.spaces.Box) and np.issubdtype(act_space.dtype, np.floating):
        return obs_dim, True, int(np.prod(act_space.shape, dtype=np.int64))
    raise TypeError(f"ppo supports Discrete or float Box action spaces, got {act_space!r}")


def net_info(obs_dim: int, continuous: bool, act_dim: int, params: PPOParams) -> dict[str, Any]:
    """The network as the weights' ``info`` describes it (and checkpoints check it).

    mlp: two MLPs over the flattened (with ``obs_norm``, normalised) observation, an actor
    (policy logits, or the Gaussian mean plus a state-independent log-std for Box actions) and a
    critic (the value); uint8 observations are scaled by ``info["obs_scale"]`` (1/255) first.
    A CNN: the torso ``info["torso"]`` describes (:mod:`mqttrl.nets`), shared by a linear
    actor head and a linear critic head. ``obs_dim`` is what :func:`check_spaces` returns (a
    plain ``int`` means flat float observations). Raises ConfigError for ``obs_norm`` with a CNN
    or with integer or bool observations (a running mean of pixels or bits is no use).
    """
    shape, dtype = getattr(obs_dim, "shape", (int(obs_dim),)), getattr(obs_dim, "dtype", np.dtype(np.float32))
    torso = describe_torso(params.network, shape, dtype, params.hidden)
    if params.obs_norm and (torso["network"] != "mlp" or dtype.kind != "f"):
        raise ConfigError(
            f"obs_norm=true: normalisation is for float vector observations with the mlp; these are {dtype} "
            f"observations of shape {tuple(shape)} and the network is {torso['network']} (set obs_norm = false)"
        )
    info: dict[str, Any] = {
        "obs_dim": int(obs_dim),
        "continuous": continuous,
        "act_dim": act_dim,
        "hidden": list(params.hidden),
        "activation": params.activation,
        "obs_norm": bool(params.obs_norm),
        "obs_clip": float(params.obs_clip),
    }
    if torso["network"] != "mlp":
        info["torso"] = torso
    elif torso["obs_scale"] != 1.0:
        info["obs_scale"] = torso["obs_scale"]
    return info


#: the keys of a network ``info`` that follow the weights (the architecture; the spaces must match)
_ARCHITECTURE = ("hidden", "activation", "obs_norm", "obs_clip", "torso", "obs_scale")


def full_info(
    own: Mapping[str, Any], info: Mapping[str, Any], obs_shape: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """The network that weights' ``info`` describes, checked against the spaces this side has.

    Architecture keys (hidden sizes, activation, obs_norm, obs_clip, the CNN torso, the input
    scale) follow the weights; the spaces must match (with ``obs_shape``, a torso's too). An info
    that has ``hidden`` but no ``torso`` (or ``obs_scale``) is an MLP (over unscaled inputs).
    """
    for key in ("obs_dim", "continuous", "act_dim"):
        if key in info and info[key] != own[key]:
            raise ValueError(f"weights are for {key}={info[key]!r}, the network here has {key}={own[key]!r}")
    full = {**own, **{k: info[k] for k in _ARCHITECTURE if k in info}}
    if "hidden" in info:
        for key in ("torso", "obs_scale"):
            if key not in info:
                full.pop(key, None)
    if full["activation"] not in ACTIVATIONS:
        raise ValueError(f"weights use activation {full['activation']!r}; known: {', '.join(ACTIVATIONS)}")
    if "torso" in full:
        full["torso"] = torso = validate_torso(full["torso"])
        if torso["layout"] == "flat":
            raise ValueError("a ppo torso is a CNN; an mlp is described by hidden and activation")
        if obs_shape is not None and tuple(torso["obs_shape"]) != tuple(obs_shape):
            raise ValueError(
                f"weights are for observations of shape {tuple(torso['obs_shape'])}, these are {obs_shape}"
            )
        if full["obs_norm"]:
            raise ValueError("weights with a CNN torso cannot use obs_norm")
    scale = full.get("obs_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"obs_scale must be a positive number, got {scale!r}")
    return full


def mlp_scale(info: Mapping[str, Any]) -> float:
    """What the mlp multiplies its float input by (1/255 for uint8 observations, else 1)."""
    return float(info.get("obs_scale", 1.0))


def _layer_sizes(info: Mapping[str, Any], head: str) -> list[tuple[int, int]]:
    """(out, in) of each Linear of ``head`` ("critic" or "actor"); hidden layers, then the output."""
    outs = [int(h) for h in info["hidden"]] + [1 if head == "critic" else int(info["act_dim"])]
    ins = [int(info["obs_dim"])] + outs[:-1]
    return list(zip(outs, ins))


#: the tensor names of a CNN torso in the exported weights (the heads are ``actor.*`` and ``critic.*``)
TORSO_PREFIX = "torso."


def weight_shapes(info: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the exported network tensors (the layout of ``learner.Agent.state_dict()``).

    mlp: ``critic.{2i}.weight`` / ``.bias`` (out, in) / (out,), the same for ``actor``. CNN: the
    torso's ``torso.{2i}.weight`` / ``.bias`` (:func:`mqttrl.nets.weight_shapes`), then the heads
    ``actor.weight`` / ``.bias`` and ``critic.weight`` / ``.bias``. For Box actions also
    ``actor_logstd`` (1, act_dim). With obs_norm the weights also hold ``obs_norm.mean`` and
    ``obs_norm.var`` (float64)."""
    shapes: dict[str, tuple[int, ...]] = {}
    if "torso" in info:
        shapes.update(torso_weight_shapes(info["torso"], TORSO_PREFIX))
        width = torso_out_size(info["torso"])
        for head, out in (("actor", int(info["act_dim"])), ("critic", 1)):
            shapes[f"{head}.weight"] = (out, width)
            shapes[f"{head}.bias"] = (out,)
    else:
        for head in ("critic", "actor"):
            for i, (out, inp) in enumerate(_layer_sizes(info, head)):
                shapes[f"{head}.{2 * i}.weight"] = (out, inp)
                shapes[f"{head}.{2 * i}.bias"] = (out,)
    if info["continuous"]:
        shapes["actor_logstd"] = (1, int(info["act_dim"]))
    return shapes


def initial_weights(info: Mapping[str, Any], seed: int, ortho_init: bool = True, log_std_init: float = 0.0) -> Tensors:
    """Fresh weights in the exported layout, made in numpy: what an actor acts with before the first
    model version arrives. Orthogonal init as the learner's (hidden gain sqrt(2), policy head 0.01,
    value head 1, zero biases), else torch's default init; the values differ from the learner's."""
    rng = np.random.default_rng([int(seed), 0x99])
    tensors: Tensors = {}
    if "torso" in info:
        torso = info["torso"]
        tensors.update(initial_torso_weights(torso, rng, TORSO_PREFIX, math.sqrt(2) if ortho_init else None))
        heads = [(head, out, 1) for head, out in (("actor", int(info["act_dim"])), ("critic", 1))]
        width = torso_out_size(torso)
        sizes = {h: [(out, width)] for h, out, _ in heads}
        names = {h: [h] for h, _, _ in heads}
    else:
        sizes = {h: _layer_sizes(info, h) for h in ("critic", "actor")}
        names = {h: [f"{h}.{2 * i}" for i in range(len(sizes[h]))] for h in sizes}
    for head in sizes:
        for i, (out, inp) in enumerate(sizes[head]):
            if ortho_init:
                gain = math.sqrt(2) if i < len(sizes[head]) - 1 else (1.0 if head == "critic" else 0.01)
                w, b = orthogonal_matrix(rng, out, inp, gain), np.zeros(out)
            else:
                bound = 1 / math.sqrt(inp)
                w, b = rng.uniform(-bound, bound, (out, inp)), rng.uniform(-bound, bound, out)
            tensors[f"{names[head][i]}.weight"] = w.astype(np.float32)
            tensors[f"{names[head][i]}.bias"] = b.astype(np.float32)
    if info["continuous"]:
        tensors["actor_logstd"] = np.full((1, int(info["act_dim"])), log_std_init, np.float32)
    if info["obs_norm"]:
        tensors["obs_norm.mean"] = np.zeros(int(info["obs_dim"]), np.float64)
        tensors["obs_norm.var"] = np.ones(int(info["obs_dim"]), np.float64)
    return tensors


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


# --------------------------------------------------------------------------
# 3. Observation normalisation
# --------------------------------------------------------------------------


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


def obs_std(var: np.ndarray) -> np.ndarray:
    return np.sqrt(np.asarray(var, np.float64) + 1e-8)


def scale_obs(x: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float) -> np.ndarray:
    return np.clip((x - mean) / std, -clip, clip).astype(np.float32)


def normalize_obs(obs: np.ndarray, mean: np.ndarray | None, var: np.ndarray | None, clip: float) -> np.ndarray:
    """Flattened float32 observations, normalised when statistics are given.

    The learner and both forwards compute exactly this (the forwards with the
    square root cached), so they feed the networks bitwise identical inputs.
    """
    x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    if mean is None:
        return x
    assert var is not None  # the statistics come as a pair
    return scale_obs(x, mean, obs_std(var), clip)


# --------------------------------------------------------------------------
# 4. Sample spec: one transition of a finished rollout
# --------------------------------------------------------------------------


def sample_spec(params: PPOParams, obs_space: gym.Space, act_space: gym.Space) -> SampleSpec:
    """``obs`` is raw (never normalised), in the observations' dtype (uint8, bool or float32);
    ``action`` the raw policy sample (Box: before clipping to the bounds); ``logprob``/``value``
    as the actor computed them; ``advantage``/``ret`` from GAE."""
    obs_dim, continuous, act_dim = check_spaces(obs_space, act_space)
    if continuous:
        assert act_space.shape is not None  # a Box (check_spaces)
        action = FieldSpec("float32", tuple(int(s) for s in act_space.shape))
    else:
        action = FieldSpec("int64", (), low=0, high=act_dim - 1)
    return SampleSpec(
        fields={
            "obs": FieldSpec(obs_dim.dtype.name, obs_dim.shape),
            "action": action,
            "logprob": FieldSpec("float32", ()),
            "value": FieldSpec("float32", ()),
            "advantage": FieldSpec("float32", ()),
            "ret": FieldSpec("float32", ()),
        }
    )


# --------------------------------------------------------------------------
# 5. Generalised advantage estimation
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
