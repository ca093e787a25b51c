"""``mqttrl broker init|add-run|add-workers|remove-run``: isolated runs on a shared mosquitto (dynamic security plugin)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mqttrl.cli.common import DEFAULT_BROKER, Command, DefaultsFormatter, broker_args, broker_given, settings

EPILOG = """examples:
  mqttrl broker init --dir /etc/mosquitto/mqttrl     # mosquitto.conf + dynamic-security.json + admin.json
  mosquitto -c /etc/mosquitto/mqttrl/mosquitto.conf
  mqttrl broker add-run cartpole --admin-credentials /etc/mosquitto/mqttrl/admin.json   # -> cartpole.credentials.json
  mqttrl train configs/cartpole_dqn.toml --credentials cartpole.credentials.json
  mqttrl broker add-run cartpole --workers 4 ...     # and w0..w3 each get an identity of their own
  mqttrl broker add-workers cartpole gamepc5 ... -o cartpole.credentials.json   # one more, merged into the file
  mqttrl broker remove-run cartpole --admin-credentials /etc/mosquitto/mqttrl/admin.json
(broker/README.md, "Run isolation")
"""


def _admin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin-credentials",
        metavar="FILE",
        help="the admin's credentials file written by `mqttrl broker init` (broker URL, user, password; its "
        "broker is used unless --broker is given); or give --broker, --username and --password",
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the plugin's answer")
    broker_args(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The four subcommands, one parser each (below), in the order ``--help`` lists them."""
    sub = p.add_subparsers(dest="broker_command", required=True, metavar="SUBCOMMAND")
    _init_parser(sub)
    _add_run_parser(sub)
    _add_workers_parser(sub)
    _remove_run_parser(sub)


def _init_parser(sub: argparse._SubParsersAction) -> None:
    """``init``: the files of a fresh broker (config, plugin JSON, admin); no broker needed yet."""
    i = sub.add_parser(
        "init",
        help="write a mosquitto config with the dynamic security plugin, its JSON file and an admin",
        description="Write DIR/mosquitto.conf (loads the plugin, no anonymous clients), DIR/dynamic-security.json "
        "(one admin client that may only use $CONTROL/dynamic-security/#; everything else denied) and "
        "DIR/admin.json (the admin's generated password, mode 0600). Start the broker with "
        "`mosquitto -c DIR/mosquitto.conf`.",
        formatter_class=DefaultsFormatter,
    )
    i.add_argument("--dir", default="mqttrl-broker", help="where to write the files")
    i.add_argument("--port", type=int, default=1883, help="the listener's port")
    i.add_argument("--bind", help="the listener's address (default: every interface)")
    i.add_argument("--plugin", help="path of mosquitto_dynamic_security.so (default: found in the usual places)")
    i.add_argument("--admin", default="admin", help="the admin's user name")
    i.add_argument("--force", action="store_true", help="replace an existing dynamic-security.json (drops every run)")
    i.add_argument(
        "--run-as",
        metavar="USER",
        help="account a mosquitto started as root switches to; it gets DIR, the plugin file and DIR/data "
        "(default when run as root: mosquitto, where that account exists)",
    )


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    """``add-run``: a run's roles and clients (and optionally per-worker identities) on a running broker."""
    a = sub.add_parser(
        "add-run",
        help="create a run's roles and one client per node kind, with generated passwords",
        description="Create the roles RUN-learner, RUN-worker, RUN-inference, RUN-telemetry and RUN-operator "
        "(each may publish and read exactly its node's topics under mqttrl/RUN/) and one client of the same "
        "name per role, with a random password. The passwords are printed once and written to the "
        "credentials file (mode 0600), which `mqttrl train --credentials` reads.",
        formatter_class=DefaultsFormatter,
    )
    a.add_argument("run", help="run name (the config's run)")
    a.add_argument("-o", "--output", help="credentials file to write (default: RUN.credentials.json)")
    a.add_argument("--force", action="store_true", help="overwrite an existing credentials file")
    a.add_argument("--quiet", action="store_true", help="do not print the passwords (only the file has them)")
    a.add_argument(
        "--workers",
        metavar="N|NAMES",
        help="also give these workers an identity of their own, RUN-worker@NAME, that may publish only under its "
        "own name: a count N (w0 .. wN-1, the names `mqttrl train` gives) or comma-separated names "
        "(default: none; all workers use the shared RUN-worker)",
    )
    _admin_args(a)


def _add_workers_parser(sub: argparse._SubParsersAction) -> None:
    """``add-workers``: more per-worker identities for a run already added, merged into its credentials."""
    w = sub.add_parser(
        "add-workers",
        help="give workers of an added run identities of their own (RUN-worker@NAME)",
        description="Create a role and a client RUN-worker@NAME per worker NAME of a run made by add-run: like "
        "RUN-worker, but it may publish samples, episodes, heartbeats and its state only under its own name "
        "and read only its own inference replies, so workers of the run cannot speak for each other. The "
        "passwords are merged into the credentials file (created if missing, mode 0600).",
        formatter_class=DefaultsFormatter,
    )
    w.add_argument("run", help="run name")
    w.add_argument("names", nargs="+", metavar="NAME", help="worker names (the workers' --name)")
    w.add_argument("-o", "--output", help="credentials file to merge into (default: RUN.credentials.json)")
    w.add_argument("--quiet", action="store_true", help="do not print the passwords (only the file has them)")
    _admin_args(w)


def _remove_run_parser(sub: argparse._SubParsersAction) -> None:
    """``remove-run``: the undo of add-run (clients disconnected, roles deleted)."""
    r = sub.add_parser(
        "remove-run",
        help="delete a run's clients (disconnecting them) and roles",
        description="Delete the clients and roles `add-run` made for RUN; connected nodes of the run are "
        "disconnected and cannot log in again. Retained messages of the run stay on the broker.",
        formatter_class=DefaultsFormatter,
    )
    r.add_argument("run", help="run name")
    _admin_args(r)


def _admin_settings(args: argparse.Namespace):
    from mqttrl.broker.dynsec import read_credentials

    # the admin file's broker unless --broker was given
    user, password, url = args.username, args.password, args.broker if broker_given(args) else None
    if args.admin_credentials:
        try:
            doc = read_credentials(args.admin_credentials)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        clients = doc["clients"]
        admin = clients.get("admin") or (next(iter(clients.values())) if len(clients) == 1 else None)
        if not admin:
            raise SystemExit(
                f"{args.admin_credentials}: no admin client in it (use the admin.json of mqttrl broker init)"
            )
        user, password = admin["username"], admin["password"]
        url = url or doc.get("broker")
    if not user:
        raise SystemExit(
            "no admin credentials: give --admin-credentials FILE (from mqttrl broker init) "
            "or --username/--password (env MQTTRL_PASSWORD) of the plugin's admin"
        )
    args.username, args.password = user, password
    return settings(args, url or DEFAULT_BROKER)


def run(args: argparse.Namespace) -> None:
    from mqttrl.broker import dynsec

    try:
        if args.broker_command == "init":
            _init(args)
        elif args.broker_command == "add-run":
            _add_run(args)
        elif args.broker_command == "add-workers":
            _add_workers(args)
        else:
            s = _admin_settings(args)
            missing, own = dynsec.remove_run(s, args.run, args.timeout, _progress())
            gone = [n for n in (dynsec.name(args.run, k) for k in dynsec.NODE_KINDS) if n not in missing]
            if not gone and not own:
                raise SystemExit(f"run {args.run!r} has no clients or roles on {s.shown}")
            shown = own if len(own) <= 10 else [*own[:5], f"... ({len(own)} worker identities in all)"]
            print(f"removed run {args.run} from {s.shown}: clients and roles {', '.join(gone + shown)}")
    except (dynsec.DynsecError, FileExistsError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"mqttrl broker {args.broker_command}: {e}") from None


def _init(args: argparse.Namespace) -> None:
    from mqttrl.broker.dynsec import init_files

    paths = init_files(Path(args.dir), args.port, args.bind, args.plugin, args.admin, args.force, args.run_as)
    conf = shlex.quote(str(paths["config"]))
    print(
        f"wrote {paths['config']}\n"
        f"wrote {paths['dynsec']} (mode 0600; mosquitto keeps it up to date)\n"
        f"wrote {paths['admin']} (mode 0600: admin {args.admin!r} and its password)\n"
        f"start the broker:  mosquitto -c {conf}\n"
        f"then add a run:    mqttrl broker add-run RUN --admin-credentials {shlex.quote(str(paths['admin']))}"
    )


def _add_run(args: argparse.Namespace) -> None:
    from mqttrl.broker import dynsec

    out = Path(args.output or f"{args.run}.credentials.json")
    if out.exists() and not args.force:
        raise FileExistsError(f"{out} exists; use -o FILE or --force")
    workers = dynsec.worker_names(args.workers) if args.workers else []
    s = _admin_settings(args)
    clients = dynsec.add_run(s, args.run, args.timeout, workers, _progress())
    try:
        dynsec.write_private(out, json.dumps(dynsec.credentials_doc(s.urls[0], clients, args.run), indent=2) + "\n")
    except OSError as e:  # the run exists now; say so rather than lose the passwords
        print(json.dumps(dynsec.credentials_doc(s.urls[0], clients, args.run), indent=2))
        raise SystemExit(
            f"run {args.run} added, but {out} could not be written ({e}); the passwords are above"
        ) from None
    print(f"added run {args.run} on {s.shown}; credentials in {out} (mode 0600)")
    _show(clients, args.quiet)
    print(
        f"train with: mqttrl train CONFIG --credentials {shlex.quote(str(out))}   (the config's run must be {args.run})"
    )


def _progress() -> Callable[[int, int], None]:
    """Long lists (hundreds of worker identities) take a while, the plugin saving its file after
    every command: a line on stderr every 2 s and at the end."""
    last = 0.0

    def show(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done == total or now - last >= 2.0:
            last = now
            print(f"  {done}/{total} plugin commands done", file=sys.stderr, flush=True)

    return show


def _show(clients: dict[str, tuple[str, str]], quiet: bool) -> None:
    for kind, (user, password) in clients.items():
        shown = "(in the file)" if quiet else f"MQTTRL_PASSWORD={shlex.quote(password)}"
        print(f"  {kind:<10} MQTTRL_USERNAME={shlex.quote(user)} {shown}")


def _add_workers(args: argparse.Namespace) -> None:
    from mqttrl.broker import dynsec

    out = Path(args.output or f"{args.run}.credentials.json")
    doc = dynsec.read_credentials(out) if out.exists() else None  # a file that is not one: refused before any change
    if doc is not None and doc.get("run") != args.run:
        raise ValueError(f"{out} is for run {doc.get('run')!r}, not {args.run!r}; give -o FILE")
    workers = dynsec.worker_names(",".join(args.names))
    s = _admin_settings(args)
    clients = dynsec.add_workers(s, args.run, workers, args.timeout, _progress())
    doc = doc or dynsec.credentials_doc(s.urls[0], {}, args.run)
    doc.setdefault("workers", {}).update(dynsec.credentials_doc(None, clients)["workers"])
    try:
        dynsec.write_private(out, json.dumps(doc, indent=2) + "\n")
    except OSError as e:
        print(json.dumps(doc, indent=2))
        raise SystemExit(f"workers added, but {out} could not be written ({e}); the passwords are above") from None
    print(f"added workers {', '.join(workers)} to run {args.run} on {s.shown}; credentials in {out} (mode 0600)")
    _show(clients, args.quiet)


COMMAND = Command(
    help="isolated runs on a shared mosquitto: dynamic security roles and clients per run",
    description="Set up mosquitto's dynamic security plugin (init) and give every run its own clients and "
    "roles (add-run, add-workers, remove-run): a run's worker can publish only into its run and read only its run's "
    "model. The plugin is changed over MQTT ($CONTROL/dynamic-security/v1) by its admin client.",
    epilog=EPILOG,
    raw=True,
    add_arguments=add_arguments,
    run=run,
)
