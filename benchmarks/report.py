"""The benchmarks' tables from their results JSON: the headline table of docs/benchmarks.md (between
its ``<!-- results:begin -->`` and ``<!-- results:end -->`` markers) and a results file's own tables.

    python -m benchmarks.report                 # rewrite docs/benchmarks.md's headline table
    python -m benchmarks.report --check         # exit 1 if the page and benchmarks/results/ disagree
    python -m benchmarks.report benchmarks/results/minatar_dqn.json   # a file's tables, per seed
    python -m benchmarks.report FILE --marks 2000 5000 10000 --interpolate   # greedy means at budgets
    python -m benchmarks.report FILE [FILE ...] --plot docs/img/NAME.png      # every side's curves, one figure
    python -m benchmarks.report FILE --sides "SB3 DQN, Freeway" "mqttrl dqn, Freeway" --gaps best training_return
        # some sides only, the first the base: each figure's median and gap to it, with its interval
    python -m benchmarks.report FILE --best-every 5000 --gaps best best_every_5000
        # the best greedy mean read once every 5,000 env steps: sides evaluated at different
        # cadences get as many readings each (the best of more evaluations is higher by chance)

A comparison's mqttrl / peer figure is the median over seeds of each seed's ratio where both sides
ran the same seeds (a seed's luck cancels out), else the ratio of the two medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.harness.plots import plot_curves
from benchmarks.harness.results import RESULTS, load_all
from mqttrl.observe.curves import at_budget, best_at_marks, median_gap

PAGE = RESULTS.parents[1] / "docs" / "benchmarks.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


#: figures that are counts (the others are returns or seconds)
COUNTS = ("steps_to_target", "env_steps", "updates", "evaluations")


def fmt(value, figure: str) -> str:
    """A figure as the tables write it (``figure``: its name, a key of :func:`benchmarks.harness.figures.run_figures`)."""
    if value is None:
        return "never" if figure.endswith("_to_target") else "-"
    if figure in COUNTS:
        return f"{value:,.0f}"
    return f"{value:.1f} s" if figure.endswith("seconds_to_target") or figure == "wall_s" else f"{value:.2f}"


def ratio(side: dict, peer: dict, measure: str) -> float | None:
    """``side``'s figure over ``peer``'s (see the module docstring)."""
    by_seed = {r["seed"]: r["figures"].get(measure) for r in peer["runs"]}
    paired = [r["figures"].get(measure) / by_seed[r["seed"]] for r in side["runs"] if _both(r, by_seed, measure)]
    if paired and len(paired) == len(side["runs"]):
        return statistics.median(paired)
    a, b = side["summary"].get(measure), peer["summary"].get(measure)
    return a / b if a is not None and b else None


def _both(run: dict, by_seed: dict, measure: str) -> bool:
    return run["figures"].get(measure) is not None and bool(by_seed.get(run["seed"]))


def headline_row(res: dict) -> str:
    """One comparison: each mqttrl side's median figure, its ratio to the first peer, the peers'."""
    m = res["measure"]
    mine = [s for s in res["sides"] if s["role"] == "mqttrl"]
    peers = [s for s in res["sides"] if s["role"] == "peer"]
    cell = lambda s: f"{s['name']} **{fmt(s['summary'].get(m), m)}**"  # noqa: E731
    ratios = [ratio(s, peers[0], m) for s in mine] if peers else []
    seeds = "/".join(sorted({str(s["summary"]["seeds"]) for s in res["sides"]}))
    return (
        f"| {res['title']} | {res['measure_text']} | {'; '.join(map(cell, mine))} "
        f"| {'; '.join(map(cell, peers)) or '-'} | {'; '.join(fmt_ratio(r) for r in ratios) or '-'} | {seeds} "
        f"| `python -m benchmarks.run {res['scenario']}` | [{Path(res['page']).stem}]({res['page']}) |"
    )


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}×"


def headline_table(all_results: list[dict]) -> str:
    """docs/benchmarks.md's table of the comparisons, from every headline results file, by topic page."""
    head = "| comparison | measure (median over seeds) | mqttrl | the peer, same machine | mqttrl / peer | seeds | reproduce | page |"
    shown = sorted((r for r in all_results if r["headline"]), key=lambda r: (r["page"], r["title"]))
    rows = [headline_row(r) for r in shown]
    return "\n".join([head, "|---|---|---|---|---|---|---|---|", *rows])


def regenerate(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + table + "\n" + page[end:]


def print_tables(res: dict) -> None:
    """A results file's figures per side and seed, and each side's medians."""
    print(f"\n{res['title']} ({res['source']}, {res['date']}, {res['machine'].get('cores')} cores): {res['command']}")
    keys = list(dict.fromkeys(k for s in res["sides"] for r in s["runs"] for k in r["figures"]))
    print("| side | seed | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for side in res["sides"]:
        for run in side["runs"]:
            print(
                f"| {side['name']} | {run['seed']} | " + " | ".join(fmt(run["figures"].get(k), k) for k in keys) + " |"
            )
        print(f"| {side['name']} | median | " + " | ".join(fmt(side["summary"].get(k), k) for k in keys) + " |")


def print_marks(res: dict, marks: list[int], interpolate: bool, window: int = 0) -> None:
    """Each side's median greedy mean at each budget of env steps (:func:`mqttrl.observe.curves.at_budget`),
    and its median gap to the first side with a 90 % bootstrap interval over seeds (:func:`median_gap`)."""
    base = res["sides"][0]
    print("| side | " + " | ".join(f"at {m:,}" for m in marks) + " |")
    print("|---|" + "---|" * len(marks))
    for side in res["sides"]:
        cells = []
        for mark in marks:
            values = _at(side, mark, interpolate, window)
            cell = f"{statistics.median(values):.1f}" if values else "-"
            ref = _at(base, mark, interpolate, window)
            if side is not base and len(values) >= 2 and len(ref) >= 2:
                gap = median_gap(values, ref)
                cell += f" ({gap.gap:+.1f} [{gap.low:+.1f}, {gap.high:+.1f}] {gap.verdict})"
            cells.append(cell)
        print(f"| {side['name']} | " + " | ".join(cells) + " |")
    print(f"in brackets: the median gap to {base['name']} [90 % interval over seeds]")


def print_gaps(res: dict, figures: list[str]) -> None:
    """Each side's median of each run figure and its median gap to the first side, with a 90 %
    bootstrap interval over seeds (:func:`median_gap`): whether a difference outgrows the seeds' spread."""
    base = res["sides"][0]
    print("| side | " + " | ".join(figures) + " |")
    print("|---|" + "---|" * len(figures))
    for side in res["sides"]:
        cells = []
        for figure in figures:
            values = [v for r in side["runs"] if (v := r["figures"].get(figure)) is not None]
            ref = [v for r in base["runs"] if (v := r["figures"].get(figure)) is not None]
            cell = fmt(statistics.median(values), figure) if values else "-"
            if side is not base and len(values) >= 2 and len(ref) >= 2:
                gap = median_gap(values, ref)
                times = ratio(side, base, figure)
                cell += f" ({gap.gap:+.2f} [{gap.low:+.2f}, {gap.high:+.2f}] {gap.verdict}; {fmt_ratio(times)})"
            cells.append(cell)
        print(f"| {side['name']} | " + " | ".join(cells) + " |")
    print(f"in brackets: the median gap to {base['name']} [90 % interval over seeds]; the ratio (per seed, median)")


def with_best_every(res: dict, every: int) -> dict:
    """``res`` with each run's figure ``best_every_<every>``: its best greedy mean read at every
    ``every`` env steps (:func:`best_at_marks`) up to the scenario's budget (the longest curve's
    end, to the nearest mark), and each side's median of it in its summary."""
    ends = [r["curve"][-1][0] for s in res["sides"] for r in s["runs"] if r["curve"]]
    marks = list(range(every, max(every, round(max(ends, default=0) / every) * every) + 1, every))
    key = f"best_every_{every}"
    sides = []
    for side in res["sides"]:
        runs = [
            {**r, "figures": {**r["figures"], key: best_at_marks([tuple(p) for p in r["curve"]], marks)}}
            for r in side["runs"]
        ]
        values = [v for r in runs if (v := r["figures"][key]) is not None]
        summary = {**side["summary"], key: statistics.median(values) if values else None}
        sides.append({**side, "runs": runs, "summary": summary})
    return {**res, "sides": sides}


def only_sides(res: dict, names: list[str]) -> dict:
    """``res`` with only the sides named, in that order (the first is the base of the gaps)."""
    by_name = {s["name"]: s for s in res["sides"]}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise SystemExit(f"no side {missing[0]!r} in {res['scenario']}; its sides: {', '.join(by_name)}")
    return {**res, "sides": [by_name[n] for n in names]}


def _at(side: dict, mark: int, interpolate: bool, window: int) -> list[float]:
    """Each run's greedy mean at ``mark`` env steps (none for a run whose budget ends before it)."""
    out = []
    for run in side["runs"]:
        curve = [tuple(p) for p in run["curve"]]
        if curve and mark <= curve[-1][0] + 1000:
            value = at_budget(curve, mark, window, interpolate)
            out += [value] if value is not None else []
    return out


def plot(files: list[dict], path: Path) -> None:
    """Every side of ``files`` in one figure (a side in several files: the later file's)."""
    sides = {s["name"]: [r["curve"] for r in s["runs"]] for res in files for s in res["sides"]}
    titles = " and ".join(dict.fromkeys(res["title"] for res in files))
    plot_curves(list(sides.items()), path, f"{titles}: greedy evaluations", files[0]["target"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", type=Path, help="print these results files' tables instead")
    p.add_argument("--check", action="store_true", help="only say whether the page is up to date")
    p.add_argument("--marks", nargs="+", type=int, help="with files: each side's greedy mean at these env steps")
    p.add_argument("--interpolate", action="store_true", help="--marks read between the evaluations around each")
    p.add_argument(
        "--window", type=int, default=0, help="--marks: the mean of the evaluations in (mark - window, mark]"
    )
    p.add_argument("--plot", type=Path, help="with files: draw every side's curves to this PNG")
    p.add_argument("--sides", nargs="+", help="with files: only these sides, in this order (the first: the gaps' base)")
    p.add_argument(
        "--gaps", nargs="+", metavar="FIGURE", help="with files: these figures' medians and gaps to the first side"
    )
    p.add_argument(
        "--best-every",
        type=int,
        metavar="N",
        help="with files: add the figure best_every_N, the best greedy mean read once every N env steps",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.files:
        files = [json.loads(path.read_text()) for path in args.files]
        files = [only_sides(res, args.sides) for res in files] if args.sides else files
        files = [with_best_every(res, args.best_every) for res in files] if args.best_every else files
        for res in files:
            print_tables(res)
            if args.marks:
                print_marks(res, args.marks, args.interpolate, args.window)
            if args.gaps:
                print_gaps(res, args.gaps)
        if args.plot:
            plot(files, args.plot)
        return 0
    page = PAGE.read_text()
    new = regenerate(page, headline_table(load_all()))
    if args.check:
        print(
            "docs/benchmarks.md is up to date"
            if new == page
            else "docs/benchmarks.md differs: run python -m benchmarks.report"
        )
        return int(new != page)
    PAGE.write_text(new)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
