"""SAC on Pendulum-v1 against Stable-Baselines3 SAC with the same networks and optimiser, per env
step: 20k env steps a run, the first greedy mean at or above -200 (docs/benchmarks/continuous-control.md).

SB3 SAC as configs/pendulum_sac.toml: net_arch [64, 64] for the policy and both critics, batch 128,
Adam lr 1e-3, tau 0.005, gamma 0.99, buffer 100k, 1000 random steps first, one gradient step per env
step, the temperature learnt (target entropy -|A|)."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario

PENDULUM_SAC = dict(
    learning_rate=1e-3,
    buffer_size=100_000,
    learning_starts=1000,
    batch_size=128,
    tau=0.005,
    gamma=0.99,
    train_freq=1,
    gradient_steps=1,
    ent_coef="auto",
    policy_kwargs=dict(net_arch=[64, 64]),
)

SCENARIO = Scenario(
    title="Continuous control, Pendulum (SAC)",
    page="benchmarks/continuous-control.md",
    target=-200.0,
    measure="steps_to_target",
    seconds=0,
    env_steps=20_000,
    stop_at_target=False,
    seeds=10,
    episodes=10,
    sides=(
        Mqttrl("mqttrl SAC (2 x 2)", "configs/pendulum_sac.toml", ("train.eval_every_s=0.5",)),
        Baseline("SB3 SAC", "sb3", "SAC", "Pendulum-v1", PENDULUM_SAC),
    ),
    eval_every_steps=500,
)
