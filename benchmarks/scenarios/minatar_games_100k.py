"""Three MinAtar games at 100k env steps (issue 37), one config per agent for every game (only
``env.id`` changed: nothing tuned per game), 3 seeds, greedy evaluation every 5,000 env steps for the
baselines (mqttrl evaluates every 15 s of its run), best and last greedy mean, the training return of
the last 100 episodes and the wall clock per env step:

- ``mqttrl dqn``: ``configs/minatar_breakout_dqn.toml`` (double, dueling, 3-step, replay ratio 8);
- ``mqttrl rainbow``: ``configs/minatar_rainbow.toml`` without its reset (replay ratio 32);
- ``mqttrl rainbow-resets``: ``configs/minatar_rainbow.toml`` as it is (one reset at 56k env steps);
- ``mqttrl rainbow-resets-x2``: the same with resets twice as often (every 14,000 updates: at about
  28k, 56k and 84k env steps), the ablation of the reset's timing (session 13);
- ``mqttrl rainbow-resets-by-data``: ``mqttrl rainbow-resets`` evaluated as the baselines are, once
  every 5,000 env steps of data (``train.eval_every_env_steps``; session 14);
- ``SB3 DQN`` and ``sb3-contrib QR-DQN`` with the MinAtar paper's network and DQN settings (scenario
  ``minatar_dqn``; QR-DQN with 51 quantiles, scenario ``minatar_baselines_100k``).

The MinAtar paper's DQN training returns at 100k env steps (Young & Tian 2019, its curves) are a
published floor: Breakout about 5, SpaceInvaders about 20, Freeway about 5.5. Cost on 2 cores,
measured 2026-11-28: mqttrl dqn ~110 s a run, rainbow and rainbow-resets ~600 s (50k updates: the
learner is the cost), SB3 DQN ~2 min, QR-DQN ~2.5 min (Freeway's 2,500-step greedy episodes add
minutes of evaluation to every side): about 25 minutes a seed of one game for all five sides, so
``--sides`` picks what fits an hour (the names are "<agent>, <game>")."""

from benchmarks.harness.scenario import NO_TARGET, Mqttrl, Scenario
from benchmarks.scenarios.minatar_dqn import MINATAR_DQN, sb3_dqn

GAMES = (("Breakout", "minatar/breakout"), ("SpaceInvaders", "minatar/space_invaders"), ("Freeway", "minatar/freeway"))
DQN, RAINBOW = "configs/minatar_breakout_dqn.toml", "configs/minatar_rainbow.toml"


def sides(game: str, env_id: str) -> tuple:
    """The agents on one game."""
    on = (f"env.id={env_id}", "train.eval_every_s=15")
    qr = MINATAR_DQN["policy_kwargs"] | {"n_quantiles": 51}
    return (
        Mqttrl(f"mqttrl dqn, {game}", DQN, on),
        Mqttrl(f"mqttrl rainbow, {game}", RAINBOW, (*on, "algorithm.reset_every=0")),
        Mqttrl(f"mqttrl rainbow-resets, {game}", RAINBOW, on),
        Mqttrl(f"mqttrl rainbow-resets-x2, {game}", RAINBOW, (*on, "algorithm.reset_every=14000")),
        Mqttrl(f"mqttrl rainbow-resets-by-data, {game}", RAINBOW, (*on, "train.eval_every_env_steps=5000")),
        sb3_dqn(f"SB3 DQN, {game}", env=env_id),
        sb3_dqn(f"sb3-contrib QR-DQN, {game}", "sb3_contrib", "QRDQN", env=env_id, policy_kwargs=qr),
    )


SCENARIO = Scenario(
    title="MinAtar Breakout, SpaceInvaders and Freeway at 100k env steps",
    page="benchmarks/rainbow.md",
    target=NO_TARGET,  # none: the agents are compared by their best and last greedy means
    measure="best",
    seconds=1200,
    env_steps=100_000,
    stop_at_target=False,
    sides=tuple(side for game, env_id in GAMES for side in sides(game, env_id)),
    eval_every_steps=5_000,
    headline=False,
)
