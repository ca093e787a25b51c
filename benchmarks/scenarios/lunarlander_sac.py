"""SAC on LunarLanderContinuous-v3 against Stable-Baselines3 SAC with rl-baselines3-zoo's
hyperparameters (the learning rate constant on both sides), 200k env steps a run
(docs/benchmarks/continuous-control.md; needs ``pip install -e '.[bench]'``; hours a seed)."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario

ZOO_SAC = dict(
    learning_rate=7.3e-4,
    buffer_size=1_000_000,
    learning_starts=10_000,
    batch_size=256,
    tau=0.01,
    gamma=0.99,
    train_freq=1,
    gradient_steps=1,
    ent_coef="auto",
    policy_kwargs=dict(net_arch=[400, 300]),
)

SCENARIO = Scenario(
    title="Continuous control, LunarLander (SAC)",
    page="benchmarks/continuous-control.md",
    target=200.0,
    measure="steps_to_target",
    seconds=0,
    env_steps=200_000,
    stop_at_target=False,
    seeds=1,
    episodes=10,
    sides=(
        Mqttrl("mqttrl SAC", "configs/lunarlander_continuous_sac.toml"),
        Baseline("SB3 SAC", "sb3", "SAC", "LunarLanderContinuous-v3", ZOO_SAC),
    ),
)
