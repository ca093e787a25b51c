"""PPO on LunarLander-v3 against Stable-Baselines3 PPO with the rl-baselines3-zoo hyperparameters,
time to a greedy mean of 200 (docs/benchmarks/learning-speed.md; needs ``pip install -e '.[bench]'``)."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario

#: rl-baselines3-zoo's LunarLander PPO
ZOO_PPO = dict(
    n_steps=1024,
    batch_size=64,
    gae_lambda=0.98,
    gamma=0.999,
    n_epochs=4,
    ent_coef=0.01,
    learning_rate=3e-4,
    clip_range=0.2,
)

SCENARIO = Scenario(
    title="Learning speed, LunarLander (PPO)",
    page="benchmarks/learning-speed.md",
    target=200.0,
    measure="training_seconds_to_target",
    seconds=600,
    seeds=1,
    sides=(
        Mqttrl("mqttrl PPO", "configs/lunarlander_ppo.toml"),
        Baseline("SB3 PPO", "sb3", "PPO", "LunarLander-v3", ZOO_PPO, n_envs=16),
    ),
    eval_every_steps=20_000,
)
