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


#: the one --broker rule: every command connects to DEFAULT_BROKER unless --broker is given, except
#: ``mqttrl train``, which then starts an embedded broker for the run (``embedded=True``)
EMBEDDED_HELP = "default: an embedded broker started for this run"


def broker_args(
    p: argparse.ArgumentParser, required: bool = False, local_default: bool = True, *, embedded: bool = False
) -> None:
    """The connection flags. One rule for every command: without --broker it connects to
    DEFAULT_BROKER (--help says so), except a command with ``embedded`` (``mqttrl train``), which
    starts a broker of its own. ``required`` and ``local_default`` stay for old call sites and may
    only say what the rule says (tests/test_cli_broker_rule.py walks every parser)."""
    if required or not local_default:
        raise ValueError("--broker follows one rule: it defaults to the local broker (DEFAULT_BROKER)")
    g = p.add_argument_group("broker connection")
    fallback = EMBEDDED_HELP if embedded else f"default: {DEFAULT_BROKER}"
    g.add_argument(
        "--broker",
        type=broker_url,
        default=None if embedded else DEFAULT_BROKER,
        metavar="URL[,URL...]",
        help="broker URL, mqtt://host:1883 or mqtts://host:8883 (user:pass@ allowed); a comma-separated list "
        f"(mqtt://a:1883,mqtt://b:1883) fails over to the next broker when one is gone ({fallback})",
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
    """Broker settings of a command: --broker, the local broker by default."""
    return settings(args, args.broker or DEFAULT_BROKER)


def broker_given(args: argparse.Namespace) -> bool:
    """Whether --broker was given (argparse keeps the very DEFAULT_BROKER object when it was not)."""
    return args.broker is not None and args.broker is not DEFAULT_BROKER


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
    p.add_argument("-v", "--verbose", action="store_true", help="debug log lines too")


#: argparse ``type`` of a flag that mirrors a setting of this declared type
_FLAG_TYPES = {int: int, float: float, str: str}


def setting_arg(p: argparse.ArgumentParser, key: str, *flags: str, **kwargs: Any) -> argparse.Action:
    """A flag that mirrors the setting ``key`` (``"train.workers"``): its help (unless given),
    type, choices and the default it names come from the setting's declaration, so --help says what the
    config would use. The flag's own default is None: without it, the run's config stands."""
    from mqttrl.config.reference import lookup, plain
    from mqttrl.config.settings import toml_value

    d = lookup(key)
    kwargs.setdefault("type", _FLAG_TYPES.get(d.type))
    if d.choices is not None:
        kwargs.setdefault("choices", list(d.choices))
    unit = f" {d.unit}" if d.unit else ""
    help_ = kwargs.pop("help", None) or plain(d.doc)
    return p.add_argument(
        *flags, default=None, help=f"{help_} (default: {key} = {toml_value(d.default)}{unit})", **kwargs
    )


def overrides_arg(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE", help=help)


def load(config: str | None, overrides: list[str]):
    """Load a run config through the plugins' parameter classes. A bad key or value raises
    ConfigError and an unknown algorithm UnknownPluginError: the command ends in one line with
    exit code 2 or 5 (mqttrl/cli/errors.py)."""
    from mqttrl.config import ConfigError, load_config
    from mqttrl.plugin.manager import get_registry

    registry = get_registry()
    try:
        cfg = load_config(config, overrides, lambda n: registry.algorithm(n).params)
    except ConfigError:
        _refuse_misfit(config, overrides, registry)  # the deeper mistake first: dqn on Box actions
        raise
    for name in cfg.train.telemetry_storages:  # a typo here used to start a run whose telemetry restarts for ever
        registry.storage(name)
    return cfg


def _refuse_misfit(config: str | None, overrides: list[str], registry) -> None:
    """A config whose algorithm settings do not load (``--set algorithm.name=dqn`` on a SAC config):
    when the algorithm cannot run on the env at all, say that (EnvMismatch) rather than name a key."""
    from mqttrl.config import load_config
    from mqttrl.envs.fit import check_fit, run_spaces

    try:
        bare = load_config(config, overrides, None)  # the algorithm's settings left unchecked
        info = registry.algorithm(bare.algorithm.name)
        if not info.action_spaces:
            return  # only a declared fit is worth making the env for on this path
        spaces = run_spaces(bare.env, registry)
    except Exception:  # nothing more to say than the original error
        return
    check_fit(bare.algorithm.name, None, bare.env.id, spaces, registry)


def model_args(p: argparse.ArgumentParser) -> None:
    """PATH and --which: the model a command reads (`mqttrl enjoy`, `mqttrl export`)."""
    from mqttrl.policy.source import WHICH

    p.add_argument(
        "path",
        metavar="PATH",
        help="a run directory or its checkpoints/ folder (the model --which chooses), checkpoints/latest, "
        "a checkpoint directory or a weights.safetensors file",
    )
    p.add_argument(
        "--which",
        choices=WHICH,
        default="auto",
        help="a run directory's model: best, latest (its newest checkpoint) or auto: the best model when a "
        "greedy evaluation judged it, else the newest checkpoint (training returns are noisy)",
    )
