"""CrossQ's hyperparameters (``[algorithm] name = "crossq"``), numpy only like :mod:`.common`.

CrossQ (Bhatt et al., ICLR 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity") is SAC without target critics: batch renormalisation in
the critics and the policy, the current and the next state-actions through the critics in one
forward (so the normalisation sees both), Adam with beta1 0.5, the policy updated every 3 critic
updates. The defaults are SB3-contrib 2.9's ``CrossQ`` (learning rate 1e-3 for all, batch 256,
policy [256, 256], critics [1024, 1024], BatchRenorm momentum 0.01, eps 1e-3, 100k warmup forwards,
r_max 3, d_max 5); the paper's critics are [2048, 2048] (``configs/hopper_crossq.toml``).
"""

from __future__ import annotations

import attrs

from mqttrl.plugin import ConfigError, layer_sizes, positive, unit_positive


def _beta(inst, attribute, value):
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{attribute.name}={value!r}: must be in [0, 1)")


# what `mqttrl settings` shows; a function attribute, which mypy does not model
_beta.allowed = ">= 0 and < 1"  # type: ignore[attr-defined]


@attrs.define
class CrossQParams:
    # --- optimisation
    #: Adam learning rate of the policy
    actor_lr: float = attrs.field(default=1e-3, validator=positive)
    #: Adam learning rate of the critics
    critic_lr: float = attrs.field(default=1e-3, validator=positive)
    #: Adam learning rate of the entropy temperature's logarithm (Adam's default betas)
    alpha_lr: float = attrs.field(default=1e-3, validator=positive)
    #: Adam's beta1 for the policy and the critics (CrossQ's 0.5; SAC's Adam has 0.9)
    adam_beta1: float = attrs.field(default=0.5, validator=_beta)
    #: Adam's beta2 for the policy and the critics
    adam_beta2: float = attrs.field(default=0.999, validator=_beta)
    #: discount per env step
    gamma: float = attrs.field(default=0.99, validator=unit_positive)
    #: transitions per gradient update (the critics' joint forward takes twice as many rows)
    batch_size: int = attrs.field(default=256, validator=positive)
    # --- networks (MLPs with ReLU, a BatchRenorm before every Linear)
    #: hidden layers of the policy
    hidden: list = attrs.field(factory=lambda: [256, 256], validator=layer_sizes)
    #: hidden layers of each critic (CrossQ's critics are wide: the paper's 2048, SB3-contrib's 1024)
    critic_hidden: list = attrs.field(factory=lambda: [1024, 1024], validator=layer_sizes)
    #: critics (each with its own normalisation); the target is their minimum, as SAC's twin Q
    critics: int = attrs.field(default=2, validator=positive)
    # --- batch renormalisation
    #: the running statistics move this share towards each training batch's
    batch_norm_momentum: float = attrs.field(default=0.01, validator=unit_positive)
    #: added to the variances before their square root
    batch_norm_eps: float = attrs.field(default=1e-3, validator=positive)
    #: training forwards of a layer that use plain batch norm (the batch's statistics) before renorm starts
    renorm_warmup: int = attrs.field(default=100_000, validator=attrs.validators.ge(0))
    #: renorm's scale correction r = sigma_batch / sigma_running is clipped to [1 / r_max, r_max]
    renorm_r_max: float = attrs.field(default=3.0, validator=attrs.validators.ge(1.0))
    #: renorm's shift correction d = (mu_batch - mu_running) / sigma_running is clipped to [-d_max, d_max]
    renorm_d_max: float = attrs.field(default=5.0, validator=attrs.validators.ge(0.0))
    #: critic updates per policy (and temperature) update
    policy_delay: int = attrs.field(default=3, validator=positive)
    # --- entropy temperature (as SAC's)
    #: tune alpha so that the policy's entropy tracks target_entropy; false: alpha is fixed
    autotune: bool = True
    #: the temperature at the start (or always, without autotune)
    alpha: float = attrs.field(default=1.0, validator=positive)
    #: the entropy the temperature aims at, in nats of the squashed action in [-1, 1]; none: -(action size)
    target_entropy: float | None = None
    # --- replay and pacing (as SAC's)
    #: transitions the replay buffer holds (the oldest are overwritten)
    buffer_size: int = attrs.field(default=1_000_000, validator=positive)
    #: no training until the buffer holds this many transitions; until then the workers act uniformly at random
    learning_starts: int = attrs.field(default=1000, validator=positive)
    #: critic updates per transition received (CrossQ's point is 1)
    utd: float = attrs.field(default=1.0, validator=positive)
    #: workers pause (flow control) once the learner owes the updates of this many transitions
    max_debt_transitions: int = attrs.field(default=256, validator=positive)
    #: updates owed for more transitions than this are forgiven (a backlog after an outage is replayed less)
    forgive_debt_above: int = attrs.field(default=5000, validator=positive)

    def __attrs_post_init__(self):
        if self.buffer_size < self.batch_size:
            raise ConfigError(f"buffer_size={self.buffer_size}: must be >= batch_size ({self.batch_size})")

    @property
    def renorm(self) -> dict[str, float]:
        """The BatchRenorm layers' training settings (``batch_renorm.BatchRenorm``'s keywords, eps aside)."""
        return {
            "momentum": self.batch_norm_momentum,
            "warmup": self.renorm_warmup,
            "r_max": self.renorm_r_max,
            "d_max": self.renorm_d_max,
        }
