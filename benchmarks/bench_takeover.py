"""Learning from takeovers (issue 45): DQN on Catch through the screen kit with a scripted corrector
that takes the worker's game over when the agent is about to miss, for its first
``--corrected-episodes`` episodes, against the same run with none; ``--seeds`` seeds a side, the
sides interleaved in one run. Each run: env steps and seconds to a greedy mean of ``--target``
(the screen-kit benchmark's 10, stated before it), the greedy evaluations, and for the corrector the
share of each episode's steps taken over.

The corrector stands in for a person at the keyboard: it is a wrapper of the worker's env, not keys
pressed (the takeover by keys is tests/test_screen_takeover.py's), and it reports its steps as the
kit's takeover does (``info["demo_action"]``, ``info["intervention"]``), so the worker records its
action, marks the step in the batch and the learner's margin loss learns from it. It corrects only
in the worker's process (``mqttrl worker``): the evaluator's games are the greedy policy's alone.

    python -m benchmarks.bench_takeover --seeds 3 --out benchmarks/results/takeover_catch.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.bench_screen import CONFIG, TARGET, Screens, csv_rows  # noqa: E402
from benchmarks.harness.machine import REPO  # noqa: E402

ENV_ID = "benchmarks.bench_takeover:CorrectedScreen-v0"
#: the corrector steps in once the ball is this far down the field (share of the frame's height)
LOW = 0.5
#: ... and the paddle's centre is at least this many pixels (of the 32x32 frame) off the ball's
OFF = 2.0


def correction(stack: np.ndarray, action: int) -> int | None:
    """The action the corrector takes instead of ``action`` on this observation (2 stacked 32x32
    gray frames), or None: it lets the agent play unless the ball is in the lower half, the paddle
    is not under it and the agent's action does not move the paddle toward it."""
    frame = stack[-1].astype(np.int32)
    h = frame.shape[0]
    field = frame[h // 4 : h - 3]
    ys, xs = np.nonzero(field > 200)
    paddle = np.nonzero((frame[h - 3 :] > 90) & (frame[h - 3 :] < 200))[1]
    if len(xs) == 0 or len(paddle) == 0 or (h // 4 + ys.mean()) < LOW * h:
        return None
    d = xs.mean() - paddle.mean()
    if abs(d) < OFF:
        return None
    toward = 2 if d > 0 else 1
    return None if action == toward else toward


def in_worker_process(argv: list[str] = sys.argv) -> bool:
    """Whether this process is a worker node (``python -m mqttrl worker ...``, as mqttrl train starts them)."""
    return len(argv) > 1 and argv[1] == "worker"


class CorrectedScreen(gym.Wrapper):
    """The screen kit's env, corrected by :func:`correction` for its first ``corrected_episodes``
    episodes in a worker's process; ``log``: a CSV of each of its episodes' steps and steps taken over."""

    def __init__(self, corrected_episodes: int = 0, log: str = "", **kwargs):
        from mqttrl_plugins.screen import make_screen_env

        super().__init__(make_screen_env(**kwargs))
        self.corrected_episodes, self.log = corrected_episodes, log
        self.worker = in_worker_process()
        self.episodes, self.steps, self.taken = 0, 0, 0
        self.obs: np.ndarray | None = None

    def reset(self, **kwargs):
        self.obs, info = self.env.reset(**kwargs)
        self.episodes, self.steps, self.taken = self.episodes + 1, 0, 0
        return self.obs, info

    def _correcting(self) -> bool:
        return self.worker and self.episodes <= self.corrected_episodes

    def step(self, action):
        fix = correction(self.obs, int(action)) if self.obs is not None and self._correcting() else None
        self.obs, reward, terminated, truncated, info = self.env.step(action if fix is None else fix)
        self.steps += 1
        if fix is not None:
            self.taken += 1
            info = {**info, "demo_action": fix, "intervention": True}
        if (terminated or truncated) and self.log and self.worker:
            with open(self.log, "a") as f:
                f.write(f"{time.time():.3f},{self.episodes},{self.steps},{self.taken}\n")
        return self.obs, reward, terminated, truncated, info


if "CorrectedScreen-v0" not in gym.registry:
    gym.register("CorrectedScreen-v0", entry_point=CorrectedScreen)


def train(screens: Screens, args, corrected: int, seed: int, run_dir: Path):
    """One run of configs/screen_catch_dqn.toml on the corrected env (0 episodes: never corrected)."""
    import mqttrl

    log = run_dir.with_suffix(".takeovers.csv")
    result = mqttrl.train(
        str(CONFIG),
        max_seconds=args.train_seconds,
        overrides={
            "env.id": ENV_ID,
            "env.kwargs.display": screens.displays,  # the worker's game first, then the evaluator's
            "env.kwargs.corrected_episodes": corrected,
            "env.kwargs.log": str(log),
            "train.eval_on": "evaluator",
            "train.eval_episodes": args.eval_windows,
            "train.eval_every_s": args.eval_every,
            "train.target_return": args.target,
            "train.final_eval": False,
            "train.seed": seed,
        },
        run_dir=run_dir,
        progress=False,
    )
    return result, log


def run_report(result, log: Path, target: float) -> dict:
    """Env steps and seconds to the target, the evaluations, and each episode's takeover share."""
    evals = csv_rows(result.run_dir / "evaluations.csv")
    solved = next((r for r in evals if float(r["mean"]) >= target), None)
    episodes = [[int(e), int(n), int(t)] for _, e, n, t in csv.reader(log.open())] if log.exists() else []
    return {
        "run_dir": str(result.run_dir),
        "stop_reason": result.stop_reason,
        "env_steps": result.env_steps,
        "episodes": result.episodes,
        "wall_s": result.wall_s,
        "steps_to_target": int(solved["model_env_steps"]) if solved else None,
        "seconds_to_target": float(solved["wall_s"]) if solved else None,
        "evals": [[int(r["model_env_steps"]), float(r["wall_s"]), float(r["mean"])] for r in evals],
        # [episode, steps, steps taken over] of the worker's game
        "takeovers": episodes,
    }


def summary(runs: list[dict]) -> dict:
    steps = [r["steps_to_target"] for r in runs]
    reached = [s for s in steps if s is not None]
    return {
        "seeds": len(runs),
        "reached": len(reached),
        "steps_to_target": steps,
        "median_steps_to_target": statistics.median(reached) if len(reached) == len(runs) else None,
        "seconds_to_target": [r["seconds_to_target"] for r in runs],
        "taken_over_steps": sum(t for r in runs for _, _, t in r["takeovers"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds a side")
    p.add_argument("--corrected-episodes", type=int, default=10, help="the corrector's episodes, from the first")
    p.add_argument("--target", type=float, default=TARGET, help="greedy mean return that solves Catch")
    p.add_argument("--train-seconds", type=float, default=420.0, help="each run's training time budget")
    p.add_argument("--eval-windows", type=int, default=5, help="evaluator's games (episodes per evaluation)")
    p.add_argument("--eval-every", type=float, default=20.0, help="seconds between greedy evaluations")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "takeover_catch.json")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    sides = {"corrector": args.corrected_episodes, "none": 0}
    report: dict = {"command": "python -m benchmarks.bench_takeover " + " ".join(sys.argv[1:]), "sides": {}}
    report |= {"target": args.target, "corrected_episodes": args.corrected_episodes, "date": time.strftime("%F %R")}
    for seed in range(args.seeds):
        for side, corrected in sides.items():
            (work / f"{side}-{seed}").mkdir(parents=True)
            screens = Screens(work / f"{side}-{seed}", args.eval_windows)
            try:
                result, log = train(screens, args, corrected, seed, work / f"{side}-{seed}" / "run")
            finally:
                screens.stop()
            run = run_report(result, log, args.target)
            report["sides"].setdefault(side, {"runs": []})["runs"].append(run)
            print(
                f"{side} seed {seed}: {run['stop_reason']}; to target {run['steps_to_target']} env steps, "
                f"{run['seconds_to_target']} s; taken over {sum(t for *_, t in run['takeovers'])} steps",
                flush=True,
            )
            for s in report["sides"].values():
                s["summary"] = summary(s["runs"])
            args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v["summary"] for k, v in report["sides"].items()}, indent=1))


if __name__ == "__main__":
    main()
