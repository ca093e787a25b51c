"""The mqttrl side of a comparison: the README's command, ``mqttrl train CONFIG --seed S``, one
process tree per run, so that broker start-up, process spawn and the run's own evaluations are all
inside its clock; its curve is the run's ``evaluations.csv`` (:func:`mqttrl.api.read_curve`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mqttrl.api import read_curve, read_episode_returns

from .figures import run_figures, training_figures
from .greedy import greedy_mean
from .scenario import NO_TARGET, Mqttrl, Scenario


def train_argv(side: Mqttrl, scenario: Scenario, seed: int, run_dir: Path, sets: list[str]) -> list[str]:
    """``mqttrl train`` for one seed within the scenario's budget; ``sets`` after the side's own."""
    target = scenario.target if scenario.stop_at_target else NO_TARGET  # out of reach: the whole budget
    budget = [f"train.max_seconds={scenario.seconds:g}", f"train.target_return={target:g}"]
    if scenario.env_steps:
        budget.append(f"train.max_env_steps={scenario.env_steps}")
    argv = [sys.executable, "-m", "mqttrl", "train", side.config, "--seed", str(seed), "--run-dir", str(run_dir)]
    return argv + ["--no-progress", *(x for kv in [*budget, *side.sets, *sets] for x in ("--set", kv))]


def run(side: Mqttrl, scenario: Scenario, seed: int, workdir: Path, sets: list[str], demos: Path | None) -> dict:
    """One seed of ``side``: its curve (the last checkpoint evaluated after the run when the run stopped
    short of the target without evaluating it) and figures."""
    run_dir = workdir / f"{side.name.replace(' ', '_')}-s{seed}"
    argv = train_argv(side, scenario, seed, run_dir, sets) + (["--demos", str(demos)] if demos else [])
    log = workdir / f"{run_dir.name}.log"
    with log.open("wb") as out:
        rc = subprocess.call(
            argv, stdout=out, stderr=subprocess.STDOUT, timeout=scenario.seconds + 600 if scenario.seconds else None
        )
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    if not summary:
        print(f"{side.name} seed {seed}: no summary.json (exit {rc}); log {log}", file=sys.stderr)
    curve = [list(p) for p in read_curve(run_dir / "evaluations.csv")]
    if summary and not summary["solved"] and summary.get("final_eval_mean") is None:
        last = _last_checkpoint(run_dir, side.eval_env or summary["env"], scenario)
        curve += [[summary["env_steps"], summary["wall_s"], last]] if last is not None else []
    figures = run_figures([tuple(p) for p in curve], scenario.target)
    figures.update(
        training_seconds_to_target=summary.get("training_time_to_solve_s"),
        env_steps=summary.get("env_steps"),
        updates=summary.get("updates"),
        wall_s=summary.get("wall_s"),
    )
    episodes = read_episode_returns(run_dir / "episodes.csv") if (run_dir / "episodes.csv").exists() else []
    figures.update(training_figures(episodes, figures["env_steps"], figures["wall_s"]))
    return {"seed": seed, "exit": rc, "run_dir": str(run_dir), "curve": curve, "figures": figures}


def _last_checkpoint(run_dir: Path, env_id: str, scenario: Scenario) -> float | None:
    """The greedy mean of the run's last checkpoint, as a baseline's models are evaluated (None, and
    why, when there is none to load: the curve then ends at the run's last evaluation)."""
    import numpy as np

    import mqttrl

    try:
        policy = mqttrl.load_policy(run_dir, which="latest")
    except Exception as e:  # reported, not fatal: the run's own curve stands
        print(f"{run_dir.name}: no last checkpoint to evaluate ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    try:
        return greedy_mean(lambda o: policy.predict(np.asarray(o)[None])[0], env_id, scenario.episodes)
    except Exception as e:  # a game that does not come up: the run's curve and figures are still filed
        print(f"{run_dir.name}: the last checkpoint's evaluation failed ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def record_demos(side: Mqttrl, scenario: Scenario, workdir: Path) -> Path:
    """``side.demos`` episodes of the scenario's demonstrator (a policy ``module:function``, or a run
    directory: its trained agent), recorded with ``mqttrl record`` (reset seeds from 5000: away from
    the training and evaluation seeds)."""
    import tomllib

    env = tomllib.loads(Path(side.config).read_text())["env"]["id"]
    out = workdir / f"demos-{side.demos}"
    argv = [sys.executable, "-m", "mqttrl", "record", str(out), "--env", env, "--episodes", str(side.demos)]
    if not scenario.demonstrator:
        raise SystemExit(f"{side.name}: the scenario names no demonstrator; give one with --demonstrator")
    source = "--from" if Path(scenario.demonstrator).is_dir() else "--policy"
    subprocess.run([*argv, source, scenario.demonstrator, "--seed", "5000"], check=True, capture_output=True)
    return out
