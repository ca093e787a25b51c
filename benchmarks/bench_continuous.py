"""Continuous control per env step: mqttrl's SAC and REDQ against Stable-Baselines3 SAC, side by side.

Not a test: it prints figures (and writes JSON and a figure). Each mqttrl run is the README's
command with a seed and an env-step budget (`mqttrl train CONFIG --seed S --run-dir DIR
--no-progress --set train.max_env_steps=N --set train.target_return=1e9`: the target is set out of
reach so that every run uses its whole budget). Its curve is the run's own greedy evaluations
(`evaluations.csv`: the mean of `train.eval_episodes` greedy episodes against `model_env_steps`, the
env steps the learner had taken in when it published the evaluated model). After the run this
script evaluates the run's last checkpoint (`mqttrl.load_policy(run, which="latest")`) on the same
--episodes seeds (10**6 + i) as the SB3 model: that is the "final" figure.

SB3 SAC runs in this process with the same networks and optimiser as the mqttrl configs
(ENVS below). --env pendulum (configs/pendulum_sac.toml, pendulum_redq.toml): net_arch [64, 64]
for the policy and both critics, batch 128, Adam lr 1e-3 for policy, critics and temperature, tau
0.005, gamma 0.99, buffer 100k, learning_starts 1000 (uniform random actions before). --env
lunarlander (configs/lunarlander_continuous_sac.toml, rl-baselines3-zoo's): net_arch [400, 300],
batch 256, lr 7.3e-4 (constant on both sides), tau 0.01, buffer 1M, learning_starts 10000. Both:
one gradient step per env step, ent_coef "auto" (target entropy -|A|), one env, one torch thread.
Its curve: a greedy evaluation of --episodes episodes every --eval-every env steps, each on start
states of its own (reset seeds 2 * 10**6 + episodes * k + i for the k-th; before session 8 always
10**6 + i, a set that read SB3's policies 9-83 better than 100 other start states while they learnt).

    python benchmarks/bench_continuous.py --seeds 0 1 2 --json pendulum.json --plot pendulum.png
    python benchmarks/bench_continuous.py --algos redq --redq-utd 5 --seeds 0   # REDQ at G = 5
    python benchmarks/bench_continuous.py --env lunarlander --algos sac sb3 --steps 200000 --eval-every 5000
    python benchmarks/bench_continuous.py --from-json a.json b.json --plot pendulum.png   # later files win
    python benchmarks/bench_continuous.py --algos sac --set train.workers=1 --set env.num_envs=1 --tag "1 x 1"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mqttrl.api import read_curve as read_eval_curve
from mqttrl.curves import at_budget, first_reaching, median_gap

REPO = Path(__file__).resolve().parent.parent

#: per env (--env): its gymnasium id, the mqttrl configs by algorithm, Stable-Baselines3 SAC with the
#: same networks and optimiser as those configs, and the greedy mean that counts as solved
ENVS = {
    "pendulum": {
        "id": "Pendulum-v1",
        "configs": {"sac": REPO / "configs/pendulum_sac.toml", "redq": REPO / "configs/pendulum_redq.toml"},
        # configs/pendulum_sac.toml (module docstring)
        "sb3": dict(
            learning_rate=1e-3,
            buffer_size=100_000,
            learning_starts=1000,
            batch_size=128,
            tau=0.005,
            gamma=0.99,
            train_freq=1,
            gradient_steps=1,
            ent_coef="auto",
            policy_kwargs=dict(net_arch=[64, 64]),
        ),
        "solved": -200.0,
        "marks": [2000, 5000, 10000, 20000],
    },
    "lunarlander": {
        "id": "LunarLanderContinuous-v3",
        "configs": {"sac": REPO / "configs/lunarlander_continuous_sac.toml"},
        # configs/lunarlander_continuous_sac.toml: rl-baselines3-zoo's hyperparams/sac.yml, with the
        # learning rate constant (the zoo's lin_7.3e-4 decays it; mqttrl's SAC has no schedule)
        "sb3": dict(
            learning_rate=7.3e-4,
            buffer_size=1_000_000,
            learning_starts=10_000,
            batch_size=256,
            tau=0.01,
            gamma=0.99,
            train_freq=1,
            gradient_steps=1,
            ent_coef="auto",
            policy_kwargs=dict(net_arch=[400, 300]),
        ),
        "solved": 200.0,
        "marks": [20000, 50000, 100000, 200000],
    },
}


def greedy_returns(act, env_id: str, episodes: int, first_seed: int = 10**6) -> list[float]:
    """``episodes`` greedy episodes of ``act(obs) -> action``, reset seeds ``first_seed`` + i."""
    import gymnasium as gym

    env = gym.make(env_id)
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=first_seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            total += float(r)
            done = term or trunc
        out.append(total)
    env.close()
    return out


def read_curve(run_dir: Path) -> list[dict]:
    """The run's evaluations (:func:`mqttrl.api.read_curve`) as JSON-able points."""
    return [{"env_steps": s, "mean": m, "wall_s": w} for s, w, m in read_eval_curve(run_dir / "evaluations.csv")]


def run_mqttrl(
    env: str,
    algo: str,
    seed: int,
    steps: int,
    episodes: int,
    workdir: Path,
    eval_every_s: float | None,
    sets: list[str],
) -> dict:
    """The README's command for ``algo``'s config with a seed and an env-step budget (and ``--set``
    overrides ``sets``); the run's curve and its last checkpoint's greedy mean on the common seeds."""
    import numpy as np

    import mqttrl

    run_dir = workdir / f"{algo}-s{seed}"
    cmd = [
        str(Path(sys.executable).parent / "mqttrl"),
        "train",
        str(ENVS[env]["configs"][algo]),
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        "--set",
        f"train.max_env_steps={steps}",
        "--set",
        "train.target_return=1e9",
        "--set",
        "train.max_seconds=0",
        *(["--set", f"train.eval_every_s={eval_every_s}"] if eval_every_s else []),
        *[a for kv in sets for a in ("--set", kv)],
    ]
    print(" ".join(cmd[1:]), flush=True)
    t0 = time.monotonic()
    with (workdir / f"{algo}-s{seed}.log").open("w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    try:
        policy = mqttrl.load_policy(run_dir, which="latest")
    except Exception as e:  # a failed run: its row says so, the other runs go on
        print(f"{algo} seed {seed}: no model to evaluate ({e}); rc {rc}, log {log.name}", flush=True)
        final = [float("nan")]
    else:
        final = greedy_returns(lambda o: policy.predict(np.asarray(o)[None])[0], ENVS[env]["id"], episodes)
    return {
        "env": ENVS[env]["id"],
        "algo": f"mqttrl {algo}",
        "sets": sets,
        "seed": seed,
        "rc": rc,
        "wall_s": wall,
        "env_steps": summary.get("env_steps"),
        "updates": summary.get("updates"),
        "final_mean": statistics.fmean(final),
        "final_returns": final,
        "curve": read_curve(run_dir),
    }


def run_sb3(env: str, seed: int, steps: int, episodes: int, eval_every: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    env_id = ENVS[env]["id"]
    curve: list[dict] = []
    t0 = time.monotonic()

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                # start states of their own for each evaluation, as mqttrl's evaluator draws them by model
                # version: one fixed set read a policy 9-83 better than 100 other start states (session 8)
                first = 2 * 10**6 + episodes * (self.num_timesteps // eval_every)
                ret = greedy_returns(lambda o: self.model.predict(o, deterministic=True)[0], env_id, episodes, first)
                curve.append(
                    {"env_steps": self.num_timesteps, "mean": statistics.fmean(ret), "wall_s": time.monotonic() - t0}
                )
            return True

    model = SAC("MlpPolicy", gym.make(env_id), seed=seed, verbose=0, **ENVS[env]["sb3"])
    model.learn(total_timesteps=steps, callback=Evaluate())
    final = greedy_returns(lambda o: model.predict(o, deterministic=True)[0], env_id, episodes)
    return {
        "env": env_id,
        "algo": "SB3 SAC",
        "sets": [],
        "seed": seed,
        "rc": 0,
        "wall_s": time.monotonic() - t0,
        "env_steps": steps,
        "updates": int(model._n_updates),
        "final_mean": statistics.fmean(final),
        "final_returns": final,
        "curve": curve,
    }


def at_steps(run: dict, steps: int, window: int = 0, interpolate: bool = False) -> float | None:
    """The run's greedy mean at a budget of ``steps`` env steps (:func:`mqttrl.curves.at_budget`; None
    for a mark beyond the run's budget)."""
    if steps > max((p["env_steps"] for p in run["curve"]), default=0) + 1000:
        return None
    return at_budget(points(run), steps, window, interpolate)


def points(run: dict) -> list[tuple[int, float, float]]:
    """The run's curve as :mod:`mqttrl.curves` points (env_steps, wall_s, mean)."""
    return [(p["env_steps"], p.get("wall_s", 0.0), p["mean"]) for p in run["curve"]]


def first_solved(run: dict, threshold: float) -> int | None:
    """Env steps of the first greedy evaluation at or above ``threshold`` (None: never)."""
    return first_reaching(points(run), threshold)


def report_gaps(
    results: list[dict], marks: list[int], window: int, interpolate: bool, baseline: str = "SB3 SAC"
) -> None:
    """Each algorithm's median gap to ``baseline`` at each mark with a 90 % bootstrap interval over seeds."""
    base = [r for r in results if r["algo"] == baseline]
    if len(base) < 2:
        return
    print(f"median gap to {baseline} [90 % bootstrap interval over seeds]; above / below where it excludes 0")
    for a in dict.fromkeys(r["algo"] for r in results):
        runs = [r for r in results if r["algo"] == a]
        if a == baseline or len(runs) < 2:
            continue
        cells = []
        for m in marks:
            x = [v for v in (at_steps(r, m, window, interpolate) for r in runs) if v is not None]
            y = [v for v in (at_steps(r, m, window, interpolate) for r in base) if v is not None]
            if len(x) >= 2 and len(y) >= 2:
                g = median_gap(x, y)
                cells.append(f"@{m}: {g.gap:+.0f} [{g.low:+.0f}, {g.high:+.0f}] {g.verdict}")
        print(f"    {a}: " + "; ".join(cells))


def report(results: list[dict], marks: list[int], solved: float, window: int = 0, interpolate: bool = False) -> None:
    algos = list(dict.fromkeys(r["algo"] for r in results))
    head = f"{'algorithm':<14} {'seeds':>5} " + " ".join(f"{'@' + str(m):>9}" for m in marks)
    print(head + f" {'final':>9} {f'>={solved:g} at':>10} {'env steps':>9} {'updates':>8} {'wall s':>7}")
    for a in algos:
        runs = [r for r in results if r["algo"] == a]
        cells = []
        for m in marks:
            vals = [v for v in (at_steps(r, m, window, interpolate) for r in runs) if v is not None]
            cells.append(f"{statistics.median(vals):>9.1f}" if vals else f"{'-':>9}")
        final = statistics.median(r["final_mean"] for r in runs)
        steps = statistics.median(r["env_steps"] or 0 for r in runs)
        ups = statistics.median(r["updates"] or 0 for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        firsts = [first_solved(r, solved) for r in runs]
        solved_cell = f"{statistics.median(firsts):>10.0f}" if None not in firsts else f"{'-':>10}"
        print(
            f"{a:<14} {len(runs):>5} "
            + " ".join(cells)
            + f" {final:>9.1f} {solved_cell} {steps:>9.0f} {ups:>8.0f} {wall:>7.0f}"
        )
        for r in runs:
            print(
                f"    seed {r['seed']}: {' '.join(r.get('sets') or [])} final {r['final_mean']:.1f}, curve "
                + ", ".join(f"{p['env_steps']}:{p['mean']:.0f}" for p in r["curve"])
            )


def plot(results: list[dict], path: Path, env_id: str, solved: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {}
    for r in results:
        c = colors.setdefault(r["algo"], f"C{len(colors)}")
        xs = [p["env_steps"] for p in r["curve"]]
        ys = [p["mean"] for p in r["curve"]]
        walls = [p["wall_s"] for p in r["curve"]]
        label = r["algo"] if r["seed"] == min(x["seed"] for x in results if x["algo"] == r["algo"]) else None
        axes[0].plot(xs, ys, color=c, alpha=0.8, label=label)
        axes[1].plot(walls, ys, color=c, alpha=0.8, label=label)
    for ax, xl in zip(axes, ("env steps", "wall-clock seconds")):
        ax.axhline(solved, color="gray", ls=":", lw=1)
        ax.set_xlabel(xl)
        ax.set_ylabel("greedy mean return")
        ax.legend()
    fig.suptitle(f"{env_id}: greedy evaluations")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")


def main() -> None:
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        """The docstring as written, and every option's default."""

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter)
    ap.add_argument("--env", choices=list(ENVS), default="pendulum", help="pendulum or lunarlander (SAC only)")
    ap.add_argument(
        "--algos", nargs="+", default=None, choices=["sac", "redq", "sb3"], help="default: every one the env has"
    )
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, default=20_000, help="env steps per run (SAC and SB3)")
    ap.add_argument("--redq-steps", type=int, default=None, help="env steps per REDQ run (default: --steps)")
    ap.add_argument(
        "--redq-utd",
        type=float,
        default=None,
        help="REDQ's critic updates per env step G (default: the config's, 20), the policy still once per env step",
    )
    ap.add_argument("--episodes", type=int, default=10, help="greedy episodes per evaluation")
    ap.add_argument("--eval-every", type=int, default=1000, help="SB3: env steps between evaluations")
    ap.add_argument(
        "--eval-every-s", type=float, default=None, help="mqttrl: train.eval_every_s (default: the config's)"
    )
    ap.add_argument("--marks", nargs="+", type=int, default=None, help="env steps of the table's columns")
    ap.add_argument(
        "--window",
        type=int,
        default=0,
        help="a column's figure: the mean of the evaluations of models trained on (mark - window, mark] env "
        "steps (0: the last evaluation at or before the mark)",
    )
    ap.add_argument(
        "--interpolate",
        action="store_true",
        help="a column's figure: the straight line between the evaluations just before and after the mark "
        "(SB3 is evaluated at the marks; mqttrl's evaluator every --eval-every-s, so without it mqttrl's figure "
        "is of a model up to one evaluation interval older than the mark)",
    )
    ap.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra --set for every mqttrl run (e.g. train.workers=1); with it, name the runs with --tag",
    )
    ap.add_argument("--tag", default="", help="appended to the mqttrl runs' names in the tables and figure")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--from-json", type=Path, nargs="+")
    args = ap.parse_args()
    if args.algos is None:
        args.algos = [*ENVS[args.env]["configs"], "sb3"]
    if "redq" in args.algos and "redq" not in ENVS[args.env]["configs"]:
        ap.error(f"--env {args.env} has no REDQ config; --algos sac sb3")
    if args.redq_utd is not None and (args.redq_utd < 1 or args.redq_utd != int(args.redq_utd)):
        ap.error(f"--redq-utd {args.redq_utd:g}: a whole number >= 1 (the policy is updated every G critic updates)")
    marks = args.marks or ENVS[args.env]["marks"]
    redq_sets = [f"algorithm.utd={args.redq_utd:g}"] if args.redq_utd else []
    if args.from_json:
        # a later file's run of the same algorithm and seed replaces an earlier one's
        latest = {(r["algo"], r["seed"]): r for p in args.from_json for r in json.loads(p.read_text())["results"]}
        results = list(latest.values())
    else:
        results = []
        workdir = Path(tempfile.mkdtemp(prefix="bench-continuous-"))
        print(f"workdir {workdir}; {platform.platform()}, {os.cpu_count()} cores", flush=True)
        for seed in args.seeds:  # seed by seed, every algorithm side by side
            for algo in args.algos:
                if algo == "sb3":
                    results.append(run_sb3(args.env, seed, args.steps, args.episodes, args.eval_every))
                else:
                    steps = args.redq_steps if algo == "redq" and args.redq_steps else args.steps
                    sets = [*(redq_sets if algo == "redq" else []), *args.extra]
                    results.append(
                        run_mqttrl(args.env, algo, seed, steps, args.episodes, workdir, args.eval_every_s, sets)
                    )
                    if args.tag:
                        results[-1]["algo"] += f" ({args.tag})"
                r = results[-1]
                print(f"{r['algo']} seed {seed}: final {r['final_mean']:.1f} after {r['wall_s']:.0f} s", flush=True)
                if args.json:
                    args.json.write_text(
                        json.dumps(
                            {"args": vars(args) | {"json": str(args.json), "plot": str(args.plot)}, "results": results},
                            default=str,
                        )
                    )
    env_id = results[0].get("env", ENVS[args.env]["id"]) if results else ENVS[args.env]["id"]
    solved = next(e["solved"] for e in ENVS.values() if e["id"] == env_id)
    report(results, marks, solved, args.window, args.interpolate)
    report_gaps(results, marks, args.window, args.interpolate)
    if args.plot:
        plot(results, args.plot, env_id, solved)


if __name__ == "__main__":
    main()
