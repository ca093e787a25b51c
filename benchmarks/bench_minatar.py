"""Learning benchmark on MinAtar Breakout: `mqttrl train` per seed for a fixed wall-clock budget,
optionally side by side with Stable-Baselines3 DQN on the same env and the same budget.

Not a test: it prints figures and draws the curves. Each mqttrl run is the README's command with a
seed and a time budget (`mqttrl train CONFIG --seed S --run-dir DIR --no-progress --set
train.max_seconds=BUDGET`): broker start-up, process spawn and the run's own greedy evaluations
(20 episodes every `train.eval_every_s`, in the run's evaluator, on the same cores) are all inside
the measured time. Its curve is `evaluations.csv` of the run directory: greedy mean against
`wall_s` (seconds since the command's monitor started: the whole command's clock) and
`training_s` (from the learner's first model to the publication of the evaluated model). The run
stops at the budget without evaluating its last model, so this script then evaluates the last
checkpoint the same way (20 greedy episodes, `greedy_actor` + `evaluate`, after the run, outside
its clock); that point is plotted at the command's end (`summary.json` wall_s).

With --sb3, Stable-Baselines3 DQN runs right after each mqttrl seed on the same machine, on the
same env made the same way (`mqttrl.envs.make.make_env(ENV)`, observations cast to float32 by a
wrapper: SB3 cannot take MinAtar's bool arrays), one process, one torch thread, for the same
budget of *training* time: its clock stops while it evaluates (20 greedy episodes every
--sb3-eval-every-s seconds of training, the same protocol as mqttrl's evaluator:
`mqttrl.envs.rollout.evaluate`, episodes side by side, seeds 10**6 + i). Excluding the evaluation
time favours SB3 (mqttrl evaluates on the same 2 cores while it trains).

SB3 DQN hyperparameters (the MinAtar paper's DQN, Young & Tian 2019, with Adam as in the mqttrl
config; see SB3_DQN below): network = one 3x3 conv of 16 channels, ReLU, flatten, linear 128, ReLU,
linear head (a `BaseFeaturesExtractor`, net_arch=[]: SB3's NatureCNN does not fit 10x10 inputs);
buffer 100k, learning_starts 5000, batch 32, Adam lr 2.5e-4 (eps 3.125e-4), train_freq 4 with one
gradient step (each transition replayed 8 times on average: the mqttrl config's replay_ratio 8;
--sb3-train-freq 1 gives the paper's 32), target network copied every 1000 env steps, epsilon 1 ->
0.1 linearly over the first 100k env steps, gamma 0.99, Huber loss, gradient norm clipped at 10.

With --sb3-algos dqn qrdqn, sb3-contrib QR-DQN (Dabney et al. 2018) runs too, after SB3 DQN, with
every one of SB3_DQN's settings, the same torso and one linear head of N quantiles per action (N =
--qrdqn-quantiles, default 51: mqttrl's QR default; sb3-contrib's and the paper's 200 cost 25x more per
loss here), sb3-contrib's quantile Huber loss (kappa 1), no double DQN (sb3-contrib's QR-DQN has none,
nor has SB3's DQN). The QR-DQN paper's and the zoo's Atari settings (lr 5e-5, target every 10k
steps, buffer 1M, final epsilon 0.01) are for 10M-200M frames and not used. --no-mqttrl runs only the
baselines; --env-steps caps every run at that many env steps (give a --budget that does not bind) and
--sb3-eval-every-steps evaluates every that many env steps (curves by env step).

    python benchmarks/bench_minatar.py --seeds 0 1 2 --budget 900 --sb3 --json minatar_dqn.json
    python benchmarks/bench_minatar.py --no-mqttrl --sb3-algos dqn qrdqn --seeds 0 1 2 --env-steps 100000 \
        --budget 3600 --sb3-eval-every-steps 5000 --json sb3_100k.json
    python benchmarks/bench_minatar.py --config configs/minatar_breakout_ppo.toml --json minatar_ppo.json
    python benchmarks/bench_minatar.py --seeds 0 --env-steps 100000 --budget 1200 --json minatar_100k.json
    python benchmarks/bench_minatar.py --from-json minatar_dqn.json minatar_ppo.json   # one figure of both

Figures have two panels: greedy mean by env steps (the data each evaluated model was trained on)
and by wall clock.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def save_figure(fig, path: Path) -> None:
    """Lay out, write (creating its folder) and close a benchmark's figure; say where it went."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")


#: Stable-Baselines3 DQN on MinAtar (documented in the module docstring)
SB3_DQN = dict(
    buffer_size=100_000,
    learning_starts=5_000,
    batch_size=32,
    learning_rate=2.5e-4,
    adam_eps=3.125e-4,  # the mqttrl config's (Dopamine's MinAtar eps; the runs before 2026-11-24 used 1.5e-4)
    train_freq=4,
    gradient_steps=1,
    target_update_interval=1_000,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.1,
    exploration_steps=100_000,
    gamma=0.99,
    max_grad_norm=10.0,
    features_dim=128,
    conv_channels=16,
)
#: sb3-contrib QR-DQN's quantiles per action: mqttrl's QR default (n_quantiles), not sb3-contrib's and
#: the paper's 200: sb3-contrib's quantile Huber loss at batch 32, one torch thread, forward + backward,
#: took 0.8 ms at 51 and 20 ms at 200 (2026-11-24), which would make QR-DQN at 100k env steps ~10 min a seed
QRDQN_QUANTILES = 51
#: baseline -> (key of its run in a seed's row, name in tables and figures); "sb3" kept for older JSON
SB3_SYSTEMS = {"dqn": ("sb3", "SB3 DQN"), "qrdqn": ("sb3_qrdqn", "sb3-contrib QR-DQN")}
#: SB3 needs a total for its epsilon schedule: exploration_fraction = exploration_steps / this
SB3_TOTAL_STEPS = 100_000_000


# --------------------------------------------------------------------------------------------
# mqttrl
# --------------------------------------------------------------------------------------------


def read_curve(run_dir: Path) -> list[dict]:
    """Greedy evaluations of a run: wall_s, training_s, env_steps, mean per row of evaluations.csv;
    env_steps are those the evaluated model was trained on (``model_env_steps``: the learner's count
    when it published it), or all workers' count when the result came in for a run without them."""
    path = run_dir / "evaluations.csv"
    if not path.exists():
        return []
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(
                {
                    "t": float(r["wall_s"]),
                    "training_s": float(r["training_s"]) if r.get("training_s") not in (None, "", "None") else None,
                    "env_steps": int(float(r.get("model_env_steps") or r["env_steps"])),
                    "mean": float(r["mean"]),
                    "model_version": int(float(r["model_version"])),
                }
            )
    return rows


def evaluate_final(run_dir: Path, episodes: int, seed: int) -> dict | None:
    """Greedy evaluation of the run's last checkpoint (written when the budget ran out), as the run's own
    evaluator does it (`greedy_actor` + `evaluate`, episodes side by side), in this process after the run."""
    from mqttrl.config import load_config
    from mqttrl.envs.make import make_env
    from mqttrl.envs.rollout import evaluate, greedy_actor
    from mqttrl.plugin.manager import get_registry
    from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint

    path = CheckpointStore(run_dir / "checkpoints").latest()
    if path is None:
        return None
    registry = get_registry()
    cfg = load_config(run_dir / "config.json", [], lambda n: registry.algorithm(n).params)
    info = registry.algorithm(cfg.algorithm.name)
    env = make_env(cfg.env.id, cfg.env.kwargs, registry)
    learner = info.make_learner(cfg.algorithm.params, env.observation_space, env.action_space, "cpu", 0)
    env.close()
    tensors, meta = read_checkpoint(path)
    learner.load_state_dict({k[len("algo/") :]: v for k, v in tensors.items() if k.startswith("algo/")}, meta["algo"])
    actor, make = greedy_actor(cfg, episodes)
    actor.load_weights(*learner.export_weights())
    returns = evaluate(actor, make, episodes, seed=seed)
    return {"mean": sum(returns) / len(returns), "final": True, "checkpoint": path.name}


def run_mqttrl(
    config: str,
    seed: int,
    budget: float,
    workers: int | None,
    extra: list[str],
    final_eval: bool,
    episodes: int,
    env_steps: int | None = None,
) -> dict:
    """One `mqttrl train` run for ``budget`` seconds (and, given ``env_steps``, until that many env
    steps: ``train.max_env_steps``, the run then evaluates its last model itself); its curve."""
    base = Path(tempfile.mkdtemp(prefix=f"bench-minatar-s{seed}-"))
    run_dir = base / "run"
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
        f"train.max_seconds={budget}",
        *extra,
    ]
    if workers:
        argv += ["--workers", str(workers)]
    if env_steps:
        argv += ["--set", f"train.max_env_steps={int(env_steps)}"]
    t0 = time.monotonic()
    with open(base / "train.log", "wb") as log:
        try:
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=budget + 600)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.monotonic() - t0
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if not summary:
        print(
            f"seed {seed}: mqttrl train wrote no summary.json (exit {rc}); log {base / 'train.log'}:", file=sys.stderr
        )
        print((base / "train.log").read_text(errors="replace")[-3000:], file=sys.stderr)
    curve = read_curve(run_dir)
    final = None
    if final_eval and summary:
        try:
            final = evaluate_final(run_dir, episodes, seed=10**6 + 1000 * len(curve))
        except Exception as e:  # reported, not fatal: the curve is still there
            print(
                f"seed {seed}: final evaluation of the last checkpoint failed: {type(e).__name__}: {e}", file=sys.stderr
            )
        if final is not None:
            curve.append(
                {"t": summary.get("wall_s"), "training_s": None, "env_steps": summary.get("env_steps"), **final}
            )
    return {
        "seed": seed,
        "exit": rc,
        "curve": curve,
        "env_steps": summary.get("env_steps"),
        "updates": summary.get("updates"),
        "stop_reason": summary.get("stop_reason"),
        "rejected": summary.get("rejected"),
        "process_wall_s": round(wall, 1),
        "run_dir": str(run_dir),
    }


# --------------------------------------------------------------------------------------------
# Stable-Baselines3 DQN
# --------------------------------------------------------------------------------------------


def _float32_env(env_id: str):
    """The env as mqttrl makes it, observations cast to float32 (SB3 takes no bool arrays)."""
    import gymnasium as gym
    import numpy as np

    from mqttrl.envs.make import make_env

    class Float32Obs(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            s = env.observation_space
            self.observation_space = gym.spaces.Box(0.0, 1.0, s.shape, np.float32)

        def observation(self, obs):
            return np.asarray(obs, np.float32)

    return Float32Obs(make_env(env_id))


def _minatar_extractor():
    """The MinAtar paper's torso as an SB3 features extractor: conv 3x3x16, ReLU, flatten, linear 128, ReLU."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 128, channels: int = 16):
            super().__init__(observation_space, features_dim)
            h, w, c = observation_space.shape  # MinAtar: (10, 10, channels), channels last
            self.conv = torch.nn.Sequential(torch.nn.Conv2d(c, channels, 3, stride=1), torch.nn.ReLU())
            self.linear = torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.Linear(channels * (h - 2) * (w - 2), features_dim), torch.nn.ReLU()
            )

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.linear(self.conv(obs.permute(0, 3, 1, 2)))

    return MinAtarCNN


class _GreedySB3:
    """An SB3 model as an mqttrl actor for :func:`mqttrl.envs.rollout.evaluate` (greedy only)."""

    def __init__(self, model):
        self.model = model

    def act(self, obs, greedy: bool = True):
        actions, _ = self.model.predict(obs, deterministic=True)
        return actions, {}


def _sb3_model(algo: str, env, seed: int, train_freq: int, quantiles: int):
    """SB3 DQN or sb3-contrib QR-DQN with SB3_DQN's settings and the MinAtar torso: the two differ
    only in the head (one Q-value per action, or ``quantiles`` quantiles per action) and its loss."""
    h = SB3_DQN
    common = dict(
        buffer_size=h["buffer_size"],
        learning_starts=h["learning_starts"],
        batch_size=h["batch_size"],
        learning_rate=h["learning_rate"],
        train_freq=train_freq,
        gradient_steps=h["gradient_steps"],
        target_update_interval=h["target_update_interval"],
        exploration_initial_eps=h["exploration_initial_eps"],
        exploration_final_eps=h["exploration_final_eps"],
        exploration_fraction=h["exploration_steps"] / SB3_TOTAL_STEPS,
        gamma=h["gamma"],
        max_grad_norm=h["max_grad_norm"],
        seed=seed,
        device="cpu",
        verbose=0,
    )
    policy_kwargs = dict(
        features_extractor_class=_minatar_extractor(),
        features_extractor_kwargs=dict(features_dim=h["features_dim"], channels=h["conv_channels"]),
        net_arch=[],
        normalize_images=False,
        optimizer_kwargs=dict(eps=h["adam_eps"]),
    )
    if algo == "dqn":
        from stable_baselines3 import DQN

        return DQN("CnnPolicy", env, policy_kwargs=policy_kwargs, **common)
    if algo == "qrdqn":
        try:
            from sb3_contrib import QRDQN
        except ImportError:
            sys.exit("--sb3-algos qrdqn needs sb3-contrib: pip install sb3-contrib")
        return QRDQN("CnnPolicy", env, policy_kwargs={**policy_kwargs, "n_quantiles": quantiles}, **common)
    raise ValueError(f"unknown SB3 algorithm {algo!r} (dqn or qrdqn)")


def run_sb3(
    env_id: str,
    seed: int,
    budget: float,
    eval_every_s: float,
    episodes: int,
    train_freq: int,
    max_steps: int | None = None,
    algo: str = "dqn",
    eval_every_steps: int | None = None,
    quantiles: int = QRDQN_QUANTILES,
) -> dict:
    """SB3 DQN (or sb3-contrib QR-DQN: ``algo="qrdqn"``) for ``budget`` seconds of training (and at
    most ``max_steps`` env steps), evaluated every ``eval_every_s`` seconds of training (or, given
    ``eval_every_steps``, every that many env steps: curves compared by env step) and at the end."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from mqttrl.envs.rollout import evaluate

    torch.set_num_threads(1)
    env = DummyVecEnv([lambda: Monitor(_float32_env(env_id))])
    env.seed(seed)
    model = _sb3_model(algo, env, seed, train_freq, quantiles)
    greedy = _GreedySB3(model)
    make = lambda: _float32_env(env_id)  # noqa: E731
    period = eval_every_steps or eval_every_s  # the clock it is read on: env steps or training seconds
    state = {"eval_s": 0.0, "next": period, "curve": []}

    def run_eval(elapsed: float, steps: int) -> None:
        t = time.monotonic()
        returns = evaluate(greedy, make, episodes, seed=10**6 + 1000 * len(state["curve"]))
        state["eval_s"] += time.monotonic() - t
        mean = sum(returns) / len(returns)
        state["curve"].append({"t": round(elapsed, 2), "env_steps": steps, "mean": mean})
        print(f"  SB3 {algo} seed {seed}: {elapsed:6.0f}s {steps:8d} steps greedy mean {mean:6.2f}", flush=True)

    class Budget(BaseCallback):
        def _on_step(self) -> bool:
            elapsed = time.monotonic() - t0 - state["eval_s"]
            if (self.num_timesteps if eval_every_steps else elapsed) >= state["next"]:
                state["next"] += period
                run_eval(elapsed, self.num_timesteps)
            return elapsed < budget and (max_steps is None or self.num_timesteps < max_steps)

    t0 = time.monotonic()
    model.learn(total_timesteps=SB3_TOTAL_STEPS, callback=Budget())
    elapsed = time.monotonic() - t0 - state["eval_s"]
    if not state["curve"] or state["curve"][-1]["env_steps"] != model.num_timesteps:
        run_eval(elapsed, model.num_timesteps)  # the final model
    return {
        "seed": seed,
        "algo": algo,
        "curve": state["curve"],
        "env_steps": int(model.num_timesteps),
        "training_s": round(elapsed, 1),
        "eval_excluded_s": round(state["eval_s"], 1),
        "train_freq": train_freq,
        **({"n_quantiles": quantiles} if algo == "qrdqn" else {}),
    }


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def stats(run: dict, threshold: float) -> dict:
    """A run's figures from its curve: best and last greedy mean (and the env steps of the best),
    the first time the mean reached ``threshold``, env steps, evaluations, wall clock."""
    curve = run.get("curve") or []
    reached = next((c for c in curve if c["mean"] >= threshold), None)
    best = max(curve, key=lambda c: c["mean"], default=None)
    return {
        "best": best["mean"] if best else None,
        "best_env_steps": best.get("env_steps") if best else None,
        "final": curve[-1]["mean"] if curve else None,
        "first_t": reached["t"] if reached else None,
        "first_training_s": reached.get("training_s") if reached else None,
        "env_steps": run.get("env_steps"),
        "evaluations": len(curve),
        # mqttrl: the whole command; SB3: training plus its evaluations (excluded from its budget)
        "wall_s": run.get("process_wall_s")
        if "process_wall_s" in run
        else (run["training_s"] + run["eval_excluded_s"] if "training_s" in run else None),
    }


def _systems(res: dict) -> list[tuple[str, str]]:
    """(row key, name) of each system with a run in ``res``: mqttrl first, then the SB3 baselines."""
    keys = [("mqttrl", res["name"])] + list(SB3_SYSTEMS.values())
    return [(k, n) for k, n in keys if any(k in r for r in res["rows"])]


def _fmt(v, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _median_time(values: list) -> str:
    """Median time-to-threshold, a run that never reached it counting as infinitely late."""
    if not values:
        return "-"
    m = statistics.median([math.inf if v is None else v for v in values])
    return "never" if math.isinf(m) else f"{m:.0f}"


def report(results: list[dict], threshold: float) -> None:
    for res in results:
        print()
        print(
            f"{res['label']} on {res['env']} ({res['config']}), budget {res['budget']:.0f} s per seed"
            + (f", {res['env_steps']:,} env steps" if res.get("env_steps") else "")
            + f"; {res['cores']} cores, Python {res['python']}, {res['date']}"
        )
        systems = _systems(res)
        print(
            f"| seed | system | best greedy mean (at env steps) | last evaluation | first time >= {threshold:g} (s) "
            f"| env steps | evaluations | wall clock (s) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        per: dict[str, list[dict]] = {k: [] for k, _ in systems}
        for row in res["rows"]:
            for key, name in systems:
                if key not in row:
                    continue
                s = stats(row[key], threshold)
                per[key].append(s)
                first = "never" if s["first_t"] is None else f"{s['first_t']:.0f}"
                if key == "mqttrl" and s["first_training_s"] is not None:
                    first += f" (training {s['first_training_s']:.0f})"
                print(
                    f"| {row['seed']} | {name} | {_fmt(s['best'])} ({_fmt(s['best_env_steps'], ',')}) "
                    f"| {_fmt(s['final'])} | {first} | {_fmt(s['env_steps'], ',')} | {s['evaluations']} "
                    f"| {_fmt(s['wall_s'], '.0f')} |"
                )
        for key, name in systems:
            ss = per[key]
            print(
                f"| median of {len(ss)} | {name} | {_fmt(_median([s['best'] for s in ss]))} "
                f"| {_fmt(_median([s['final'] for s in ss]))} | {_median_time([s['first_t'] for s in ss])} "
                f"| {_fmt(_median([s['env_steps'] for s in ss]), ',.0f')} | - "
                f"| {_fmt(_median([s['wall_s'] for s in ss]), '.0f')} |"
            )
        print(
            "mqttrl times: the whole command's clock (start-up and the run's own evaluations included; in "
            "brackets, from the learner's first model); SB3: training time, its evaluations excluded "
            "(wall clock: training plus evaluations)"
        )


def plot_curves(series: list[tuple[str, str, list[list[dict]]]], path: Path, title: str, threshold=None) -> None:
    """One figure, two panels: greedy mean against env steps (the data each evaluated model was
    trained on: runs compared at equal data) and against wall-clock seconds. ``series``: (label,
    colour, curves), each curve a list of {"env_steps", "t", "mean"} (one per seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_clock) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for label, colour, curves in series:
        for j, curve in enumerate(c for c in curves if c):
            style = dict(color=colour, alpha=0.85, marker=".", lw=1.2, label=label if j == 0 else None)
            steps = [(c["env_steps"], c["mean"]) for c in curve if c.get("env_steps") is not None]
            if steps:
                by_steps.plot(*zip(*steps), **style)
            by_clock.plot([c["t"] for c in curve], [c["mean"] for c in curve], **style)
    by_steps.set_xlabel("env steps the evaluated model was trained on")
    by_clock.set_xlabel("wall-clock seconds (mqttrl: whole command; SB3: training, evaluation excluded)")
    by_steps.set_ylabel("greedy return, mean of the evaluation episodes")
    for ax in (by_steps, by_clock):
        if threshold is not None and math.isfinite(threshold):
            ax.axhline(threshold, color="grey", ls="--", lw=0.8)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    by_steps.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)


def plot(results: list[dict], path: Path, threshold: float) -> None:
    colours = iter(["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive"])
    baseline_colours = {"sb3": "tab:orange", "sb3_qrdqn": "tab:red"}
    series = []
    for res in results:
        for key, name in _systems(res):
            colour = baseline_colours.get(key) or next(colours)
            series.append((name, colour, [(r.get(key) or {}).get("curve") or [] for r in res["rows"]]))
    env = results[0]["env"] if results else ""
    seeds = sorted({r["seed"] for res in results for r in res["rows"]})
    title = (
        f"{env}: greedy evaluation by env step and by clock, seeds {', '.join(map(str, seeds))}, {os.cpu_count()} cores"
    )
    plot_curves(series, path, title, threshold)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--sb3`` is ``--sb3-algos dqn`` (kept for the commands already in the docs)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/minatar_breakout_dqn.toml", help="mqttrl run config")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=900.0, help="seconds per run (mqttrl: train.max_seconds)")
    p.add_argument(
        "--env-steps",
        type=int,
        help="also stop each run at this many env steps (mqttrl: train.max_env_steps; SB3: its step count)",
    )
    p.add_argument("--workers", type=int, help="override train.workers")
    p.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for mqttrl train")
    p.add_argument("--sb3", action="store_true", help="also run SB3 DQN per seed, same env and budget")
    p.add_argument(
        "--sb3-algos",
        nargs="+",
        choices=sorted(SB3_SYSTEMS),
        default=[],
        help="baselines to run per seed: dqn (SB3 DQN), qrdqn (sb3-contrib QR-DQN); same torso and settings",
    )
    p.add_argument("--no-mqttrl", action="store_true", help="run the SB3 baselines only, not mqttrl")
    p.add_argument("--sb3-eval-every-s", type=float, default=30.0, help="SB3 training seconds between evaluations")
    p.add_argument(
        "--sb3-eval-every-steps", type=int, help="SB3 env steps between evaluations (instead of --sb3-eval-every-s)"
    )
    p.add_argument("--sb3-train-freq", type=int, default=SB3_DQN["train_freq"], help="env steps per SB3 update")
    p.add_argument(
        "--qrdqn-quantiles",
        type=int,
        default=QRDQN_QUANTILES,
        help="QR-DQN quantiles per action (sb3-contrib's default: 200)",
    )
    p.add_argument("--episodes", type=int, default=20, help="greedy episodes per SB3 and final evaluation")
    p.add_argument(
        "--no-final-eval",
        action="store_true",
        help="skip the greedy evaluation of mqttrl's last checkpoint (the curve then ends at its last evaluation)",
    )
    p.add_argument("--threshold", type=float, default=10.0, help="report the first time the greedy mean >= this")
    p.add_argument("--json", help="save every figure and curve here")
    p.add_argument("--plot", help="the figure (PNG); default docs/img/<env>_<algo>.png")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--from-json", nargs="+", metavar="FILE", help="run nothing: report and plot saved results")
    args = p.parse_args(argv)
    args.sb3_algos = list(dict.fromkeys((["dqn"] if args.sb3 else []) + args.sb3_algos))
    if args.no_mqttrl and not args.sb3_algos and not args.from_json:
        p.error("--no-mqttrl runs nothing without --sb3 or --sb3-algos")
    return args


def run_seed(args: argparse.Namespace, env_id: str, seed: int, extra: list[str]) -> dict:
    """One seed's row: mqttrl (unless --no-mqttrl), then each SB3 baseline, one after the other."""
    row: dict = {"seed": seed}
    if not args.no_mqttrl:
        print(f"seed {seed}: mqttrl train {args.config} for {args.budget:.0f} s ...", flush=True)
        m = run_mqttrl(
            args.config, seed, args.budget, args.workers, extra, not args.no_final_eval, args.episodes, args.env_steps
        )
        row["mqttrl"] = m
        s = stats(m, args.threshold)
        print(
            f"seed {seed}: mqttrl best {_fmt(s['best'])} final {_fmt(s['final'])} "
            f"first>={args.threshold:g} {_fmt(s['first_t'], '.0f', 'never')} env steps {m['env_steps']} "
            f"({s['evaluations']} evaluations; run dir {m['run_dir']})",
            flush=True,
        )
    for algo in args.sb3_algos:
        key, name = SB3_SYSTEMS[algo]
        print(f"seed {seed}: {name} on {env_id} for {args.budget:.0f} s of training ...", flush=True)
        sb = run_sb3(
            env_id,
            seed,
            args.budget,
            args.sb3_eval_every_s,
            args.episodes,
            args.sb3_train_freq,
            args.env_steps,
            algo=algo,
            eval_every_steps=args.sb3_eval_every_steps,
            quantiles=args.qrdqn_quantiles,
        )
        row[key] = sb
        s = stats(sb, args.threshold)
        print(
            f"seed {seed}: {name} best {_fmt(s['best'])} final {_fmt(s['final'])} "
            f"first>={args.threshold:g} {_fmt(s['first_t'], '.0f', 'never')} env steps {sb['env_steps']} "
            f"training {sb['training_s']} s (evaluation {sb['eval_excluded_s']} s excluded)",
            flush=True,
        )
    return row


def main() -> None:
    args = parse_args()
    if args.from_json:
        results = [r for f in args.from_json for r in json.loads(Path(f).read_text())["results"]]
    else:
        cfg = tomllib.loads(Path(args.config).read_text())
        env_id = cfg.get("env", {}).get("id", "minatar/breakout")
        algo = cfg.get("algorithm", {}).get("name", "dqn")
        extra = [x for kv in args.extra for x in ("--set", kv)]
        names = ([] if args.no_mqttrl else [f"mqttrl {algo.upper()}"]) + [SB3_SYSTEMS[a][1] for a in args.sb3_algos]
        res = {
            "config": args.config,
            "env": env_id,
            "algo": algo if not args.no_mqttrl else "_".join(["sb3", *args.sb3_algos]),
            "name": f"mqttrl {algo.upper()}",
            "label": " vs ".join(names),
            "budget": args.budget,
            "env_steps": args.env_steps,
            "extra": args.extra,
            "sb3_hyperparameters": {**SB3_DQN, "train_freq": args.sb3_train_freq} if args.sb3_algos else None,
            "sb3_algos": args.sb3_algos,
            "qrdqn_quantiles": args.qrdqn_quantiles if "qrdqn" in args.sb3_algos else None,
            "sb3_eval_every": {"env_steps": args.sb3_eval_every_steps}
            if args.sb3_eval_every_steps
            else {"training_s": args.sb3_eval_every_s},
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "rows": [],
        }
        for seed in args.seeds:
            res["rows"].append(run_seed(args, env_id, seed, extra))
            if args.json:  # after every seed: a long run interrupted keeps what it measured
                Path(args.json).write_text(json.dumps({"results": [res]}, indent=2))
        results = [res]
    report(results, args.threshold)
    if not args.no_plot and results:
        env = results[0]["env"].replace("/", "_").lower()
        algos = "_".join(dict.fromkeys(r["algo"] for r in results))
        path = Path(args.plot) if args.plot else REPO / "docs" / "img" / f"{env}_{algos}.png"
        plot(results, path, args.threshold)


if __name__ == "__main__":
    main()
