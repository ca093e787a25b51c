"""DQN on MinAtar Breakout with 20 episodes of a trained agent as demonstrations, against the same
run without, 60k env steps a run (docs/benchmarks/demonstrations.md). The demonstrator is a run
directory: ``--demonstrator RUN_DIR`` (``mqttrl record --from RUN_DIR``)."""

from benchmarks.harness.scenario import Mqttrl, Scenario

CONFIG = "configs/minatar_breakout_dqn.toml"
SETS = ("train.eval_every_s=4", "demos.margin_loss=1.0")

SCENARIO = Scenario(
    title="Learning from demonstrations, MinAtar Breakout (DQN)",
    page="benchmarks/demonstrations.md",
    target=10.0,
    measure="best",
    seconds=400,
    env_steps=60_000,
    stop_at_target=False,
    sides=(Mqttrl("no demos", CONFIG, SETS, role="peer"), Mqttrl("20 demos", CONFIG, SETS, demos=20)),
    headline=False,
)
