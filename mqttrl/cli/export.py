"""``mqttrl export PATH --format onnx|torchscript -o FILE``: a trained policy's network as a file
other programs run (:mod:`mqttrl.export`), checked against the numpy policy.

Exit status (docs/cli.md's table): 0 when written (and, where it can be run here, equal to the numpy
policy), 2 for a PATH that holds no policy or an unknown format, 5 when a package is missing, 1 when
the export or its check fails; always one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from mqttrl.cli.common import Command, model_args
from mqttrl.cli.errors import EXIT_MISSING
from mqttrl.policy.source import describe_choice

#: largest absolute difference between the exported model's outputs and the numpy policy's that passes
TOLERANCE = 1e-4


def add_arguments(p: argparse.ArgumentParser) -> None:
    model_args(p)
    p.add_argument("--format", default="onnx", metavar="FORMAT", help="onnx or torchscript")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    p.add_argument("--opset", type=int, help="ONNX opset version (default: 18)")
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="do not compare the written model with the numpy policy on 16 random observations "
        "(default: compare, where onnxruntime or torch can run it here)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print the traceback of an unexpected failure")


def _fail(message: str, code: int) -> None:
    print(f"mqttrl export: {message}", file=sys.stderr)
    raise SystemExit(code)


def run(args: argparse.Namespace) -> None:
    from mqttrl.export import FORMATS, MissingDependency, check_export, export_policy
    from mqttrl.policy import load_policy

    if args.format not in FORMATS:
        _fail(f"--format {args.format!r}: use one of {', '.join(FORMATS)}", 2)
    try:
        policy = load_policy(args.path, which=args.which)
    except (OSError, ValueError) as e:
        _fail(str(e), 2)
    print(f"exporting {describe_choice(policy.source)}", flush=True)
    try:
        path = export_policy(policy, args.output, args.format, opset=args.opset)
        diff = check_export(policy, path, args.format, n=16) if args.check else None
    except MissingDependency as e:
        _fail(str(e), EXIT_MISSING)
    except Exception as e:
        if args.verbose:
            raise
        _fail(f"exporting {policy.source} as {args.format} failed: {type(e).__name__}: {e} (-v shows where)", 1)
    outputs = ", ".join(policy.outputs(policy.observation_space.sample()))
    print(
        f"wrote {path} ({args.format}): {policy.algorithm} model version {policy.model_version}, input obs "
        f"{tuple(policy.observation_space.shape)} {policy.observation_space.dtype}, outputs {outputs}"
    )
    if not args.check:
        return
    if diff is None:
        print("not checked against the numpy policy: onnxruntime is not installed (pip install 'mqttrl[export]')")
    elif diff > TOLERANCE:
        _fail(f"{path} differs from the numpy policy by up to {diff:.3g} (more than {TOLERANCE:g}): do not use it", 1)
    else:
        print(f"checked: equal to the numpy policy within {diff:.2g} on 16 observations")


COMMAND = Command(
    help="write a trained policy's network as ONNX or TorchScript (needs torch; see docs/export.md)",
    description="Write the network of a trained policy as an ONNX or TorchScript file and check it against\n"
    "the numpy policy. Input obs: a batch of observations in their own dtype; outputs as the\n"
    "algorithm's forward names them: dqn q; ppo logits, value (or mean, log_std, value).\n"
    "Needs torch; ONNX also onnx and onnxscript, the check onnxruntime: pip install 'mqttrl[export]'.\n"
    "See docs/export.md. Exit 2 if PATH holds no policy or FORMAT is unknown, 5 if a package is\n"
    "missing, 1 if the export or its check fails.",
    epilog="examples:\n"
    "  mqttrl export runs/cartpole-dqn -o cartpole.onnx\n"
    "  mqttrl export runs/cartpole-dqn/checkpoints --format torchscript -o cartpole.pt",
    add_arguments=add_arguments,
    run=run,
    raw=True,
)
