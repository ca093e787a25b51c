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
  priorities, double, dueling, 3-step), with its keys also set over the config's own.

C51 takes its support (v_min, v_max) from the config, which must set one (a C51 head without it is
refused): configs/cartpole_rainbow.toml has CartPole's [0, 100], configs/lunarlander_dqn.toml
[-200, 200], configs/minatar_breakout_dqn.toml Dopamine's MinAtar [-100, 100]; another config
needs ``--set algorithm.v_min=... --set algorithm.v_max=...`` (or ``algorithm.reward_max=...``).
Each run's learner metrics carry ``target_edge_mass``: the share of C51's targets on the edge atoms.

    python benchmarks/bench_ablation.py --config configs/cartpole_rainbow.toml --budget 300 --threshold 475
    python benchmarks/bench_ablation.py --config configs/minatar_breakout_dqn.toml --seeds 0 1 2 --budget 600
    python benchmarks/bench_ablation.py --config configs/lunarlander_dqn.toml --variants dqn per-actor rainbow
    python benchmarks/bench_ablation.py --from-json ablation.json     # report and plot saved results
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
from bench_minatar import _fmt, _median, _median_time, run_mqttrl, save_figure, stats

from mqttrl_plugins.dqn.common import PRESETS

#: each ingredient's key when it is off (every variant sets all of them)
OFF: dict[str, object] = {
    "preset": "none",
    "prioritized": False,
    "initial_priority": "actor",
    "distributional": "none",
    "noisy": False,
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
}


def report(res: dict, threshold: float | None) -> None:
    print()
    print(
        f"{res['config']} ({res['env']}), budget {res['budget']:.0f} s per run, seeds {res['seeds']}; "
        f"{res['cores']} cores, Python {res['python']}, {res['date']}"
    )
    th = threshold if threshold is not None else float("inf")
    print(f"| variant | median best greedy mean | median final greedy mean | median first time >= {th:g} (s) | runs |")
    print("|---|---|---|---|---|")
    for variant, runs in res["variants"].items():
        ss = [stats(r, th) for r in runs]
        print(
            f"| {variant} | {_fmt(_median([s['best'] for s in ss]))} | {_fmt(_median([s['final'] for s in ss]))} "
            f"| {_median_time([s['first_t'] for s in ss])} | {len(ss)} |"
        )


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = plt.get_cmap("tab10")
    for k, (variant, runs) in enumerate(res["variants"].items()):
        for j, run in enumerate(runs):
            curve = run.get("curve") or []
            ax.plot(
                [c["t"] for c in curve],
                [c["mean"] for c in curve],
                color=colours(k),
                alpha=0.8,
                lw=1.1,
                marker=".",
                label=variant if j == 0 else None,
            )
    ax.set_xlabel("wall-clock seconds of the whole command")
    ax.set_ylabel("greedy return, mean of the run's evaluation episodes")
    ax.set_title(f"{res['env']}: ablation, seeds {res['seeds']}, {res['cores']} cores")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/minatar_breakout_dqn.toml", help="mqttrl run config")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="which to run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=600.0, help="seconds per run (train.max_seconds)")
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
                run = run_mqttrl(args.config, seed, args.budget, None, sets, True, args.episodes)
                res["variants"][variant].append(run)
                s = stats(run, args.threshold if args.threshold is not None else float("inf"))
                print(f"seed {seed}: {variant} best {_fmt(s['best'])} final {_fmt(s['final'])}", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps(res, indent=1))
    report(res, args.threshold)
    plot(res, Path(args.plot or f"docs/img/ablation_{Path(res['config']).stem}.png"))


if __name__ == "__main__":
    main()
