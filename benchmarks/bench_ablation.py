"""Rainbow ablation: the same config trained with one ingredient switched on at a time, same budget.

Not a test: it prints figures and draws the curves. For each variant and seed it runs the README's
command (`mqttrl train CONFIG --seed S --set train.max_seconds=BUDGET` plus the variant's
``--set``s, through bench_minatar.run_mqttrl: the run's own greedy evaluations every
train.eval_every_s, then the last checkpoint evaluated after the run), one run at a time on this
machine, variants interleaved per seed so that a change in the machine's load spreads over all of
them. Every variant sets each ingredient's key (algorithm.preset, prioritized, initial_priority,
distributional, noisy), so what the config writes about them does not matter: from
configs/cartpole_rainbow.toml, ``dqn`` is configs/cartpole_dqn.toml's run. Variants (VARIANTS below):

- ``dqn``: double, dueling, n-step, uniform replay, the epsilon ladder (no preset);
- ``per-max``: prioritized replay, new transitions at the running maximum priority;
- ``per-actor``: prioritized replay, priorities computed by the actors (Ape-X);
- ``c51``, ``qr``: the distributional heads; ``noisy``: noisy nets instead of the epsilon ladder;
- ``rainbow``: the preset, ``algorithm.preset=rainbow`` (C51, noisy, prioritized with actor
  priorities, double, dueling, 3-step), with its keys also set over the config's own;
- ``rainbow-resets``: rainbow with shrink-and-perturb resets every 7,000 updates
  (``algorithm.reset_every``; every other variant sets it to 0): one reset in a 100k-env-step MinAtar run.

C51 takes its support (v_min, v_max) from the config, which must set one (a C51 head without it is
refused): configs/cartpole_rainbow.toml has CartPole's [0, 100], configs/lunarlander_dqn.toml
[-200, 200], configs/minatar_breakout_dqn.toml C51's own [-10, 10] (Dopamine's MinAtar [-100, 100]
started slower); another config needs ``--set algorithm.v_min=... --set algorithm.v_max=...`` (or
``algorithm.reward_max=...``).
Each run's learner metrics carry ``target_edge_mass``: the share of C51's targets on the edge atoms.

    python benchmarks/bench_ablation.py --config configs/cartpole_rainbow.toml --budget 300 --threshold 475
    python benchmarks/bench_ablation.py --config configs/minatar_breakout_dqn.toml --seeds 0 1 2 --budget 600
    python benchmarks/bench_ablation.py --config configs/lunarlander_dqn.toml --variants dqn per-actor rainbow
    python benchmarks/bench_ablation.py --config configs/minatar_breakout_dqn.toml --variants dqn rainbow \\
        --env-steps 100000 --budget 1800 --seeds 0     # at equal data: 100k env steps each
    python benchmarks/bench_ablation.py --from-json ablation.json     # report and plot saved results

Each figure has two panels: the greedy mean against the env steps its model was trained on (runs
compared at equal data) and against the whole command's wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_minatar import _fmt, _median, _median_time, plot_curves, run_mqttrl, stats

from mqttrl.curves import median_gap
from mqttrl_plugins.dqn.common import PRESETS

#: each ingredient's key when it is off (every variant sets all of them)
OFF: dict[str, object] = {
    "preset": "none",
    "prioritized": False,
    "initial_priority": "actor",
    "distributional": "none",
    "noisy": False,
    "reset_every": 0,
}


def _toml(value: object) -> str:
    """A --set value as TOML (what mqttrl's --set reads)."""
    return json.dumps(value)  # true/false, numbers and "strings" are written alike in JSON and TOML


def variant(**on: object) -> list[str]:
    """The --set overrides of the config with these ingredients on and every other one off."""
    return [f"algorithm.{key}={_toml(value)}" for key, value in {**OFF, **on}.items()]


#: variant -> the --set overrides that make it from the config
VARIANTS: dict[str, list[str]] = {
    "dqn": variant(),
    "per-max": variant(prioritized=True, initial_priority="max"),
    "per-actor": variant(prioritized=True, initial_priority="actor"),
    "c51": variant(distributional="c51"),
    "qr": variant(distributional="qr"),
    "noisy": variant(noisy=True),
    "rainbow": variant(preset="rainbow", **PRESETS["rainbow"]),
    # shrink-and-perturb every 7,000 updates: one reset in 100k env steps at replay ratio 8 and batch 64
    # (12,500 updates), at 56k env steps, with 44k left to relearn; every 4,000 updates (3 resets, the
    # last at 96k) left rainbow no time to recover (docs/benchmarks.md, issue 24). BBF resets every 40k
    # updates, at 8 updates per env step: 64x this replay ratio, and never within a 100k run here
    "rainbow-resets": variant(preset="rainbow", **PRESETS["rainbow"], reset_every=7000),
}


def report(res: dict, threshold: float | None) -> None:
    print()
    print(
        f"{res['config']} ({res['env']}), budget {res['budget']:.0f} s"
        + (f" or {res['env_steps']:,} env steps" if res.get("env_steps") else "")
        + f" per run, seeds {res['seeds']}; "
        f"{res['cores']} cores, Python {res['python']}, {res['date']}"
    )
    th = threshold if threshold is not None else float("inf")
    print(
        f"| variant | median best greedy mean | median final greedy mean | median first time >= {th:g} (s) "
        "| median updates | median env steps | median wall (s) | runs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for variant, runs in res["variants"].items():
        ss = [stats(r, th) for r in runs]
        print(
            f"| {variant} | {_fmt(_median([s['best'] for s in ss]))} | {_fmt(_median([s['final'] for s in ss]))} "
            f"| {_median_time([s['first_t'] for s in ss])} | {_fmt(_median([r.get('updates') for r in runs]), ',.0f')} "
            f"| {_fmt(_median([r.get('env_steps') for r in runs]), ',.0f')} "
            f"| {_fmt(_median([r.get('process_wall_s') for r in runs]), '.0f')} | {len(ss)} |"
        )
    print()
    print("| variant | best greedy mean per seed | last evaluation per seed | evaluations per seed |")
    print("|---|---|---|---|")
    for variant, runs in res["variants"].items():
        print(
            f"| {variant} | {_per_seed(runs, 'best')} | {_per_seed(runs, 'final')} | {_per_seed(runs, 'evaluations')} |"
        )


def report_gaps(res: dict) -> None:
    """Each variant's median gap to the first one (best and last evaluation), with a 90 % bootstrap
    interval over seeds (:func:`mqttrl.curves.median_gap`): "level" where it includes 0."""
    names = list(res["variants"])
    base = [stats(r, float("inf")) for r in res["variants"][names[0]]]
    print()
    print(f"| variant | best: median gap to {names[0]} [90 % interval] | last: median gap [90 % interval] |")
    print("|---|---|---|")
    for name in names[1:]:
        ss = [stats(r, float("inf")) for r in res["variants"][name]]
        cells = []
        for key in ("best", "final"):
            a = [s[key] for s in ss if s[key] is not None]
            b = [s[key] for s in base if s[key] is not None]
            if len(a) < 2 or len(b) < 2:
                cells.append("-")
                continue
            g = median_gap(a, b)
            cells.append(f"{g.gap:+.2f} [{g.low:+.2f}, {g.high:+.2f}] {g.verdict}")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


def _per_seed(runs: list[dict], key: str) -> str:
    """One figure of :func:`stats` for each run, in seed order, with the env steps of the evaluation it
    came from (best, final): a median of three hides which seed lagged and when."""
    out = []
    for run in sorted(runs, key=lambda r: r["seed"]):
        s = stats(run, float("inf"))
        value = s[key]
        if key == "evaluations" or value is None:
            out.append(_fmt(value, "d"))
            continue
        steps = s["best_env_steps"] if key == "best" else run["curve"][-1].get("env_steps")
        out.append(f"{value:.2f}" + (f" ({steps / 1000:.0f}k)" if steps else ""))
    return ", ".join(out)


def plot(res: dict, path: Path) -> None:
    """Each variant's curves by env step (equal data) and by wall clock, side by side."""
    colours = [f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown", "pink", "olive", "cyan")]
    series = [
        (variant, colours[k % len(colours)], [run.get("curve") or [] for run in runs])
        for k, (variant, runs) in enumerate(res["variants"].items())
    ]
    budget = f"{res['budget']:.0f} s" + (f" or {res['env_steps']:,} env steps" if res.get("env_steps") else "")
    plot_curves(series, path, f"{res['env']}: ablation, {budget} per run, seeds {res['seeds']}, {res['cores']} cores")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/minatar_breakout_dqn.toml", help="mqttrl run config")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="which to run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=600.0, help="seconds per run (train.max_seconds)")
    p.add_argument("--env-steps", type=int, help="also stop each run at this many env steps (train.max_env_steps)")
    p.add_argument("--threshold", type=float, help="report the first time the greedy mean reached this")
    p.add_argument("--episodes", type=int, default=20, help="greedy episodes of the final evaluation")
    p.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for every run")
    p.add_argument("--json", help="save every figure and curve here")
    p.add_argument("--plot", help="the figure (PNG); default docs/img/ablation_<config>.png")
    p.add_argument("--from-json", metavar="FILE", help="run nothing: report and plot saved results")
    args = p.parse_args()

    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
    else:
        env = tomllib.loads(Path(args.config).read_text()).get("env", {}).get("id", "?")
        res = {
            "config": args.config,
            "env": env,
            "budget": args.budget,
            "env_steps": args.env_steps,
            "seeds": args.seeds,
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "variants": {v: [] for v in args.variants},
        }
        for seed in args.seeds:
            for variant in args.variants:
                sets = [x for kv in [*VARIANTS[variant], *args.extra] for x in ("--set", kv)]
                print(f"seed {seed}: {variant} for {args.budget:.0f} s ...", flush=True)
                run = run_mqttrl(args.config, seed, args.budget, None, sets, True, args.episodes, args.env_steps)
                res["variants"][variant].append(run)
                s = stats(run, args.threshold if args.threshold is not None else float("inf"))
                print(f"seed {seed}: {variant} best {_fmt(s['best'])} final {_fmt(s['final'])}", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(res, indent=1))
    report(res, args.threshold)
    if len(res["variants"]) > 1:
        report_gaps(res)
    plot(res, Path(args.plot or f"docs/img/ablation_{Path(res['config']).stem}.png"))


if __name__ == "__main__":
    main()
