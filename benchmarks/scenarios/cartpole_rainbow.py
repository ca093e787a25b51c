"""Rainbow on CartPole-v1: time to a greedy mean of 475 within 10 minutes (docs/benchmarks/rainbow.md)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

SCENARIO = Scenario(
    title="Rainbow, CartPole",
    page="benchmarks/rainbow.md",
    target=475.0,
    measure="seconds_to_target",
    seconds=600,
    sides=(Mqttrl("mqttrl Rainbow", "configs/cartpole_rainbow.toml"),),
)
