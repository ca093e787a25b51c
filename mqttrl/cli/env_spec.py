"""``mqttrl env-spec CONFIG``: the run's env spec, made here (on a game PC), as TOML for the config.

A learner whose config declares ``[env.spec]`` starts before any worker and never makes the env
(docs/deployment.md); without it, it makes the env if it can, else waits for the first worker's.
"""

from __future__ import annotations

import argparse
import json

from mqttrl.cli.common import Command, load, overrides_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="run config (TOML, or a run's config.json)")
    overrides_arg(p, "override a config value (repeatable)")
    p.add_argument("--json", action="store_true", help="print the spec as JSON (env.spec's value) instead of TOML")


def as_toml(spec: dict) -> str:
    """``[env.spec]`` with one line per key (the spaces as inline tables)."""
    from mqttrl.config.settings import toml_value

    lines = ["[env.spec]"] + [f"{key} = {toml_value(value)}" for key, value in spec.items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> None:
    from mqttrl.envs.fit import run_spaces
    from mqttrl.envs.spec import EnvSpec, made_by
    from mqttrl.plugin.manager import get_registry

    cfg = load(args.config, args.overrides)
    spec = EnvSpec(*run_spaces(cfg.env, get_registry()), cfg.env.id, made_by("env-spec")).to_json()
    if args.json:
        print(json.dumps(spec))
        return
    print(f"# the env spec of {args.config} (env {cfg.env.id!r}), made on this machine: add it to the config")
    print(as_toml(spec))


COMMAND = Command(
    help="print the run's env spec (its spaces), made here, as [env.spec] for the config",
    description="Make the run's env here (on a game PC: the game must be running) and print its spec, the\n"
    "observation and action spaces every node reads instead of making the env. With [env.spec] in its\n"
    "config a learner starts before any worker, on a host without the game (docs/deployment.md).",
    epilog="example:\n  mqttrl env-spec configs/screen_catch_dqn.toml >> configs/screen_catch_dqn.toml",
    add_arguments=add_arguments,
    run=run,
    raw=True,
)
