"""CrossQ on Pendulum-v1 against sb3-contrib's CrossQ, mqttrl SAC and Stable-Baselines3 SAC, per env
step (issue 37): 20k env steps a run, the first greedy mean at or above -200: scenario ``pendulum_sac``'s budget and
cadence, with the CrossQs beside its SAC sides.

Both CrossQs as configs/pendulum_crossq.toml: policy [64, 64], critics [256, 256] with batch
renormalisation (warmup 100k forwards, so plain batch norm within this budget, as sb3-contrib's
default), Adam lr 1e-3 with betas (0.5, 0.999), no target critics, the policy updated every 3
critic updates, batch 128, buffer 100k, 1000 random steps first, one gradient step per env step,
the temperature learnt. The SAC sides as scenario ``pendulum_sac`` (networks [64, 64])."""

import dataclasses

from benchmarks.harness.scenario import Baseline, Mqttrl
from benchmarks.scenarios.pendulum_sac import SCENARIO as PENDULUM_SAC_SCENARIO

PENDULUM_CROSSQ = dict(
    learning_rate=1e-3,
    buffer_size=100_000,
    learning_starts=1000,
    batch_size=128,
    gamma=0.99,
    train_freq=1,
    gradient_steps=1,
    ent_coef="auto",
    policy_delay=3,
    policy_kwargs=dict(net_arch=dict(pi=[64, 64], qf=[256, 256])),
)

MQTTRL_SAC, SB3_SAC = PENDULUM_SAC_SCENARIO.sides

SCENARIO = dataclasses.replace(
    PENDULUM_SAC_SCENARIO,
    title="Continuous control, Pendulum (CrossQ)",
    seeds=3,
    sides=(
        Mqttrl("mqttrl CrossQ (2 x 2)", "configs/pendulum_crossq.toml", ("train.eval_every_s=0.5",)),
        MQTTRL_SAC,
        Baseline("sb3-contrib CrossQ", "sb3_contrib", "CrossQ", "Pendulum-v1", PENDULUM_CROSSQ),
        SB3_SAC,
    ),
)
