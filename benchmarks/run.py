"""Run a scenario: every side of a comparison (``benchmarks/scenarios/``) for N seeds, seed by seed
with the sides interleaved (a change in the machine's load spreads over all of them), its results
written after every run to ``benchmarks/results/<scenario>.json``.

    python -m benchmarks.run --list
    python -m benchmarks.run cartpole_ppo --seeds 3
    python -m benchmarks.run minatar_dqn --seeds 3 --plot docs/img/minatar_breakout_dqn.png
    python -m benchmarks.run pendulum_redq --sides "mqttrl REDQ (1 x 1)" --set algorithm.utd=5 --out redq5.json
    python -m benchmarks.run minatar_dqn --seeds 2 --first-seed 3 --append   # two more seeds into the same file

``--seconds``, ``--env-steps`` and ``--target`` change the scenario's budget and target, ``--config``
and ``--set`` every mqttrl side's config. ``python -m benchmarks.report FILE`` prints a results file's
tables again (``--marks``: at budgets of env steps; ``--plot``: the curves of one or more files).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import mqttrl_side, results, scenario
from benchmarks.harness.launched_game import display_for
from benchmarks.report import plot, print_tables


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", nargs="?", help="a module of benchmarks/scenarios/")
    p.add_argument("--list", action="store_true", help="list the scenarios and their sides")
    p.add_argument("--seeds", type=int, help="how many seeds (default: the scenario's)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds run from this one up")
    p.add_argument("--sides", nargs="+", help="run only these sides (their names)")
    p.add_argument("--seconds", type=float, help="budget per run in seconds (default: the scenario's)")
    p.add_argument("--env-steps", type=int, help="budget per run in env steps (default: the scenario's)")
    p.add_argument("--target", type=float, help="the greedy mean the figures count to (default: the scenario's)")
    p.add_argument("--demonstrator", help="demonstrations from this policy (module:function) or run directory")
    p.add_argument("--config", help="every mqttrl side on this config instead of the scenario's")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="for every mqttrl side")
    p.add_argument("--out", type=Path, help="the results file (default: benchmarks/results/<scenario>.json)")
    p.add_argument("--plot", type=Path, help="draw every run's curve to this PNG")
    p.add_argument(
        "--append", action="store_true", help="add the runs to the results file (--out) instead of starting it anew"
    )
    args = p.parse_args(argv)
    if not args.list and not args.scenario:
        p.error("name a scenario (--list lists them)")
    return args


def budgeted(sc: scenario.Scenario, args: argparse.Namespace) -> scenario.Scenario:
    """The scenario with the command line's budget, seeds and config."""
    changes = {"seconds": args.seconds, "env_steps": args.env_steps, "seeds": args.seeds, "target": args.target}
    changes["demonstrator"] = args.demonstrator
    if args.config:
        on = lambda s: replace(s, config=args.config) if isinstance(s, scenario.Mqttrl) else s  # noqa: E731
        changes["sides"] = tuple(map(on, sc.sides))
    return replace(sc, **{k: v for k, v in changes.items() if v is not None})


def run_side(side, sc: scenario.Scenario, seed: int, workdir: Path, sets: list[str], demos: dict) -> dict:
    """One seed of one side, whichever library it is."""
    if isinstance(side, scenario.RandomPolicy):
        from benchmarks.harness import random_side

        return random_side.run(side, sc, seed)
    if isinstance(side, scenario.Baseline):
        from benchmarks.harness import sb3_side

        return sb3_side.run(side, sc, seed)
    if side.demos and side.name not in demos:
        demos[side.name] = mqttrl_side.record_demos(side, sc, workdir)
    return mqttrl_side.run(side, sc, seed, workdir, sets, demos.get(side.name))


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.list:
        for name in scenario.names():
            sc = scenario.load(name)
            print(f"{name}: {sc.title} ({', '.join(s.name for s in sc.sides)})")
        return None
    sc = budgeted(scenario.load(args.scenario), args)
    sides = args.sides or [s.name for s in sc.sides]
    out = args.out or results.RESULTS / f"{args.scenario}.json"
    if args.append and out.exists():
        res = results.continued(json.loads(out.read_text()), args.scenario, sc, sides)
    else:
        res = results.new_results(args.scenario, sc, sides)
    workdir, demos = Path(tempfile.mkdtemp(prefix=f"bench-{args.scenario}-")), {}
    print(f"{sc.title}: {', '.join(sides)}; {sc.seeds} seeds; runs under {workdir}", flush=True)
    with display_for(tuple(sc.side(n) for n in sides)):  # a launched screen game needs an X display
        for seed in range(args.first_seed, args.first_seed + sc.seeds):
            for name in sides:
                run = run_side(sc.side(name), sc, seed, workdir, args.sets, demos)
                results.add_run(res, name, run)
                print(f"{name} seed {seed}: {run['figures']}", flush=True)
                results.write(res, out)  # after every run: a long run interrupted keeps what it measured
    print_tables(res)
    if args.plot:
        plot([res], args.plot)
    return res


if __name__ == "__main__":
    main()
