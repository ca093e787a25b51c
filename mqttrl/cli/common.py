"""What every command shares: the command record, help formatting, broker flags, logging, config loading."""

from __future__ import annotations

import argparse
import copy
import logging
import os
from collections.abc import Callable
from typing import Any

import attrs

from mqttrl.transport.client import BrokerSettings

DEFAULT_BROKER = "mqtt://127.0.0.1:1883"


@attrs.frozen
class Command:
    """One row of the command table: ``mqttrl NAME`` runs ``run(args)`` after ``add_arguments(parser)``."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]
    description: str | None = None
    epilog: str | None = None
    #: keep the line breaks of description and epilog (examples)
    raw: bool = False

    def parser_kwargs(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "epilog": self.epilog,
            "formatter_class": RawDefaultsFormatter if self.raw else DefaultsFormatter,
        }


# ---- help --------------------------------------------------------------------------
#: flags whose value must never be printed by --help (it may come from the environment)
SECRET_DESTS = frozenset({"password"})


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends " (default: X)" to every option that has a default and does not already name one.

    Unlike argparse.ArgumentDefaultsHelpFormatter it leaves out defaults that say nothing
    (None, False, empty lists) and secrets.
    """

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        default = action.default
        return not (
            action.help is argparse.SUPPRESS
            or default is argparse.SUPPRESS
            or default is None
            or default is False
            or default == []
            or action.dest in SECRET_DESTS
            or "default" in (action.help or "")
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))
        )

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows_default(action):  # argparse prints no help line for these otherwise
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.help and self._shows_default(action):
            return f"{action.help} (default: %(default)s)"
        return action.help


class RawDefaultsFormatter(argparse.RawDescriptionHelpFormatter, DefaultsFormatter):
    """:class:`DefaultsFormatter` that keeps the line breaks of the description and epilog."""


# ---- broker connection ----------------------------------------------------------------
def broker_url(value: str) -> str:
    """argparse type of --broker: a URL this client can connect to, or an ordered comma-separated
    list of them to fail over between; one line saying what is wrong otherwise."""
    try:
        BrokerSettings(url=value).urls  # noqa: B018  (each URL: scheme, host and port)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{e}; use mqtt://host:1883 or mqtts://host:8883, several separated by commas to fail over"
        ) from None
    return value


def broker_args(p: argparse.ArgumentParser, required: bool, local_default: bool = False) -> None:
    """The connection flags. ``local_default``: without --broker the command connects to
    DEFAULT_BROKER (and --help says so); otherwise --broker is required or the command has its
    own fallback (``mqttrl train`` starts an embedded broker)."""
    g = p.add_argument_group("broker connection")
    g.add_argument(
        "--broker",
        required=required,
        type=broker_url,
        default=DEFAULT_BROKER if local_default else None,
        metavar="URL[,URL...]",
        help="broker URL, mqtt://host:1883 or mqtts://host:8883 (user:pass@ allowed); a comma-separated list "
        "(mqtt://a:1883,mqtt://b:1883) fails over to the next broker when one is gone",
    )
    g.add_argument("--username", default=os.environ.get("MQTTRL_USERNAME"), help="broker user (env MQTTRL_USERNAME)")
    g.add_argument(
        "--password", default=os.environ.get("MQTTRL_PASSWORD"), help="broker password (env MQTTRL_PASSWORD)"
    )
    g.add_argument("--tls-ca", help="CA certificate file; enables TLS")
    g.add_argument("--tls-cert", help="client certificate file (TLS client auth)")
    g.add_argument("--tls-key", help="client key file (TLS client auth)")
    g.add_argument(
        "--tls-insecure", action="store_true", help="do not verify the broker's host name (test setups only)"
    )
    g.add_argument(
        "--mqtt-protocol",
        default="auto",
        choices=["auto", "5", "3.1.1"],
        help="MQTT version; auto tries 5 then falls back to 3.1.1",
    )


def settings(args: argparse.Namespace, url: str | None = None) -> BrokerSettings:
    return BrokerSettings(
        url=url or args.broker,
        username=args.username,
        password=args.password,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_insecure=args.tls_insecure,
        protocol=args.mqtt_protocol,
    )


def settings_or_local(args: argparse.Namespace) -> BrokerSettings:
    """Broker settings for commands whose --broker is optional: a local broker by default."""
    return settings(args, args.broker or DEFAULT_BROKER)


def forward_broker_args(args: argparse.Namespace) -> list[str]:
    """The broker flags again, for a child process (the password travels in MQTTRL_PASSWORD)."""
    out = []
    for flag in ("username", "tls_ca", "tls_cert", "tls_key"):
        v = getattr(args, flag)
        if v:
            out += [f"--{flag.replace('_', '-')}", v]
    if args.tls_insecure:
        out.append("--tls-insecure")
    out += ["--mqtt-protocol", args.mqtt_protocol]
    return out


# ---- logging and config -----------------------------------------------------------------
def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def verbose_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true")


def overrides_arg(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE", help=help)


def load(config: str | None, overrides: list[str]):
    """Load a run config through the plugins' parameter classes; exit with one line on a bad key or value."""
    from mqttrl.config import ConfigError, load_config
    from mqttrl.plugin.manager import UnknownPluginError, get_registry

    registry = get_registry()
    try:
        return load_config(config, overrides, lambda n: registry.algorithm(n).params)
    except (ConfigError, UnknownPluginError) as e:
        raise SystemExit(f"config error: {e}") from None
