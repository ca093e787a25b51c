"""``mqttrl learner`` / ``mqttrl-learner``: the learner of a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from mqttrl.cli.common import Command, broker_args, load, overrides_arg, settings_or_local, setup_logging, verbose_arg
from mqttrl.cli.errors import EXIT_INTERRUPTED
from mqttrl.state import run_dir as run_dir_rules


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="run config (TOML, or the config.json of a run directory)")
    overrides_arg(p, "override a config value, e.g. --set learner.publish_every=100 (repeatable)")
    p.add_argument("--run-dir", help="where checkpoints and logs go (default runs/<run>)")
    again = p.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --run-dir (refused when it holds none: a mistyped path "
        "would start a fresh run)",
    )
    again.add_argument(
        "--resume-if-any",
        action="store_true",
        help="continue from the newest checkpoint in --run-dir if it holds one, else start there (what a "
        "supervisor restarting a learner passes)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a --run-dir that holds checkpoints (they are moved to checkpoints.replaced-TIME)",
    )
    p.add_argument(
        "--init-from",
        metavar="RUN_OR_FILE",
        help="start training from an earlier model of the same algorithm and network: a run directory "
        "(its best model), a best/ or checkpoint folder, or a weights.safetensors file",
    )
    p.add_argument("--max-seconds", type=float, help="stop after this long (checkpoints first)")
    verbose_arg(p)
    broker_args(p, required=False, local_default=True)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.nodes.learner.node import run_learner

    if args.init_from and args.resume:
        raise run_dir_rules.RunDirInUse("--init-from starts a new run and --resume continues one: choose one")
    cfg = load(args.config, args.overrides)
    run_dir = Path(args.run_dir or f"runs/{cfg.run}")
    run_dir_rules.check_writable(run_dir)  # a read-only folder: one line now, not at the first checkpoint
    resume = args.resume or (args.resume_if_any and run_dir_rules.resumable(run_dir))
    if args.init_from and args.resume_if_any:
        raise run_dir_rules.RunDirInUse("--init-from starts a new run and --resume-if-any continues one: choose one")
    aside = run_dir_rules.claim(run_dir, resume=resume, overwrite=args.overwrite)
    if aside is not None:
        print(f"mqttrl-learner: the old checkpoints are kept in {aside}")
    init_from = Path(args.init_from) if args.init_from else None
    signals = run_learner(
        cfg, settings_or_local(args), run_dir, resume=resume, max_seconds=args.max_seconds, init_from=init_from
    )
    if signals.interrupted:  # Ctrl-C (checkpointed first): not the end a script should take for done
        raise SystemExit(EXIT_INTERRUPTED)


COMMAND = Command(
    help="run a learner (same as mqttrl-learner)",
    description="Run the learner of a run: trains on samples from workers and publishes weights (retained).",
    add_arguments=add_arguments,
    run=run,
)
