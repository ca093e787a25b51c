"""``mqttrl plugins``: installed plugins and what they register, with each one's description, as JSON."""

from __future__ import annotations

import argparse
import json

from mqttrl.cli.common import Command

#: the report's lists of registered names -> the registry's table of them
KINDS = ("algorithms", "envs", "storages")


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def with_descriptions(report: list[dict], registry) -> list[dict]:
    """Each plugin's record plus ``descriptions``: the one line it registered with each name
    (what the hooks' ``description`` is for). A name another plugin overrode keeps none here."""
    out = []
    for record in report:
        described = {}
        for kind in KINDS:
            table = getattr(registry, kind)
            for name in record.get(kind, []):
                if name in table and table[name].plugin == record["name"]:
                    described[name] = table[name].description
        out.append({**record, "descriptions": described} if described else dict(record))
    return out


def run(args: argparse.Namespace) -> None:
    from mqttrl.plugin.manager import get_registry, plugins_report

    print(json.dumps(with_descriptions(plugins_report(), get_registry()), indent=2))


COMMAND = Command(
    help="print installed plugins, what they register and its description (JSON)",
    add_arguments=add_arguments,
    run=run,
)
