"""Learning from demonstrations: env steps and wall time to a greedy mean >= the config's target,
with and without demonstrations of gymnasium's heuristic lander.

Not a test: it prints figures. For each variant (``none`` or a number of demonstration episodes)
and seed it runs the README's command, ``mqttrl train CONFIG --seed S [--demos DIR]``, so broker
start-up, process spawn, the learner's pretraining on the demonstrations and evaluation are all
inside the measured time. The datasets are recorded first with ``mqttrl record`` (the heuristic's
episodes reset with seeds 5000.., away from the training and evaluation seeds).

    python benchmarks/bench_demos.py --config configs/lunarlander_dqn.toml --variants none 10 50 \\
        --seeds 0 --max-seconds 600 --set demos.margin_loss=1.0
    python benchmarks/bench_demos.py --config configs/lunarlander_ppo.toml --variants 10 50 none \\
        --seeds 0 1 2 --max-seconds 300 --set train.eval_every_s=10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEURISTIC = "gymnasium.envs.box2d.lunar_lander:heuristic"


def record(out: Path, env: str, episodes: int, policy: str, from_run: str | None = None) -> float:
    """Record ``episodes`` episodes of ``policy`` (or of the trained agent of run ``from_run``); their mean return."""
    argv = [sys.executable, "-m", "mqttrl", "record", str(out), "--env", env, "--episodes", str(episodes)]
    argv += ["--from", from_run] if from_run else ["--policy", policy]
    argv += ["--seed", "5000"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    last = done.stdout.strip().splitlines()[-1]
    return float(last.split("mean return ")[1].split(";")[0])


def train(config: str, seed: int, demos: Path | None, max_seconds: float, max_steps: int, extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-demos-s{seed}-"))
    argv = [sys.executable, "-m", "mqttrl", "train", config, "--seed", str(seed), "--run-dir", str(run_dir)]
    argv += ["--no-progress", "--set", f"train.max_seconds={max_seconds}", "--set", f"train.max_env_steps={max_steps}"]
    for item in extra:
        argv += ["--set", item]
    if demos is not None:
        argv += ["--demos", str(demos)]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    if not summary:
        print(out.stderr[-3000:], file=sys.stderr)
    # the env steps the solving model was trained on (the learner's count at its publication), besides
    # all workers' count when its evaluation came in (which includes the evaluation cadence)
    model_steps = next(
        (c["env_steps"] for c in summary.get("curve", []) if c["model_version"] == summary.get("solve_model_version")),
        None,
    )
    return {
        "seed": seed,
        "solved": bool(summary.get("solved")),
        "env_steps_at_solve": summary.get("env_steps_at_solve"),
        "model_env_steps_at_solve": model_steps if summary.get("solved") else None,
        "time_to_solve_s": summary.get("time_to_solve_s"),
        "best_eval_mean": summary.get("best_eval_mean"),
        "env_steps": summary.get("env_steps"),
        "process_wall_s": round(wall, 1),
        "run_dir": str(run_dir),
        "curve": [(c["env_steps"], c["mean"]) for c in summary.get("curve", [])],
    }


def plot(results: list[dict], path: str, title: str) -> None:
    """Each run's greedy evaluations against env steps, one colour per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = {}
    for r in results:
        colour = colours.setdefault(r["variant"], f"C{len(colours)}")
        steps, means = zip(*r["curve"]) if r["curve"] else ((), ())
        label = f"{r['variant']} demos" if r["variant"] != "none" else "no demos"
        ax.plot(steps, means, marker=".", color=colour, label=f"{label}, seed {r['seed']}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation mean")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/lunarlander_dqn.toml")
    ap.add_argument("--env", default="LunarLander-v3")
    ap.add_argument("--policy", default=HEURISTIC, help="the demonstrator (module:function)")
    ap.add_argument("--from-run", help="the demonstrator is this run's trained agent (a run directory), not --policy")
    ap.add_argument("--plot", help="draw the greedy evaluations by env step to this PNG")
    ap.add_argument("--variants", nargs="+", default=["none", "10", "50"], help="none, or demonstration episodes")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--max-env-steps", type=int, default=0)
    ap.add_argument("--set", dest="extra", action="append", default=[], help="config override for every run")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    data = Path(tempfile.mkdtemp(prefix="bench-demos-data-"))
    results = []
    for variant in args.variants:
        demos, demo_mean = None, None
        if variant != "none":
            demos = data / f"demos-{variant}"
            demo_mean = record(demos, args.env, int(variant), args.policy, args.from_run)
            print(
                f"recorded {variant} episodes of {args.from_run or args.policy}: mean return {demo_mean:.1f}",
                flush=True,
            )
        for seed in args.seeds:
            r = train(args.config, seed, demos, args.max_seconds, args.max_env_steps, args.extra)
            r.update(variant=variant, demo_mean_return=demo_mean)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)

    print(
        "\n| demonstrations | seed | solved | env steps to target | the solving model's env steps | time to target (s) "
        "| best greedy mean | env steps run | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['variant']} | {r['seed']} | {'yes' if r['solved'] else 'no'} | {r['env_steps_at_solve'] or '-'} | "
            f"{r['model_env_steps_at_solve'] or '-'} | "
            f"{r['time_to_solve_s'] or '-'} | {r['best_eval_mean']} | {r['env_steps']} | {r['process_wall_s']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot, f"{Path(args.config).stem}: with and without demonstrations")


if __name__ == "__main__":
    main()
