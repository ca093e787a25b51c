"""PPO on MinAtar Breakout alone, 15 minutes a run (docs/benchmarks/pixel-games.md): its curve beside
the DQN scenario's (``python -m benchmarks.report`` with both files and ``--plot``)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

SCENARIO = Scenario(
    title="MinAtar Breakout (PPO)",
    page="benchmarks/pixel-games.md",
    target=10.0,
    measure="best",
    seconds=900,
    stop_at_target=False,
    seeds=1,
    sides=(Mqttrl("mqttrl PPO", "configs/minatar_breakout_ppo.toml"),),
    headline=False,
)
