"""``mqttrl plugins``: installed plugins and what they register, as JSON."""

from __future__ import annotations

import argparse
import json

from mqttrl.cli.common import Command


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> None:
    from mqttrl.plugin.manager import plugins_report

    print(json.dumps(plugins_report(), indent=2))


COMMAND = Command(help="print installed plugins and what they register (JSON)", add_arguments=add_arguments, run=run)
