"""DQN on MinAtar Breakout against Stable-Baselines3 DQN, 15 minutes a run: greedy mean and the first
time it reached 10 (docs/benchmarks/pixel-games.md; needs ``pip install -e '.[minatar,bench]'``).

SB3 DQN has the MinAtar paper's network (Young & Tian 2019: conv 3x3 of 16, dense 128) and DQN
settings, with Adam as in the mqttrl config and the config's replay ratio 8 (train_freq 4, one
gradient step of batch 32). Its clock stops while it is evaluated, every 30 s of training."""

from benchmarks.harness.scenario import Baseline, Mqttrl, Scenario

#: Stable-Baselines3 DQN on MinAtar (the module docstring); also sb3-contrib QR-DQN's settings
MINATAR_DQN = dict(
    buffer_size=100_000,
    learning_starts=5_000,
    batch_size=32,
    learning_rate=2.5e-4,
    train_freq=4,
    gradient_steps=1,
    target_update_interval=1_000,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.1,
    gamma=0.99,
    max_grad_norm=10.0,
    policy_kwargs=dict(
        features_extractor_kwargs=dict(features_dim=128, channels=16),
        optimizer_kwargs=dict(eps=3.125e-4),  # the mqttrl config's (Dopamine's MinAtar eps)
    ),
)


def sb3_dqn(
    name: str = "SB3 DQN", library: str = "sb3", algo: str = "DQN", env: str = "minatar/breakout", **extra
) -> Baseline:
    """SB3 DQN, or with ``library``/``algo`` another of that family, on MinAtar's torso and settings."""
    return Baseline(
        name,
        library,
        algo,
        env,
        MINATAR_DQN | extra,
        policy="CnnPolicy",
        torso="minatar",
        exploration_steps=100_000,
    )


SCENARIO = Scenario(
    title="MinAtar Breakout (DQN)",
    page="benchmarks/pixel-games.md",
    target=10.0,
    measure="seconds_to_target",
    seconds=900,
    stop_at_target=False,
    sides=(Mqttrl("mqttrl DQN", "configs/minatar_breakout_dqn.toml"), sb3_dqn()),
    eval_every_steps=None,
    eval_every_s=30.0,
)
