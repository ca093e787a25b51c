"""A game nobody here wrote (issue 47): freegames' Pacman (``pip install freegames``, unchanged; Tk,
420x420, 10 ticks a second), seen through its window and played with tapped arrow keys, every
side on the same screen env (``configs/freegames_pacman_dqn.toml``'s ``[env]``) on an Xvfb display:

- ``mqttrl``: that config, its worker launching the game (relaunched every episode: a caught
  Pacman freezes) and evaluating on it, the learner without a display;
- ``SB3 DQN`` and ``sb3-contrib QR-DQN``: Atari-style settings scaled to the budget (CnnPolicy,
  buffer 100k, 1,000 learning starts, target copy every 1,000 steps, epsilon to 0.01 over 10% of
  the budget's ~30k env steps, train_freq 4, lr 1e-4), in one process on
  :class:`~benchmarks.harness.launched_game.LaunchedScreenEnv`;
- ``random``: uniformly random keys, the floor.

60 minutes a seed and side, all evaluated every 5,000 env steps with 5 episodes (the game's clock
cannot be sped up here: an episode is 10-75 s). Needs Xvfb, the screen extra, freegames,
stable-baselines3 and sb3-contrib; a display is made for the mqttrl side (``DISPLAY`` is set)."""

import sys

import gymnasium as gym

from benchmarks.harness.scenario import NO_TARGET, Baseline, Mqttrl, RandomPolicy, Scenario

CONFIG = "configs/freegames_pacman_dqn.toml"

#: SB3's Atari DQN settings (rl-baselines3-zoo atari.yml) scaled to ~30k env steps an hour
ATARI_DQN = {
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "learning_rate": 1e-4,
    "batch_size": 32,
    "train_freq": 4,
    "gradient_steps": 1,
    "target_update_interval": 1_000,
    "exploration_final_eps": 0.01,
    "optimize_memory_usage": False,
}


def register(env_id: str, config: str, **kwargs) -> str:
    """``env_id``: the game of ``config``'s ``[env]`` (``kwargs`` over its ``[env.kwargs]``) as one
    gymnasium env, for the sides that are not mqttrl; the id as :func:`mqttrl.envs.make.make_env`
    finds it (this module imported first)."""
    if env_id not in gym.registry:
        gym.register(
            env_id,
            entry_point="benchmarks.harness.launched_game:LaunchedScreenEnv",
            kwargs={"config": config, "launch": [sys.executable, "-m", "freegames.pacman"], **kwargs},
        )
    return f"{__name__}:{env_id}"


def scenario(title: str, config: str, env_id: str, episodes: int = 5, max_episode_steps: int = 0) -> Scenario:
    """Every side on ``config``'s game (its speed, its keys, its reader), 60 minutes a seed and side,
    evaluated with ``episodes`` greedy episodes every 5,000 env steps; ``max_episode_steps`` (0: the
    config's) cuts every side's episodes there (a greedy Pacman stuck at a wall plays on until then)."""
    cut = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    env = register(env_id, config, **cut)
    sets = [f'env.launch=["{sys.executable}", "-m", "freegames.pacman"]', f"train.eval_episodes={episodes}"]
    sets += [f"env.kwargs.max_episode_steps={max_episode_steps}"] if max_episode_steps else []
    baseline = lambda name, library, algo: Baseline(  # noqa: E731
        name, library, algo, env, ATARI_DQN, policy="CnnPolicy", exploration_steps=3_000
    )
    return Scenario(
        title=title,
        page="benchmarks/real-game.md",
        target=NO_TARGET,
        measure="best",
        seconds=3600,
        stop_at_target=False,
        seeds=3,
        episodes=episodes,
        eval_every_steps=5_000,
        sides=(
            Mqttrl("mqttrl", config, tuple(sets), eval_env=env),
            baseline("SB3 DQN", "sb3", "DQN"),
            baseline("sb3-contrib QR-DQN", "sb3_contrib", "QRDQN"),
            RandomPolicy("random", env, episodes=20),
        ),
        headline=False,
    )


ENV = register("FreegamesPacman-v0", CONFIG)
SCENARIO = scenario("freegames Pacman through its window, 60 minutes", CONFIG, "FreegamesPacman-v0")
