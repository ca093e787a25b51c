"""Time-to-solve benchmark: `mqttrl train` per seed, optionally side by side with Stable-Baselines3 PPO.

Not a test: it prints figures. Each mqttrl run is the README's command with a seed
(`mqttrl train CONFIG --seed S`), so broker start-up, process spawn and evaluation
are all inside the measured time. With --sb3, SB3's PPO with the rl-baselines3-zoo
hyperparameters runs on the same machine right after, one torch thread, greedy
20-episode evaluation every --sb3-eval-every steps; SB3's clock excludes its
evaluation time (conservative: it favours SB3).

    python benchmarks/bench_solve.py --config configs/cartpole_dqn.toml --seeds 0 1 2
    python benchmarks/bench_solve.py --config configs/cartpole_ppo.toml --seeds 0 1 2 --sb3
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

ZOO = {
    # rl-baselines3-zoo hyperparams/ppo.yml
    "CartPole-v1": dict(
        n_envs=8,
        n_timesteps=100_000,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        linear=True,
        target=475.0,
    ),
    "LunarLander-v3": dict(
        n_envs=16,
        n_timesteps=1_000_000,
        n_steps=1024,
        batch_size=64,
        gae_lambda=0.98,
        gamma=0.999,
        n_epochs=4,
        ent_coef=0.01,
        learning_rate=3e-4,
        clip_range=0.2,
        linear=False,
        target=200.0,
    ),
}


def run_mqttrl(config: str, seed: int, workers: int | None, max_seconds: float, extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-solve-s{seed}-"))
    argv = [
        sys.executable,
        "-m",
        "mqttrl",
        "train",
        config,
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        "--set",
        f"train.max_seconds={max_seconds}",
        *extra,
    ]
    if workers:
        argv += ["--workers", str(workers)]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    if not summary:
        print(out.stderr[-3000:], file=sys.stderr)
    return {
        "seed": seed,
        "solved": summary.get("solved", False),
        "time_to_solve_s": summary.get("time_to_solve_s"),
        "training_time_to_solve_s": summary.get("training_time_to_solve_s"),
        "env_steps": summary.get("env_steps_at_solve"),
        "eval": summary.get("solve_eval_mean") or summary.get("best_eval_mean"),
        "process_wall_s": round(wall, 1),
        "run_dir": str(run_dir),
    }


def run_sb3(env_id: str, seed: int, eval_every: int, max_seconds: float) -> dict:
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    h = ZOO[env_id]
    sched = (lambda v: lambda p: p * v) if h["linear"] else (lambda v: v)
    env = make_vec_env(env_id, n_envs=h["n_envs"], seed=seed)
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=h["n_steps"],
        batch_size=h["batch_size"],
        gae_lambda=h["gae_lambda"],
        gamma=h["gamma"],
        n_epochs=h["n_epochs"],
        ent_coef=h["ent_coef"],
        learning_rate=sched(h["learning_rate"]),
        clip_range=sched(h["clip_range"]),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    state = {"eval_s": 0.0, "solved_at": None, "best": None, "next": eval_every}

    class Solve(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps < state["next"]:
                return True
            state["next"] += eval_every
            t = time.monotonic()
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=20, deterministic=True)
            state["eval_s"] += time.monotonic() - t
            state["best"] = max(mean, state["best"] or -np.inf)
            elapsed = time.monotonic() - t0 - state["eval_s"]
            if mean >= h["target"]:
                state["solved_at"] = (elapsed, self.num_timesteps, mean)
                return False
            return elapsed < max_seconds

    t0 = time.monotonic()
    model.learn(total_timesteps=h["n_timesteps"] * 3, callback=Solve())
    s = state["solved_at"]
    return {
        "seed": seed,
        "solved": s is not None,
        "time_to_solve_s": round(s[0], 2) if s else None,
        "env_steps": s[1] if s else None,
        "eval": s[2] if s else state["best"],
        "eval_excluded_s": round(state["eval_s"], 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--workers", type=int, help="override train.workers")
    p.add_argument("--max-seconds", type=float, default=600)
    p.add_argument("--sb3", action="store_true", help="also run SB3 PPO (zoo hyperparameters) per seed")
    p.add_argument("--sb3-eval-every", type=int, default=5000, help="SB3 env steps between greedy evaluations")
    p.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for mqttrl train")
    p.add_argument("--json", help="write all figures here")
    args = p.parse_args()
    import tomllib

    env_id = tomllib.loads(Path(args.config).read_text()).get("env", {}).get("id", "CartPole-v1")
    extra = [x for kv in args.extra for x in ("--set", kv)]
    rows = []
    for seed in args.seeds:
        m = run_mqttrl(args.config, seed, args.workers, args.max_seconds, extra)
        row = {"seed": seed, "mqttrl": m}
        print(
            f"seed {seed}: mqttrl solved={m['solved']} time-to-solve={m['time_to_solve_s']}s "
            f"(training {m['training_time_to_solve_s']}s) env-steps={m['env_steps']} eval={m['eval']}",
            flush=True,
        )
        if args.sb3:
            s = run_sb3(env_id, seed, args.sb3_eval_every, args.max_seconds)
            row["sb3"] = s
            print(
                f"seed {seed}: SB3 PPO solved={s['solved']} time-to-solve={s['time_to_solve_s']}s env-steps={s['env_steps']} eval={s['eval']}",
                flush=True,
            )
        rows.append(row)
    print()
    print(
        f"{args.config} on {env_id}: {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    head = "| seed | mqttrl time-to-solve, whole command (s) | mqttrl training time to the solving model (s) | mqttrl env steps |"
    if args.sb3:
        head += " SB3 PPO training time-to-solve (s) | SB3 env steps | ratio whole/SB3 | ratio training/SB3 |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    ratios, train_ratios = [], []
    for r in rows:
        m = r["mqttrl"]
        line = f"| {r['seed']} | {m['time_to_solve_s'] if m['solved'] else 'not solved'} | {m['training_time_to_solve_s']} | {m['env_steps']} |"
        if args.sb3:
            s = r["sb3"]
            both = m["solved"] and s["solved"]
            ratio = m["time_to_solve_s"] / s["time_to_solve_s"] if both else None
            tratio = (
                m["training_time_to_solve_s"] / s["time_to_solve_s"] if both and m["training_time_to_solve_s"] else None
            )
            if ratio:
                ratios.append(ratio)
            if tratio:
                train_ratios.append(tratio)
            line += (
                f" {s['time_to_solve_s'] if s['solved'] else 'not solved'} | {s['env_steps']} |"
                f" {f'{ratio:.2f}' if ratio else '-'} | {f'{tratio:.2f}' if tratio else '-'} |"
            )
        print(line)
    solved = [r["mqttrl"]["time_to_solve_s"] for r in rows if r["mqttrl"]["solved"]]
    print(
        f"mqttrl solved {len(solved)}/{len(rows)} seeds"
        + (f", median {statistics.median(solved):.1f}s, max {max(solved):.1f}s" if solved else "")
    )
    if ratios:
        print(
            f"median ratio mqttrl/SB3 time-to-solve: whole command {statistics.median(ratios):.2f}, "
            f"training time {statistics.median(train_ratios):.2f}"
            if train_ratios
            else ""
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
