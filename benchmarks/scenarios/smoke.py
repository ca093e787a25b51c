"""A few seconds of DQN on CartPole: that the runner, the results file and the report work end to end
(``tests/test_benchmarks_page.py``), not a figure anyone quotes."""

from benchmarks.harness.scenario import Mqttrl, Scenario

SCENARIO = Scenario(
    title="Smoke: CartPole DQN, seconds",
    page="benchmarks.md",
    target=475.0,
    measure="best",
    seconds=8,
    seeds=1,
    episodes=2,
    sides=(
        Mqttrl(
            "mqttrl DQN",
            "configs/cartpole_dqn.toml",
            ("train.workers=1", "env.num_envs=2", "train.eval_every_s=2", "train.eval_episodes=2"),
        ),
    ),
    headline=False,
)
