"""REDQ against SAC, both 1 worker x 1 env, on Pendulum-v1: env steps to a greedy mean of -200
(docs/benchmarks/continuous-control.md), the budget and protocol of the pendulum_sac scenario.
REDQ makes the config's G = 20 critic updates per env step; ``--set algorithm.utd=5`` gives G = 5."""

from dataclasses import replace

from benchmarks.harness.scenario import Mqttrl
from benchmarks.scenarios import pendulum_sac

ONE_BY_ONE = ("train.workers=1", "env.num_envs=1")

SCENARIO = replace(
    pendulum_sac.SCENARIO,
    title="Continuous control, REDQ",
    seeds=3,
    sides=(
        Mqttrl("mqttrl REDQ (1 x 1)", "configs/pendulum_redq.toml", (*ONE_BY_ONE, "train.eval_every_s=2")),
        Mqttrl("mqttrl SAC (1 x 1)", "configs/pendulum_sac.toml", (*ONE_BY_ONE, "train.eval_every_s=0.5"), role="peer"),
    ),
)
