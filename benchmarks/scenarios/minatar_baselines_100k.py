"""SB3 DQN and sb3-contrib QR-DQN on MinAtar Breakout for 100k env steps, evaluated every 5,000
(docs/benchmarks/rainbow.md; needs ``pip install sb3-contrib``). QR-DQN has every one of SB3 DQN's
settings and one linear head of 51 quantiles per action (mqttrl's QR default; sb3-contrib's 200 cost
25x more per loss here); the paper's Atari settings are for 10M-200M frames and not used."""

from benchmarks.harness.scenario import Scenario
from benchmarks.scenarios.minatar_dqn import MINATAR_DQN, sb3_dqn

SCENARIO = Scenario(
    title="MinAtar Breakout at 100k env steps, SB3 baselines",
    page="benchmarks/rainbow.md",
    target=10.0,
    measure="best",
    seconds=3600,
    env_steps=100_000,
    stop_at_target=False,
    sides=(
        sb3_dqn(),
        sb3_dqn(
            "sb3-contrib QR-DQN",
            "sb3_contrib",
            "QRDQN",
            policy_kwargs=MINATAR_DQN["policy_kwargs"] | {"n_quantiles": 51},
        ),
    ),
    headline=False,
)
