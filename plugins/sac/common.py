"""What SAC's worker side and learner side share: hyperparameters, spaces, network description, sample spec.

Both :mod:`.actor` (numpy only) and :mod:`.learner` (torch) import this module, so it needs
nothing but numpy, gymnasium and mqttrl's public plugin API (``mqttrl.plugin``, the validators
of ``mqttrl.config``).

1. ``SACParams``: the hyperparameters (``[algorithm]`` in a config), with the ``redq`` preset;
2. ``check_spaces``, ``net_info`` and the action scaling: flat float observations, float Box
   actions with finite bounds; the policy's description that travels with its weights;
3. ``sample_spec``: one transition on the wire, its action in the squashed unit box [-1, 1].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin import ConfigError, FieldSpec, SampleSpec, layer_sizes, non_negative, positive, unit_positive

if TYPE_CHECKING:
    from .crossq_params import CrossQParams

# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------

#: the policy's log standard deviation is squashed into [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's and
#: SpinningUp's range for the upper end; -5 keeps the squashed log-density finite in float32)
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

#: ``[algorithm] preset = NAME``: the keys a preset fills in where the config leaves them out.
#: "redq" is REDQ (Chen et al. 2021, "Randomized Ensembled Double Q-Learning"): N = 10 critics, the
#: target's minimum over a random subset of M = 2 of them, G = 20 critic updates per env step, the
#: policy updated once per env step (``policy_every = 0``: every G critic updates, whatever G a config
#: sets) against the mean of all critics.
PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "redq": {"critics": 10, "target_subset": 2, "utd": 20.0, "policy_every": 0, "policy_q": "mean"},
}


def _preset_name(inst, attribute, value):
    if value not in PRESETS:
        raise ConfigError(f"{attribute.name}={value!r}: unknown preset; presets: {', '.join(map(repr, PRESETS))}")


@attrs.define
class SACParams:
    #: the presets :func:`mqttrl.config.build` applies (``preset`` below)
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = PRESETS
    #: "none" (SAC: twin critics) or "redq" (REDQ: 10 critics, a random pair in the target, 20 critic
    #: updates per env step, the policy against the critics' mean); the config's own keys win
    preset: str = attrs.field(default="none", validator=_preset_name)
    # --- optimisation
    #: Adam learning rate of the policy
    actor_lr: float = attrs.field(default=3e-4, validator=positive)
    #: Adam learning rate of the critics
    critic_lr: float = attrs.field(default=1e-3, validator=positive)
    #: Adam learning rate of the entropy temperature's logarithm
    alpha_lr: float = attrs.field(default=1e-3, validator=positive)
    #: discount per env step
    gamma: float = attrs.field(default=0.99, validator=unit_positive)
    #: target critics move this share towards the critics after every critic update (Polyak averaging)
    tau: float = attrs.field(default=0.005, validator=unit_positive)
    #: transitions per gradient update
    batch_size: int = attrs.field(default=256, validator=positive)
    # --- networks (MLPs with ReLU, the policy's and each critic's)
    #: sizes of the hidden layers, of the policy and of each critic
    hidden: list = attrs.field(factory=lambda: [256, 256], validator=layer_sizes)
    # --- critics: SAC's twin Q (2 and 2) or REDQ's ensemble (10 and 2)
    #: critics in the ensemble (N), all trained on the same target
    critics: int = attrs.field(default=2, validator=positive)
    #: the target takes the minimum over a random subset of this many target critics (M <= N), drawn
    #: afresh at every update; M = N is SAC's clipped double Q
    target_subset: int = attrs.field(default=2, validator=positive)
    #: the policy maximises "min" (SAC) or "mean" (REDQ) of all critics' Q(s, pi(s))
    policy_q: str = attrs.field(default="min", validator=attrs.validators.in_(["min", "mean"]))
    # --- entropy temperature
    #: tune alpha so that the policy's entropy tracks target_entropy (Haarnoja et al. 2018b); false: alpha is fixed
    autotune: bool = True
    #: the temperature at the start (or always, without autotune)
    alpha: float = attrs.field(default=1.0, validator=positive)
    #: the entropy the temperature aims at, in nats of the squashed action in [-1, 1]; none: -(action size)
    target_entropy: float | None = None
    # --- replay and pacing
    #: transitions the replay buffer holds (the oldest are overwritten)
    buffer_size: int = attrs.field(default=1_000_000, validator=positive)
    #: no training until the buffer holds this many transitions; until the learner has trained, the
    #: workers act uniformly at random in the action box (SAC's initial exploration)
    learning_starts: int = attrs.field(default=1000, validator=positive)
    #: critic updates per transition received (the update-to-data ratio, REDQ's G); the learner trains while below it
    utd: float = attrs.field(default=1.0, validator=positive)
    #: critic updates per policy (and temperature) update; 0: once per env step, i.e. every ``utd``
    #: critic updates (REDQ's choice; the "redq" preset sets 0, so a config's own ``utd`` keeps it)
    policy_every: int = attrs.field(default=1, validator=non_negative)
    #: workers pause (flow control) once the learner owes the updates of this many transitions
    max_debt_transitions: int = attrs.field(default=256, validator=positive)
    #: updates owed for more transitions than this are forgiven (a backlog after an outage is replayed less)
    forgive_debt_above: int = attrs.field(default=5000, validator=positive)

    def __attrs_post_init__(self):
        if self.target_subset > self.critics:
            raise ConfigError(f"target_subset={self.target_subset}: must be <= critics ({self.critics})")
        if self.buffer_size < self.batch_size:
            raise ConfigError(f"buffer_size={self.buffer_size}: must be >= batch_size ({self.batch_size})")

    @property
    def policy_period(self) -> int:
        """Critic updates per policy update: ``policy_every``, or with 0 one per env step (``utd``)."""
        return self.policy_every or max(1, round(self.utd))


# --------------------------------------------------------------------------
# 2. Spaces, action scaling and the network description
# --------------------------------------------------------------------------


def check_spaces(obs_space: gym.Space, act_space: gym.Space) -> tuple[int, int]:
    """(flat observation size, action size): float Box observations, float Box actions with finite bounds."""
    if not (isinstance(obs_space, gym.spaces.Box) and np.issubdtype(obs_space.dtype, np.floating)):
        raise TypeError(f"sac needs float Box observations (vectors), got {obs_space!r}")
    if not (isinstance(act_space, gym.spaces.Box) and np.issubdtype(act_space.dtype, np.floating)):
        raise TypeError(f"sac needs a float Box action space, got {act_space!r}")
    if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
        raise TypeError(f"sac needs finite action bounds (it squashes into them), got {act_space!r}")
    return int(np.prod(obs_space.shape, dtype=np.int64)), int(np.prod(act_space.shape, dtype=np.int64))


def net_info(obs_dim: int, act_space: gym.spaces.Box, params: SACParams | CrossQParams) -> dict[str, Any]:
    """The policy network as its weights' ``info`` describes it: an MLP ``body.{0,2,...}`` (Linear +
    ReLU) over the flat observation, then ``mean`` and ``log_std`` linear heads; the action box the
    squashed action is scaled into. The numpy and torch forwards and the export all follow it.
    CrossQ's params (with ``batch_norm_eps``) add it: a BatchRenorm ``norm.{i}`` before each Linear
    and before the heads, applied with its running statistics outside the learner."""
    info = {
        "obs_dim": int(obs_dim),
        "act_dim": int(np.prod(act_space.shape, dtype=np.int64)),
        "hidden": [int(h) for h in params.hidden],
        "action_low": np.asarray(act_space.low, np.float64).reshape(-1).tolist(),
        "action_high": np.asarray(act_space.high, np.float64).reshape(-1).tolist(),
        "log_std_min": LOG_STD_MIN,
        "log_std_max": LOG_STD_MAX,
    }
    eps = getattr(params, "batch_norm_eps", None)
    if eps is not None:
        info["batch_norm_eps"] = float(eps)
    return info


def check_info(info: Mapping[str, Any], obs_dim: int, act_dim: int) -> None:
    """ValueError unless weights described by ``info`` fit observations of ``obs_dim`` and actions of ``act_dim``."""
    if int(info.get("obs_dim", obs_dim)) != obs_dim or int(info.get("act_dim", act_dim)) != act_dim:
        raise ValueError(
            f"weights are for obs_dim={info.get('obs_dim')}, act_dim={info.get('act_dim')}; "
            f"this env has obs_dim={obs_dim}, act_dim={act_dim}"
        )


def action_scale(info: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(center, half width) of the action box: env action = center + half * squashed action."""
    low = np.asarray(info["action_low"], np.float64)
    high = np.asarray(info["action_high"], np.float64)
    return (high + low) / 2.0, (high - low) / 2.0


def to_env_action(unit: np.ndarray, act_space: gym.spaces.Box) -> np.ndarray:
    """Squashed actions in [-1, 1] (rows) -> the env's box, in its dtype and shape, clipped against rounding."""
    low = np.asarray(act_space.low, np.float64).reshape(-1)
    high = np.asarray(act_space.high, np.float64).reshape(-1)
    env = (high + low) / 2.0 + (high - low) / 2.0 * np.asarray(unit, np.float64)
    env = np.clip(env, low, high).astype(act_space.dtype)
    return env.reshape(len(env), *act_space.shape)


def to_unit_action(action: np.ndarray, act_space: gym.spaces.Box) -> np.ndarray:
    """The inverse of :func:`to_env_action` (rows), clipped to [-1, 1]."""
    low = np.asarray(act_space.low, np.float64).reshape(-1)
    high = np.asarray(act_space.high, np.float64).reshape(-1)
    a = np.asarray(action, np.float64).reshape(len(action), -1)
    return np.clip((a - (high + low) / 2.0) / ((high - low) / 2.0), -1.0, 1.0)


def squash_log_std(raw: np.ndarray) -> np.ndarray:
    """The policy's raw log-std output -> [LOG_STD_MIN, LOG_STD_MAX] through tanh (smooth at the ends)."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(raw) + 1.0)


# --------------------------------------------------------------------------
# 3. Sample spec: one transition
# --------------------------------------------------------------------------

#: most transitions in one batch
MAX_TRANSITIONS = 65536


def sample_spec(params: SACParams, obs_space: gym.Space, act_space: gym.Space) -> SampleSpec:
    """``action`` is the squashed action in [-1, 1] (what the critics take; the env got it scaled
    into its box); ``discount`` is gamma, or 0 where the episode terminated (a truncation bootstraps
    from ``next_obs``, the true final observation)."""
    obs_dim, act_dim = check_spaces(obs_space, act_space)
    return SampleSpec(
        fields={
            "obs": FieldSpec("float32", (obs_dim,)),
            "next_obs": FieldSpec("float32", (obs_dim,)),
            "action": FieldSpec("float32", (act_dim,), low=-1.0, high=1.0),
            "reward": FieldSpec("float32", ()),
            "discount": FieldSpec("float32", (), low=0.0, high=1.0),
        },
        max_transitions=MAX_TRANSITIONS,
    )


def default_target_entropy(params: SACParams, act_dim: int) -> float:
    """``params.target_entropy``, or SAC's heuristic -|A|."""
    return float(-act_dim if params.target_entropy is None else params.target_entropy)
