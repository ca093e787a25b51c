"""What DQN's worker side and learner side share: hyperparameters, spaces, network, sample spec.

Both :mod:`.actor` (numpy only) and :mod:`.learner` (torch) import this module,
so it needs nothing but numpy, gymnasium and mqttrl's own modules.

1. ``DQNParams``: the hyperparameters (``[algorithm]`` in a config file);
2. ``check_spaces`` and ``net_info``: which spaces DQN supports and the
   description of the Q-network that travels with its weights;
3. ``sample_spec``: what one n-step transition looks like on the wire.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin import (
    NETWORKS,
    ConfigError,
    FieldSpec,
    ObsSize,
    SampleSpec,
    describe_torso,
    layer_sizes,
    non_negative,
    obs_dtype,
    positive,
    unit_interval,
    unit_positive,
)

from .frames import FRAME_MODES, frame_layout

log = logging.getLogger("mqttrl.dqn")

# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------

#: what ``DQNParams.distributional`` accepts
DISTRIBUTIONS = ("none", "c51", "qr")
#: the ``replay_device`` choices (:mod:`.device_replay`)
REPLAY_SIDES = ("auto", "device", "host")
#: the ``noisy_layers`` choices: the head's layers only, or every dense layer (the torso's too)
NOISY_LAYERS = ("head", "all")
#: the ``compile`` choices: torch.compile modes for the update's forwards and loss
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")


def _at_least(low: int):
    def check(inst, attribute, value):
        if value < low:
            raise ConfigError(f"{attribute.name}={value!r}: must be >= {low}")

    return check


#: ``[algorithm] preset = NAME``: the keys a preset fills in before the config's own (which win).
#: "rainbow" (Hessel et al. 2018) is every ingredient at once: C51 (``distributional = "qr"`` over
#: it gives a QR-DQN Rainbow), noisy nets instead of the epsilon ladder, prioritized replay with
#: the actors' initial priorities (Ape-X), double DQN, dueling, 3-step returns. It sets no support
#: (v_min, v_max: required, or reward_max), learning rate or replay settings: those belong to the
#: environment and the config.
PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "rainbow": {
        "distributional": "c51",
        "noisy": True,
        "prioritized": True,
        "initial_priority": "actor",
        "double": True,
        "dueling": True,
        "n_step": 3,
    },
}


def _preset_name(inst, attribute, value):
    if value not in PRESETS:
        raise ConfigError(f"{attribute.name}={value!r}: unknown preset; presets: {', '.join(map(repr, PRESETS))}")


@attrs.define
class DQNParams:
    #: the presets :func:`mqttrl.config.build` applies (``preset`` below)
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = PRESETS
    #: a named set of defaults (PRESETS: "none" or "rainbow") filled in when the config is read,
    #: before the config's own keys, which win; the resolved config holds both the name and the
    #: keys it set. Constructing DQNParams(preset=...) directly only records the name
    preset: str = attrs.field(default="none", validator=_preset_name)
    # --- optimisation
    #: Adam learning rate
    lr: float = attrs.field(default=2e-3, validator=positive)
    #: Adam epsilon: 3.125e-4 as Dopamine's DQN, C51 and MinAtar Rainbow (create_optimizer.eps in
    #: dopamine/jax/agents/rainbow/configs/c51.gin, labs/environments/minatar/*.gin) and Revisiting
    #: Rainbow; CleanRL's c51.py uses 0.01 / batch_size (1.5625e-4 at batch 64). torch's 1e-8 lets
    #: Adam's steps blow up where the second moment is tiny (C51's logits of unused atoms)
    adam_eps: float = attrs.field(default=3.125e-4, validator=positive)
    #: env steps over which lr falls linearly to lr * lr_final_frac, then stays there (0: a constant
    #: lr). rl-baselines3-zoo decays DQN's and SAC's lr linearly ("lin_..." schedules); a falling lr
    #: lets a solved policy settle where a constant one keeps swinging (CartPole's DQN falls from 500 to
    #: ~100 and back for as long as it trains at 2e-3). Counted in transitions taken in, as the
    #: checkpoint keeps them, so a resumed learner goes on where the killed one was
    lr_anneal_env_steps: int = attrs.field(default=0, validator=non_negative)
    #: the annealed lr's final value as a share of lr
    lr_final_frac: float = attrs.field(default=0.0, validator=unit_interval)
    #: discount per env step
    gamma: float = attrs.field(default=0.99, validator=unit_positive)
    #: transitions per gradient update
    batch_size: int = attrs.field(default=128, validator=positive)
    #: clip the gradient's global norm to this (0: no clipping)
    grad_clip: float = attrs.field(default=10.0, validator=non_negative)
    #: use the online net to pick the next action and the target net to value it
    double: bool = True
    #: bootstrap after this many env steps (rewards summed on the worker)
    n_step: int = attrs.field(default=3, validator=positive)
    # --- network
    #: the torso: "mlp" (the hidden layers below), "nature_cnn" (Mnih et al. 2015), "minatar_cnn" (Young &
    #: Tian 2019) or "auto" (vectors: mlp; images: minatar_cnn when a side is under 36 pixels, else nature_cnn)
    network: str = attrs.field(default="auto", validator=attrs.validators.in_(NETWORKS))
    #: sizes of the hidden layers of the MLP (the CNNs have their own dense layer)
    hidden: list = attrs.field(factory=lambda: [128, 128], validator=layer_sizes)
    #: split the head into state value and action advantages
    dueling: bool = True
    # --- distributional heads (the forwards still give the expected Q-values)
    #: "none" (one Q-value per action, Huber loss), "c51" (Bellemare et al. 2017: a categorical
    #: distribution over ``n_atoms`` fixed atoms in [v_min, v_max] per action, cross-entropy to the
    #: projected n-step Bellman target) or "qr" (Dabney et al. 2018, QR-DQN: ``n_quantiles`` quantiles
    #: per action at the midpoints tau_hat = (2i + 1) / 2N, quantile Huber loss); the priorities of
    #: prioritized replay: see ``initial_priority``
    distributional: str = attrs.field(default="none", validator=attrs.validators.in_(DISTRIBUTIONS))
    #: C51: atoms of the support (evenly spaced from v_min to v_max)
    n_atoms: int = attrs.field(default=51, validator=_at_least(2))
    #: C51: the lowest atom; targets below it count as it. Required with distributional = "c51"
    #: (choose it just below the lowest discounted return), or derived from ``reward_max``
    v_min: float | None = None
    #: C51: the highest atom; targets above it count as it (CartPole at gamma 0.99 needs about 100).
    #: Required with distributional = "c51", or derived from ``reward_max``
    v_max: float | None = None
    #: C51 without v_min/v_max: the largest |reward| of one env step; the support is then derived as
    #: [-v, v] with v = reward_max / (1 - gamma), the bound of any discounted return, and logged
    reward_max: float | None = attrs.field(default=None, validator=attrs.validators.optional(positive))
    #: QR-DQN: quantiles per action. 51 rather than the paper's 200: the loss compares every pair of
    #: quantiles (batch * N^2), 15x cheaper at 51, and small control tasks do not need finer quantiles
    n_quantiles: int = attrs.field(default=51, validator=positive)
    #: QR-DQN: the quantile Huber loss is quadratic for |u| <= qr_kappa, linear beyond (QR-DQN's
    #: rho = |tau - 1{u < 0}| * Huber_kappa(u), not divided by kappa)
    qr_kappa: float = attrs.field(default=1.0, validator=positive)
    # --- noisy nets (Fortunato et al. 2018)
    #: the head's linear layers (value/advantage, or head) become factorised Gaussian noisy layers
    #: (w = mu + sigma * f(e_out) f(e_in)^T, f(x) = sign(x) sqrt|x|) and replace epsilon-greedy: with
    #: noisy = true every env explores with epsilon 0 once the learner's first trained model is out,
    #: epsilon_start (uniform at random) before; the other epsilon_* keys are ignored. The learner
    #: samples new noise for the online and the target net at each update; actors sample their own at
    #: every forward call, independently per env; greedy evaluation uses the mean weights mu
    noisy: bool = False
    #: noisy layers start with sigma = noisy_sigma0 / sqrt(fan_in) (the paper's factorised 0.5)
    noisy_sigma0: float = attrs.field(default=0.5, validator=non_negative)
    #: with noisy = true, which layers are noisy: "all" (every dense layer: the MLP's hidden layers or
    #: a CNN's dense layer as well as the head; convolutions stay plain), as Fortunato et al. 2018,
    #: Rainbow (Hessel et al. 2018: every linear layer noisy),
    #: Dopamine's full Rainbow (FullRainbowNetwork in dopamine/jax/networks.py) and CleanRL's
    #: rainbow_atari.py; or "head" (the value/advantage or head layers only)
    noisy_layers: str = attrs.field(default="all", validator=attrs.validators.in_(NOISY_LAYERS))
    # --- target network: every ``target_update_every`` updates,
    # target <- tau * online + (1 - tau) * target (tau = 1: a hard copy)
    #: updates between target-network updates
    target_update_every: int = attrs.field(default=100, validator=positive)
    #: when > 0: env steps between target-network updates, whatever the replay ratio (target_update_every
    #: is then derived as round(target_update_env_steps * replay_ratio / batch_size), at least 1).
    #: Dopamine copies every 1,000 env steps on MinAtar (labs/environments/minatar/rainbow_breakout.gin:
    #: target_update_period = 1000 agent steps) and every 100 on LunarLander (rainbow_lunarlander.gin);
    #: CleanRL's c51.py every 500 (classic control)
    target_update_env_steps: int = attrs.field(default=0, validator=non_negative)
    #: share of the online net blended into the target at each target update
    tau: float = attrs.field(default=1.0, validator=unit_positive)
    # --- replay and pacing
    #: transitions the replay buffer holds (the oldest are overwritten)
    buffer_size: int = attrs.field(default=100_000, validator=positive)
    #: no training until the buffer holds this many transitions
    learning_starts: int = attrs.field(default=1000, validator=positive)
    #: mean times each sample is replayed (updates * batch_size / samples); the learner trains while below it
    replay_ratio: float = attrs.field(default=64.0, validator=positive)
    #: updates owed before behind() asks workers to pause (flow control)
    max_update_debt: int = attrs.field(default=100, validator=positive)
    # --- resets (Nikishin et al. 2022, "The Primacy Bias in Deep RL"; BBF, Schwarzer et al. 2023)
    #: gradient updates between network resets (0: never): every reset_every updates the online net's
    #: parameters become shrink-and-perturb mixes theta <- alpha theta + (1 - alpha) theta_fresh, theta_fresh
    #: a new random initialisation, and Adam's moments of the net start afresh; the target net follows
    #: at its next update. High replay ratios overfit early data: resets let the net learn again
    reset_every: int = attrs.field(default=0, validator=non_negative)
    #: the share of the trained torso parameters a reset keeps (BBF's shrink-and-perturb: 0.5)
    reset_alpha: float = attrs.field(default=0.5, validator=unit_interval)
    #: the share of the trained head parameters a reset keeps (the Primacy Bias paper resets the last
    #: layers fully: 0.0)
    reset_head_alpha: float = attrs.field(default=0.0, validator=unit_interval)
    #: updates owed beyond this are forgiven: a backlog after an outage is replayed less
    #: instead of pausing every worker until it is paid. Never below what 4 batches of every sender
    #: owe plus the warm-up's debt, so replay ratios up to 64 hold under flow control (the batches in
    #: flight when workers are told to pause are no backlog)
    forgive_debt_above: int = attrs.field(default=1000, validator=positive)
    #: image observations as frames, each sent and stored once: "stack" (axis 0 stacks frames,
    #: as gymnasium's FrameStackObservation), "whole" (an observation is one frame), "off"
    #: (observations as arrays), "auto" (integer/bool images: "stack" when axis 0 is a short
    #: stack axis, else "whole"; float observations: "off")
    frames: str = attrs.field(default="auto", validator=attrs.validators.in_(FRAME_MODES))
    # --- prioritized replay (proportional, Schaul et al. 2016)
    #: sample transitions in proportion to (|TD error| + per_eps) ** per_alpha
    prioritized: bool = False
    #: how strongly priorities skew sampling (0: uniform)
    per_alpha: float = attrs.field(default=0.6, validator=non_negative)
    #: importance-sampling exponent at the start, annealed linearly to 1
    per_beta0: float = attrs.field(default=0.4, validator=unit_interval)
    #: updates over which per_beta0 is annealed to 1
    per_beta_updates: int = attrs.field(default=50_000, validator=positive)
    #: added to |TD error| so that no transition gets priority 0
    per_eps: float = attrs.field(default=1e-3, validator=positive)
    #: a new transition's priority: "actor" (Ape-X: the worker sends the n-step TD error its own
    #: network gives, |R + discount * max_a Q(s', a) - Q(s, a)|) or "max" (the highest priority
    #: seen so far, which only grows: with many actors it over-samples fresh data). After each
    #: replay the learner sets the sample's priority again, to the |TD error| of the expected
    #: values, |E[target] - E[Z(s, a)]| (C51: the projected target's mean; QR: the mean target
    #: quantile), with its target net and double DQN's next action: what the actors send, in return
    #: units (an actor values s' with its own online net, maybe a few versions old: inherent to
    #: Ape-X; C51's actors clip the target to [v_min, v_max], as the projection clips each atom).
    #: Only a distributional head with "max" takes the sample's loss instead (Rainbow's
    #: cross-entropy; QR's quantile Huber loss): a loss is on another scale (nats; squared return
    #: units), so beside the actors' priorities fresh transitions would be sampled far too often or
    #: too seldom, while with "max" every priority is a loss, as in the paper
    initial_priority: str = attrs.field(default="actor", validator=attrs.validators.in_(["actor", "max"]))
    # --- the learner on a GPU (docs/benchmarks.md, "GPU learner")
    #: where the replay lives: "device" (frame store, references, scalars and priorities on the
    #: learner's torch device; sampling, the stack rebuild and the priority updates run there and
    #: never wait for the host), "host" (numpy; each batch gathered on the CPU and copied over), or
    #: "auto" (the device when it is a CUDA GPU and the replay needs at most half of its free
    #: memory). The learner logs the side it chose and why. The host keeps the bookkeeping either way
    replay_device: str = attrs.field(default="auto", validator=attrs.validators.in_(REPLAY_SIDES))
    #: make the next batch while the current update runs on the device (host replay: its sampling,
    #: gathering and copy overlap the GPU's work). Uniform replay gets the same batches in the same
    #: order; prioritized host replay draws the next batch before this update's priorities are written
    prefetch: bool = True
    #: "bf16": the update's forwards and losses under bfloat16 autocast (weights, Adam, targets' sums
    #: and priorities stay float32); "off": float32 throughout
    autocast: str = attrs.field(default="off", validator=attrs.validators.in_(["off", "bf16"]))
    #: torch.compile the update's forwards and loss (fewer kernel launches): "off", "default",
    #: "reduce-overhead" (CUDA graphs) or "max-autotune-no-cudagraphs"; the first updates compile
    compile: str = attrs.field(default="off", validator=attrs.validators.in_(COMPILE_MODES))
    # --- exploration (per env: max(ladder value, linear decay from epsilon_start))
    #: Ape-X ladder: env i of N explores with epsilon_base ** (1 + epsilon_alpha * i / (N - 1))
    epsilon_base: float = attrs.field(default=0.4, validator=unit_interval)
    #: Ape-X ladder exponent spread
    epsilon_alpha: float = attrs.field(default=7.0, validator=non_negative)
    #: epsilon of every env when its actor starts
    epsilon_start: float = attrs.field(default=1.0, validator=unit_interval)
    #: actor env steps (summed over its envs) over which epsilon falls linearly to the ladder value
    epsilon_decay_steps: int = attrs.field(default=10_000, validator=non_negative)
    # --- takeovers (a person playing mid-episode, the batch's ``intervention`` rows: docs/demonstrations.md)
    #: weight of DQfD's large-margin loss on the transitions a person took over, summed over those
    #: rows and divided by the batch (DQfD's and HIL-SERL's weight 1.0): the person's action is pushed
    #: above the others by ``takeover_margin``; 0: they are replayed as the agent's own steps
    takeover_margin_loss: float = attrs.field(default=1.0, validator=non_negative)
    #: the margin of that loss (DQfD's 0.8)
    takeover_margin: float = attrs.field(default=0.8, validator=non_negative)
    #: takeover transitions also kept in the protected part of replay, never evicted by the agent's
    #: own (beyond this many the oldest takeovers go; 0: in the ring only)
    takeover_keep: int = attrs.field(default=50_000, validator=non_negative)
    #: share of each batch drawn from that protected part once it holds takeovers (with the margin
    #: loss; HIL-SERL draws half of each batch from its demonstrations)
    takeover_ratio: float = attrs.field(default=0.25, validator=unit_interval)

    def __attrs_post_init__(self):
        if self.buffer_size < self.batch_size:
            raise ConfigError(f"buffer_size={self.buffer_size}: must be >= batch_size ({self.batch_size})")
        if self.distributional == "c51" and (self.v_min is None or self.v_max is None):
            self._derive_support()
        if self.target_update_env_steps > 0:
            self.target_update_every = max(1, round(self.target_update_env_steps * self.replay_ratio / self.batch_size))
        if self.v_min is not None and self.v_max is not None and not self.v_min < self.v_max:
            raise ConfigError(f"v_min={self.v_min}, v_max={self.v_max}: v_min must be < v_max")

    def _derive_support(self) -> None:
        """C51's support from ``reward_max`` (one log line), or one clear error: a support that
        does not span the game's returns clips every target to its edge atoms, silently."""
        if self.reward_max is None:
            raise ConfigError(
                'distributional = "c51" needs its support: set v_min and v_max just outside the game\'s '
                "discounted returns (CartPole at gamma 0.99: 0 and 100), or reward_max (the largest |reward| "
                "of one env step) to derive +-reward_max / (1 - gamma)"
            )
        bound = float(self.reward_max) / (1.0 - self.gamma) if self.gamma < 1.0 else None
        if bound is None:
            raise ConfigError("reward_max cannot derive C51's support at gamma = 1: set v_min and v_max")
        self.v_min = -bound if self.v_min is None else self.v_min
        self.v_max = bound if self.v_max is None else self.v_max
        log.info(
            "C51 support derived: v_min=%g, v_max=%g (reward_max %g / (1 - gamma %g)); set v_min/v_max to narrow it",
            self.v_min,
            self.v_max,
            self.reward_max,
            self.gamma,
        )


# --------------------------------------------------------------------------
# 2. Spaces and the network description
# --------------------------------------------------------------------------


def check_spaces(obs_space: gym.Space, act_space: gym.Space) -> tuple[ObsSize, int]:
    """Observation size (flattened) and action count; Box observations of uint8, bool or float
    dtype -> Discrete actions. The size is an :class:`~mqttrl.nets.ObsSize`: an ``int`` that also
    keeps the observation's shape and dtype, which :func:`net_info` describes the torso from."""
    if not isinstance(act_space, gym.spaces.Discrete):
        raise TypeError(f"dqn needs a Discrete action space, got {act_space!r}")
    if act_space.start != 0:
        raise TypeError(f"dqn needs actions numbered from 0, got {act_space!r}")
    return ObsSize.of(obs_space, "dqn"), int(act_space.n)


def net_info(obs_dim: int, n_actions: int, params: DQNParams) -> dict[str, Any]:
    """The Q-network as the weights' ``info`` describes it (and checkpoints check it).

    A torso (:mod:`mqttrl.nets`, its tensors under ``trunk.``), then ``value`` and ``advantage``
    heads (dueling) or one ``head``; the torch ``QNetwork`` and the numpy forward both follow
    this layout. An MLP over float observations (``trunk.{0,2,...}`` Linear + ReLU) is described
    by ``obs_dim`` and ``hidden`` alone, as before there were other torsos (so older weights and
    checkpoints still fit); any other torso travels as ``info["torso"]``. ``obs_dim`` is what
    :func:`check_spaces` returns (a plain ``int`` means a flat float observation).

    The head's kind is only written when it is not the plain one: ``distributional`` ("c51" with
    ``n_atoms``, ``v_min``, ``v_max``; "qr" with ``n_quantiles``) and ``noisy: true`` (the head's
    tensors are then ``{weight,bias}_{mu,sigma}``); see :mod:`.numpy_heads`; with it ``noisy_layers:
    "all"`` when the torso's dense layers are noisy too (their tensors named alike).
    """
    info = {
        "obs_dim": int(obs_dim),
        "n_actions": n_actions,
        "hidden": list(params.hidden),
        "dueling": bool(params.dueling),
    }
    shape, dtype = getattr(obs_dim, "shape", (int(obs_dim),)), getattr(obs_dim, "dtype", np.float32)
    torso = describe_torso(params.network, shape, dtype, params.hidden)
    if torso["network"] != "mlp" or torso["obs_scale"] != 1.0:
        info["torso"] = torso
    if params.distributional == "c51":
        assert params.v_min is not None and params.v_max is not None  # given or derived (DQNParams)
        info.update(
            distributional="c51", n_atoms=int(params.n_atoms), v_min=float(params.v_min), v_max=float(params.v_max)
        )
    elif params.distributional == "qr":
        info.update(distributional="qr", n_quantiles=int(params.n_quantiles))
    if params.noisy:
        info["noisy"] = True
        if params.noisy_layers == "all" and torso["dense"]:
            info["noisy_layers"] = "all"
    return info


# --------------------------------------------------------------------------
# 3. Sample spec: one n-step transition
# --------------------------------------------------------------------------


#: most transitions in one batch
MAX_TRANSITIONS = 65536


def sample_spec(params: DQNParams, obs_space: gym.Space, act_space: gym.Space) -> SampleSpec:
    """``reward`` is the discounted n-step return; ``discount`` multiplies the bootstrap value.

    discount = gamma ** k for the k rewards summed, or 0 if the episode
    terminated inside the window (truncation still bootstraps from next_obs).
    Observations keep their dtype. Image observations come as frames
    (:mod:`.frames`): ``frames`` (the batch's unique frames), ``frame_ids`` (their
    serials, per sender) and ``obs_ref`` / ``next_obs_ref`` (``k`` rows into ``frames``
    per transition) instead of ``obs`` / ``next_obs``.
    """
    _, n_actions = check_spaces(obs_space, act_space)
    assert obs_space.shape is not None  # a Box: check_spaces took it
    shape = tuple(int(s) for s in obs_space.shape)
    layout = frame_layout(params.frames, obs_space)
    if layout is None:
        dtype = obs_dtype(obs_space).name
        observations = {"obs": FieldSpec(dtype, shape), "next_obs": FieldSpec(dtype, shape)}
    else:
        pool = 2 * layout.k * MAX_TRANSITIONS
        observations = {
            "frames": FieldSpec(layout.dtype, layout.frame_shape, per_transition=False, max_rows=pool),
            "frame_ids": FieldSpec("int64", (), per_transition=False, max_rows=pool, low=0),
            "obs_ref": FieldSpec("int32", (layout.k,), low=0, ref="frames"),
            "next_obs_ref": FieldSpec("int32", (layout.k,), low=0, ref="frames"),
        }
    if actor_priorities(params):  # the actor's |TD error| of each transition
        observations["priority"] = FieldSpec("float32", (), low=0.0)
    # 1 where a person took the transition's first step (a takeover); sent only by a batch that has one
    observations["intervention"] = FieldSpec("uint8", (), low=0, high=1, optional=True)
    return SampleSpec(
        fields={
            **observations,
            "action": FieldSpec("int64", (), low=0, high=n_actions - 1),
            "reward": FieldSpec("float32", ()),
            "discount": FieldSpec("float32", (), low=0.0, high=1.0),
        },
        max_transitions=MAX_TRANSITIONS,
    )


def actor_priorities(params: DQNParams) -> bool:
    """Whether batches carry the actors' priorities (prioritized replay, initial_priority "actor")."""
    return bool(params.prioritized) and params.initial_priority == "actor"
