"""DQN on CartPole-v1 alone: time to a greedy mean of 475 (docs/benchmarks/learning-speed.md)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

SCENARIO = Scenario(
    title="Learning speed, CartPole (DQN)",
    page="benchmarks/learning-speed.md",
    target=475.0,
    measure="seconds_to_target",
    seconds=600,
    sides=(Mqttrl("mqttrl DQN", "configs/cartpole_dqn.toml"),),
    headline=False,
)
