"""``mqttrl compare RUN...``: runs side by side at equal env steps, seeds grouped, gaps with their spread.

Reads each run directory's ``evaluations.csv`` (the greedy evaluations, by the env steps the
evaluated model was trained on) and ``summary.json``; no broker, no torch. Runs with the same label
are seeds of one group: the run's name (``run`` in its config) unless given as ``LABEL=DIR``.
Exit status: 0 after the table, 2 for a RUN that is not a run directory with evaluations (one line).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import statistics
import sys
from pathlib import Path

import attrs

from mqttrl.api import read_curve
from mqttrl.cli.common import Command
from mqttrl.observe.curves import Point, at_budget, default_marks, first_reaching, median_gap

#: a summary's target_return at or beyond this is "no target" (benchmarks set 1e9 to use the whole budget)
NO_TARGET = 1e8


class CompareError(Exception):
    """A RUN argument that cannot be compared: the message is the one line the user sees."""


class NoEvaluations(CompareError):
    """A run directory with no evaluation yet: a launch that failed, or a run stopped at once."""


@attrs.frozen
class Run:
    label: str
    path: Path
    curve: list[Point]
    #: env steps the run made (its summary's, else its last evaluation's)
    budget: int
    target: float | None


def expand(arg: str) -> list[tuple[str, str]]:
    """A RUN argument as (label, directory) pairs: ``DIR`` or ``LABEL=DIR``, where DIR may be a glob
    pattern (a shell leaves ``LABEL=runs/a-s*`` alone: it matches no file name as a whole)."""
    label, sep, where = arg.partition("=")
    if not sep:
        label, where = "", arg
    elif not label or not where:
        raise CompareError(f"{arg!r}: expected DIR or LABEL=DIR")
    if glob.has_magic(where):
        found = sorted(glob.glob(where))
        if not found:
            raise CompareError(f"{where}: matches no run directory")
        return [(label, f) for f in found]
    return [(label, where)]


def read_runs(args: list[str]) -> list[Run]:
    """Every run the RUN arguments name. A directory that holds no evaluation (a launch that failed,
    a run stopped at once: ``runs/NAME-*`` from the shell matches those too) is skipped with a line on
    stderr; none left is an error (one line)."""
    runs, skipped = [], []
    for label, where in (pair for arg in args for pair in expand(arg)):
        try:
            runs.append(read_run(label, where))
        except NoEvaluations as exc:
            skipped.append((where, exc))
    if not runs:
        if len(skipped) == 1:
            raise skipped[0][1]
        raise CompareError(f"none of the {len(skipped)} run directories holds an evaluation")
    for where, _ in skipped:
        print(
            f"mqttrl compare: skipped {where}: no evaluations (a failed launch or a run stopped at once)",
            file=sys.stderr,
        )
    return runs


def read_run(label: str, where: str) -> Run:
    """A run directory's curve and summary, grouped under ``label`` (default: the run's name)."""
    path = Path(where)
    if not path.is_dir():
        raise CompareError(f"{where}: no such run directory")
    try:
        curve = [p for p in read_curve(path / "evaluations.csv") if math.isfinite(p[2])]
    except (ValueError, KeyError, TypeError, csv.Error) as exc:  # a damaged file: name it, do not crash
        raise CompareError(f"{where}: evaluations.csv is unreadable ({type(exc).__name__}: {exc})") from None
    if not curve:
        raise NoEvaluations(
            f"{where}: no evaluations (evaluations.csv is missing or empty): not an `mqttrl train` run directory, "
            "or its evaluator never reported"
        )
    summary = _json(path / "summary.json")
    if not label:
        label = str(summary.get("run") or _json(path / "config.json").get("run") or path.name)
    budget = max(int(summary.get("env_steps") or 0), max(s for s, _, _ in curve))
    target = summary.get("target_return")
    target = float(target) if isinstance(target, int | float) and abs(target) < NO_TARGET else None
    return Run(label, path, curve, budget, target)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def values_at(runs: list[Run], mark: int, window: int, interpolate: bool = False) -> list[float]:
    """Each run's greedy mean at ``mark`` env steps (a run without an evaluation by then left out; a run
    that stopped before the mark, solved or at a smaller budget, counts with what it had: its last)."""
    return [v for r in runs if (v := at_budget(r.curve, mark, window, interpolate)) is not None]


def comparison(
    runs: list[Run],
    marks: list[int],
    window: int,
    target: float | None,
    baseline: str,
    level: float,
    interpolate: bool = False,
):
    """The figures the table and ``--json`` show: per group and mark the median over seeds, and each
    group's median gap to ``baseline`` with its bootstrap interval."""
    groups = {label: [r for r in runs if r.label == label] for label in dict.fromkeys(r.label for r in runs)}
    out: dict = {"marks": marks, "window": window, "interpolate": interpolate, "target": target}
    out |= {"baseline": baseline, "level": level}
    out["groups"] = []
    for label, members in groups.items():
        at = {m: values_at(members, m, window, interpolate) for m in marks}
        reached = [first_reaching(r.curve, target) for r in members] if target is not None else []
        hits = [s for s in reached if s is not None]
        out["groups"].append(
            {
                "label": label,
                "runs": [str(r.path) for r in members],
                "at": {str(m): {"median": statistics.median(v) if v else None, "values": v} for m, v in at.items()},
                "reached": len(hits),
                # the median over every run, a run that never reached it counting as beyond its budget
                "reaches_target_at": _median_reach(reached),
                "env_steps": statistics.median(r.budget for r in members),
            }
        )
    base = next(g for g in out["groups"] if g["label"] == baseline)
    out["gaps"] = []
    for g in out["groups"]:
        if g is base:
            continue
        cells = {}
        for m in marks:
            a, b = g["at"][str(m)]["values"], base["at"][str(m)]["values"]
            if a and b:  # one run on a side: a gap without an interval
                gap = median_gap(a, b, level=level)
                cells[str(m)] = {**attrs.asdict(gap), "verdict": gap.verdict}
            else:
                cells[str(m)] = None
        out["gaps"].append({"label": g["label"], "against": baseline, "at": cells})
    return out


def _median_reach(reached: list[int | None]) -> float | None:
    if not reached or sum(s is not None for s in reached) * 2 <= len(reached):
        return None  # half or more never reached it: no median
    return statistics.median(s if s is not None else math.inf for s in reached)


def print_table(c: dict) -> None:
    marks = c["marks"]
    width = max(12, *(len(g["label"]) for g in c["groups"]))
    head = f"{'group':<{width}} {'runs':>4} " + " ".join(f"{'@' + format(m, ','):>10}" for m in marks)
    if c["target"] is not None:
        head += f" {'>= ' + format(c['target'], 'g') + ' at':>16}"
    window = f", window {c['window']:,}" if c["window"] else ""
    window += ", interpolated between evaluations" if c["interpolate"] else ""
    print(f"greedy mean at each budget (median over runs{window})")
    print(head + f" {'env steps':>10}")
    for g in c["groups"]:
        cells = " ".join(_num(g["at"][str(m)]["median"]) for m in marks)
        line = f"{g['label']:<{width}} {len(g['runs']):>4} {cells}"
        if c["target"] is not None:
            at = g["reaches_target_at"]
            reach = (format(round(at), ",") if at is not None else "-") + f" ({g['reached']}/{len(g['runs'])})"
            line += f" {reach:>16}"
        print(line + f" {g['env_steps']:>10,.0f}")
    if not c["gaps"]:
        return
    pct = round(c["level"] * 100)
    print(f"\nmedian gap to {c['baseline']} [{pct} % bootstrap interval over runs]: above / below where it excludes 0")
    for gap in c["gaps"]:
        cells = []
        for m in marks:
            d = gap["at"][str(m)]
            if not d:
                cells.append(f"@{m:,}: -")
            elif d["low"] is None:
                cells.append(f"@{m:,}: {d['gap']:+.1f} (no interval: a group with one run evaluated by then)")
            else:
                cells.append(f"@{m:,}: {d['gap']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}] {d['verdict']}")
        print(f"{gap['label']}:\n  " + "\n  ".join(cells))


def _num(x: float | None) -> str:
    return f"{x:>10.1f}" if x is not None else f"{'-':>10}"


def plot(runs: list[Run], c: dict, path: Path) -> None:
    """Each group's median curve by env steps (the figure at every budget) with its runs' min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = max(r.budget for r in runs)
    grid = np.linspace(0, top, 200).astype(int)
    for g in c["groups"]:
        members = [r for r in runs if r.label == g["label"]]
        rows = [values_at(members, int(x), c["window"], c["interpolate"]) for x in grid]
        xs = [x for x, v in zip(grid, rows) if v]
        med = [statistics.median(v) for v in rows if v]
        (line,) = ax.plot(xs, med, label=f"{g['label']} ({len(members)})")
        ax.fill_between(
            xs, [min(v) for v in rows if v], [max(v) for v in rows if v], color=line.get_color(), alpha=0.15
        )
    if c["target"] is not None:
        ax.axhline(c["target"], color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("env steps the evaluated model was trained on")
    ax.set_ylabel("greedy mean return")
    ax.set_title("median over runs, band: min to max")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="a run directory of `mqttrl train`, or LABEL=DIR (DIR may be a glob pattern, quoted or not); runs "
        "with the same label are one group's seeds (label: the run's name in its config)",
    )
    p.add_argument(
        "--marks",
        nargs="+",
        type=_positive,
        metavar="N",
        help="the env-step budgets to compare at (default: 5 evenly spaced up to the shortest run's env steps)",
    )
    p.add_argument(
        "--window",
        type=_non_negative,
        default=0,
        metavar="N",
        help="a budget's figure: the mean of the evaluations of models trained on (mark - N, mark] env steps "
        "(0: the last evaluation at or before the mark)",
    )
    p.add_argument(
        "--interpolate",
        action="store_true",
        help="a budget's figure: the straight line between the evaluations just before and after it (an estimate "
        "of a model trained on exactly that budget; fair against curves evaluated exactly at the marks)",
    )
    p.add_argument("--target", type=float, help="the return to reach (default: the runs' train.target_return)")
    p.add_argument("--baseline", metavar="LABEL", help="the group the others are compared to (default: the first)")
    p.add_argument("--level", type=_fraction, default=0.9, help="the confidence level of the bootstrap intervals")
    p.add_argument("--plot", type=Path, metavar="FILE", help="draw the groups' median curves by env steps (PNG)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of the table")


def _positive(value: str) -> int:
    try:
        n = int(value.replace(",", "").replace("_", ""))
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a whole number of env steps of at least 1")
    return n


def _non_negative(value: str) -> int:
    return 0 if value.strip() == "0" else _positive(value)


def _fraction(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a fraction between 0 and 1, e.g. 0.9")
    return x


def run(args: argparse.Namespace) -> None:
    try:
        runs = read_runs(args.runs)
        labels = list(dict.fromkeys(r.label for r in runs))
        baseline = args.baseline or labels[0]
        if baseline not in labels:
            raise CompareError(f"--baseline {baseline!r}: no such group (groups: {', '.join(labels)})")
    except CompareError as exc:
        print(f"mqttrl compare: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    targets = {r.target for r in runs}
    target = args.target if args.target is not None else (targets.pop() if len(targets) == 1 else None)
    marks = sorted(set(args.marks)) if args.marks else default_marks(min(r.budget for r in runs))
    c = comparison(runs, marks, args.window, target, baseline, args.level, args.interpolate)
    if args.json:
        print(json.dumps(c, indent=1))
    else:
        print_table(c)
    if args.plot:
        plot(runs, c, args.plot)
        print(f"figure: {args.plot}", file=sys.stderr)


COMMAND = Command(
    help="compare finished runs at equal env steps: seeds grouped, gaps with bootstrap intervals, a plot",
    add_arguments=add_arguments,
    run=run,
    description="Compare finished runs by what their agents do after equal env steps: each group's median\n"
    "greedy mean at each budget over its runs (seeds), and each group's median gap to a baseline with a\n"
    "bootstrap interval, so that a gap is told apart from the seeds' spread. Reads evaluations.csv and\n"
    "summary.json; needs no broker and no torch.",
    epilog="examples:\n"
    "  mqttrl compare runs/pendulum-sac-s*               # one group: a config's seeds\n"
    "  mqttrl compare base=runs/a-s* fast=runs/b-s* --marks 2000 5000 10000 --plot cmp.png\n",
    raw=True,
)
