"""PPO on LunarLander-v3 with 10 and 50 heuristic demonstration episodes (behaviour cloning first),
against the same run without (docs/benchmarks/demonstrations.md)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

CONFIG = "configs/lunarlander_ppo.toml"

SCENARIO = Scenario(
    title="Learning from demonstrations (PPO)",
    page="benchmarks/demonstrations.md",
    target=200.0,
    measure="steps_to_target",
    seconds=300,
    seeds=1,
    demonstrator="gymnasium.envs.box2d.lunar_lander:heuristic",
    sides=(
        Mqttrl("no demos", CONFIG, ("train.eval_every_s=10",), role="peer"),
        Mqttrl("10 demos", CONFIG, ("train.eval_every_s=10",), demos=10),
        Mqttrl("50 demos", CONFIG, ("train.eval_every_s=10",), demos=50),
    ),
    headline=False,
)
