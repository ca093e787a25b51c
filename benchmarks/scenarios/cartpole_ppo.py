"""PPO on CartPole-v1 against Stable-Baselines3 PPO with the rl-baselines3-zoo hyperparameters
(hyperparams/ppo.yml), time to a greedy mean of 475 (docs/benchmarks/learning-speed.md)."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario

#: rl-baselines3-zoo's CartPole-v1 PPO (learning rate and clip range decay linearly)
ZOO_PPO = dict(
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,
    clip_range=0.2,
)

SCENARIO = Scenario(
    title="Learning speed, CartPole (PPO)",
    page="benchmarks/learning-speed.md",
    target=475.0,
    measure="training_seconds_to_target",
    seconds=600,
    sides=(
        Mqttrl("mqttrl PPO", "configs/cartpole_ppo.toml"),
        Baseline("SB3 PPO", "sb3", "PPO", "CartPole-v1", ZOO_PPO, n_envs=8, linear=("learning_rate", "clip_range")),
    ),
    eval_every_steps=5000,
)
