"""DQN on LunarLander-v3 with 10 and 50 episodes of gymnasium's heuristic lander as demonstrations
(DQfD's margin loss on), against the same run without: env steps to a greedy mean of 200
(docs/benchmarks/demonstrations.md; needs ``pip install -e '.[box2d]'``)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

CONFIG = "configs/lunarlander_dqn.toml"
MARGIN = ("demos.margin_loss=1.0",)

SCENARIO = Scenario(
    title="Learning from demonstrations (DQN)",
    page="benchmarks/demonstrations.md",
    target=200.0,
    measure="steps_to_target",
    seconds=300,
    demonstrator="gymnasium.envs.box2d.lunar_lander:heuristic",
    sides=(
        Mqttrl("no demos", CONFIG, MARGIN, role="peer"),
        Mqttrl("10 demos", CONFIG, MARGIN, demos=10),
        Mqttrl("50 demos", CONFIG, MARGIN, demos=50),
    ),
)
