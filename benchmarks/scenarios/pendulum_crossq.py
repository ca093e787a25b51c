"""CrossQ on Pendulum-v1 against sb3-contrib's CrossQ, mqttrl SAC and Stable-Baselines3 SAC, per env
step (issue 37): 20k env steps a run, the first greedy mean at or above -200.

Both CrossQs as configs/pendulum_crossq.toml: policy [64, 64], critics [256, 256] with batch
renormalisation (warmup 100k forwards, so plain batch norm within this budget, as sb3-contrib's
default), Adam lr 1e-3 with betas (0.5, 0.999), no target critics, the policy updated every 3
critic updates, batch 128, buffer 100k, 1000 random steps first, one gradient step per env step,
the temperature learnt. The SAC sides as scenario ``pendulum_sac`` (networks [64, 64])."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario
from benchmarks.scenarios.pendulum_sac import PENDULUM_SAC

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

SCENARIO = Scenario(
    title="Continuous control, Pendulum (CrossQ)",
    page="benchmarks/continuous-control.md",
    target=-200.0,
    measure="steps_to_target",
    seconds=0,
    env_steps=20_000,
    stop_at_target=False,
    seeds=3,
    episodes=10,
    sides=(
        Mqttrl("mqttrl CrossQ (2 x 2)", "configs/pendulum_crossq.toml", ("train.eval_every_s=0.5",)),
        Mqttrl("mqttrl SAC (2 x 2)", "configs/pendulum_sac.toml", ("train.eval_every_s=0.5",)),
        Baseline("sb3-contrib CrossQ", "sb3_contrib", "CrossQ", "Pendulum-v1", PENDULUM_CROSSQ),
        Baseline("SB3 SAC", "sb3", "SAC", "Pendulum-v1", PENDULUM_SAC),
    ),
    eval_every_steps=500,
)
