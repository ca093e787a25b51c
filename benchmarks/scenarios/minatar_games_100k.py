"""Three MinAtar games at 100k env steps (issue 37): mqttrl DQN with the Breakout config as it is (only
``env.id`` changed: nothing tuned per game) against Stable-Baselines3 DQN with the MinAtar paper's
settings (scenario ``minatar_dqn``), evaluated every 5,000 env steps; best greedy mean.

The MinAtar paper's DQN training returns at 100k env steps (Young & Tian 2019, its curves) are a
published floor: Breakout about 5, SpaceInvaders about 20, Freeway about 5.5. Cost on 2 cores:
measure one seed of one side first (``--seeds 1 --sides "mqttrl DQN, Freeway"``)."""

from benchmarks.harness.scenario import Mqttrl, Scenario
from benchmarks.scenarios.minatar_dqn import sb3_dqn

GAMES = (("Breakout", "minatar/breakout"), ("SpaceInvaders", "minatar/space_invaders"), ("Freeway", "minatar/freeway"))

SCENARIO = Scenario(
    title="MinAtar Breakout, SpaceInvaders and Freeway at 100k env steps (DQN)",
    page="benchmarks/pixel-games.md",
    target=10.0,
    measure="best",
    seconds=3600,
    env_steps=100_000,
    stop_at_target=False,
    sides=tuple(
        side
        for game, env_id in GAMES
        for side in (
            Mqttrl(f"mqttrl DQN, {game}", "configs/minatar_breakout_dqn.toml", (f"env.id={env_id}",)),
            sb3_dqn(f"SB3 DQN, {game}", env=env_id),
        )
    ),
    eval_every_steps=5_000,
    headline=False,
)
