"""Run configs (TOML) for the end-to-end tests."""

from __future__ import annotations

from pathlib import Path


def cartpole_dqn_toml(run: str, **sections: dict) -> str:
    """A small CartPole DQN run config for end-to-end tests: two envs, learning from 200 steps, a
    learner that keeps up on a busy 2-core machine and publishes its metrics twice a second.
    ``sections`` override or add keys per section, e.g. ``learner={"worker_timeout_s": 15.0}``; a
    value of None leaves the key out (the default applies)."""
    config: dict[str, dict] = {
        "env": {"id": "CartPole-v1", "num_envs": 2},
        "algorithm": {"name": "dqn", "learning_starts": 200, "replay_ratio": 1.0},
        "worker": {"batch_size": 32},
        "learner": {"publish_every": 10, "checkpoint_every": 1000, "metrics_interval_s": 0.5},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    lines = [f"run = {run!r}"]
    for name, values in config.items():
        lines.append(f"[{name}]")
        lines += [
            f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in values.items() if v is not None
        ]
    return "\n".join(lines) + "\n"


#: the end-to-end DQN run (four CartPole envs per worker, two workers under ``mqttrl train``)
E2E_DQN_CONFIG = """
run = "{run}"
[env]
id = "CartPole-v1"
num_envs = 4
[algorithm]
name = "dqn"
learning_starts = 500
[learner]
publish_every = 20
checkpoint_every = 200
metrics_interval_s = 0.5
worker_timeout_s = 4.0
max_payload_mb = {max_mb}
[train]
workers = 2
"""


def resumable_dqn_toml(run: str, **sections: dict) -> str:
    """CartPole DQN that learns from 300 steps, publishes every 20 updates and checkpoints every 100:
    the fault tests' run (a learner killed and resumed), with ``sections`` added."""
    return cartpole_dqn_toml(
        run,
        algorithm={"learning_starts": 300, "replay_ratio": None},
        worker={"batch_size": 64},
        learner={"publish_every": 20, "checkpoint_every": 100, "worker_timeout_s": 4.0},
        **sections,
    )


def write_config(tmp_path: Path, run: str, max_mb: float = 64.0) -> Path:
    """Write :data:`E2E_DQN_CONFIG` for ``run`` as ``tmp_path/RUN.toml``; returns its path."""
    p = tmp_path / f"{run}.toml"
    p.write_text(E2E_DQN_CONFIG.format(run=run, max_mb=max_mb))
    return p
