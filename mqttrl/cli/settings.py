"""``mqttrl settings [SECTION]``: every setting with its type, default, unit and doc.

Printed from the declarations (:mod:`mqttrl.config.reference`), the same source as the loader,
docs/configuration.md and the nodes' rules; ``algorithm.NAME`` lists an installed algorithm's
hyperparameters from its plugin's class.
"""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command

EPILOG = """examples:
  mqttrl settings                    every section
  mqttrl settings learner            one section
  mqttrl settings worker.batch_size  one setting
  mqttrl settings algorithm.ppo      an algorithm's hyperparameters (from its plugin)
  mqttrl settings worker --markdown  the table docs/configuration.md shows"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "section",
        nargs="?",
        metavar="SECTION",
        help="top, env, worker, learner, inference, train, algorithm, algorithm.NAME, or SECTION.KEY "
        "(default: every section)",
    )
    p.add_argument("--markdown", action="store_true", help="print markdown tables, as docs/configuration.md has them")


def _algorithm_params(name: str):
    from mqttrl.config.settings import describe
    from mqttrl.plugin.manager import UnknownPluginError, get_registry

    try:
        return describe(get_registry().algorithm(name).params)
    except UnknownPluginError as e:
        raise SystemExit(f"mqttrl settings: {e}") from None


def selected(section: str | None) -> dict[str, list]:
    """The settings to print, by section title; one line naming what exists for a wrong name."""
    from mqttrl.config import ConfigError, did_you_mean
    from mqttrl.config.reference import lookup, sections

    everything = sections()
    if section is None:
        return everything
    if section in everything:
        return {section: everything[section]}
    head, _, tail = section.partition(".")
    if head == "algorithm" and tail and tail != "name":
        return {f"algorithm.{tail}": _algorithm_params(tail)}
    if head in everything and tail:
        try:
            return {head: [lookup(section)]}
        except ConfigError as e:
            raise SystemExit(f"mqttrl settings: {e}") from None
    raise SystemExit(
        f"mqttrl settings: no section {section!r}{did_you_mean(section, everything)}; "
        f"sections: {', '.join(everything)}, algorithm.NAME"
    )


def run(args: argparse.Namespace) -> None:
    from mqttrl.config.reference import heading, markdown_table, settings_text

    chosen = selected(args.section)
    blocks = []
    for title, rows in chosen.items():
        blocks.append(f"{heading(title)}\n{markdown_table(rows)}" if args.markdown else settings_text(title, rows))
        if title == "algorithm":
            blocks[-1] += "\n  # and the algorithm's hyperparameters: mqttrl settings algorithm.NAME"
    print("\n\n".join(blocks))


COMMAND = Command(
    help="print every setting with its type, default, unit and doc",
    add_arguments=add_arguments,
    run=run,
    description="Every config setting (TOML file, --set SECTION.KEY=VALUE) with its type, default, unit and doc.",
    epilog=EPILOG,
    raw=True,
)
