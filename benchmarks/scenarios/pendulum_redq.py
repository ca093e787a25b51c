"""REDQ (G = 20 critic updates per env step) against SAC, both 1 worker x 1 env, on Pendulum-v1:
env steps to a greedy mean of -200 (docs/benchmarks/continuous-control.md). ``--set algorithm.utd=5``
gives REDQ at G = 5."""

from benchmarks.harness.scenario import Mqttrl, Scenario

ONE_BY_ONE = ("train.workers=1", "env.num_envs=1")

SCENARIO = Scenario(
    title="Continuous control, REDQ",
    page="benchmarks/continuous-control.md",
    target=-200.0,
    measure="steps_to_target",
    seconds=0,
    env_steps=20_000,
    stop_at_target=False,
    episodes=10,
    sides=(
        Mqttrl("mqttrl REDQ (G = 20, 1 × 1)", "configs/pendulum_redq.toml", (*ONE_BY_ONE, "train.eval_every_s=2")),
        Mqttrl("mqttrl SAC (1 × 1)", "configs/pendulum_sac.toml", (*ONE_BY_ONE, "train.eval_every_s=0.5"), role="peer"),
    ),
)
