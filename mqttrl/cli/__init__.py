"""Command line: ``mqttrl COMMAND`` and the node scripts ``mqttrl-learner``, ``mqttrl-worker``, ``mqttrl-telemetry``.

Every command is one row of :data:`COMMANDS` (name -> help, add_arguments, run),
each in its own module; ``main`` builds the parser from the table and runs the
chosen row. The node scripts are the same rows with their own program name.
"""

from __future__ import annotations

import argparse
import importlib.metadata

from mqttrl.cli import (
    broker,
    check_plugin,
    compare,
    enjoy,
    env_spec,
    evaluate,
    export,
    inference,
    learner,
    play,
    plugins,
    quicksave,
    record,
    screen,
    settings,
    status,
    telemetry,
    train,
    worker,
    workers,
)
from mqttrl.cli.common import Command, DefaultsFormatter
from mqttrl.cli.errors import guarded

#: ``mqttrl NAME``, in the order ``mqttrl --help`` lists them
COMMANDS: dict[str, Command] = {
    "train": train.COMMAND,
    "learner": learner.COMMAND,
    "worker": worker.COMMAND,
    "telemetry": telemetry.COMMAND,
    "plugins": plugins.COMMAND,
    "settings": settings.COMMAND,
    "quicksave": quicksave.COMMAND,
    "inference": inference.COMMAND,
    "evaluate": evaluate.COMMAND,
    "workers": workers.COMMAND,
    "status": status.COMMAND,
    "check-plugin": check_plugin.COMMAND,
    "enjoy": enjoy.COMMAND,
    "play": play.COMMAND,
    "compare": compare.COMMAND,
    "env-spec": env_spec.COMMAND,
    "record": record.COMMAND,
    "export": export.COMMAND,
    "broker": broker.COMMAND,
    "screen": screen.COMMAND,
}


def package_version() -> str:
    """The installed distribution's version (importlib.metadata), else the source tree's ``mqttrl.__version__``."""
    try:
        return importlib.metadata.version("mqttrl")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        from mqttrl import __version__

        return __version__


def version_arg(p: argparse.ArgumentParser) -> None:
    """``--version``: prints ``PROG VERSION`` and exits 0."""
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqttrl", description="Distributed reinforcement learning over MQTT.", formatter_class=DefaultsFormatter
    )
    version_arg(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, **cmd.parser_kwargs())
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    guarded(args._run)(args)


def script_parser(prog: str, command: str) -> argparse.ArgumentParser:
    """The parser of a node script: the command's own flags under its own program name."""
    cmd = COMMANDS[command]
    p = argparse.ArgumentParser(prog=prog, **cmd.parser_kwargs())
    version_arg(p)
    cmd.add_arguments(p)
    return p


def _script(prog: str, command: str, argv: list[str] | None) -> None:
    guarded(COMMANDS[command].run)(script_parser(prog, command).parse_args(argv))


def learner_main(argv: list[str] | None = None) -> None:
    _script("mqttrl-learner", "learner", argv)


def worker_main(argv: list[str] | None = None) -> None:
    _script("mqttrl-worker", "worker", argv)


def telemetry_main(argv: list[str] | None = None) -> None:
    _script("mqttrl-telemetry", "telemetry", argv)


__all__ = ["COMMANDS", "Command", "build_parser", "learner_main", "main", "telemetry_main", "worker_main"]
