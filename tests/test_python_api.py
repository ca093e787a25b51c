"""``mqttrl.train()``: the Python API of ``mqttrl train`` (docs/python-api.md).

A real run (embedded mosquitto, learner, worker and telemetry processes) started from a thread
that is not the main one, where no signal handler may be installed; settings checked before
anything starts; nothing left running when a run cannot start.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.procs import node_env

import mqttrl
from mqttrl.api import Result, make_config
from mqttrl.config import ConfigError, RunConfig

CONFIG = REPO / "configs" / "cartpole_dqn.toml"


def rows(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path) as f:
        return sum(1 for _ in csv.DictReader(f))


def child_processes() -> set[tuple[int, str]]:
    """(pid, command name) of this process's live children (Linux /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        if int(ppid) == os.getpid() and state != "Z":
            out.add((int(stat.parent.name), comm))
    return out


@pytest.mark.e2e
@pytest.mark.slow
def test_train_from_a_thread_trains_and_returns_a_result(tmp_path):
    """The run goes on in a worker thread (as in a notebook's background job or a thread pool); the
    caller stops it with ``stop`` once it has episodes and an evaluation, and gets a Result back."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    stop = threading.Event()
    out: dict = {}
    sigint_before = signal.getsignal(signal.SIGINT)
    children_before = child_processes()

    def job():
        try:
            out["result"] = mqttrl.train(
                str(CONFIG),
                run_dir=run_dir,
                workers=1,
                max_seconds=120,  # a safety net: the test stops it long before
                target_return=None,
                eval_every_s=2,
                eval_episodes=5,
                telemetry_storages=["files", "tensorboard"],
                overrides={"algorithm.learning_starts": 200, "env.num_envs": 2},
                progress=False,
                stop=stop,
            )
        except BaseException as e:  # handed to the test's thread
            out["error"] = e

    thread = threading.Thread(target=job, name="train-job")
    thread.start()
    deadline = time.monotonic() + 150
    while thread.is_alive() and time.monotonic() < deadline:
        if rows(run_dir / "evaluations.csv") >= 1 and rows(run_dir / "episodes.csv") >= 20:
            break
        time.sleep(0.5)
    # the main thread's handlers were never touched (installing one from this thread raises)
    assert signal.getsignal(signal.SIGINT) is sigint_before
    stop.set()
    thread.join(120)
    assert not thread.is_alive()
    assert "error" not in out, out.get("error")
    result = out["result"]
    assert isinstance(result, Result) and result.run_dir == run_dir
    assert result.stop_reason == "interrupted" and result.solved is False
    assert result.env_steps > 0 and result.episodes >= 20 and result.wall_s > 0
    assert result.best_eval_mean is not None and result.best_weights == run_dir / "best" / "weights.safetensors"
    assert result.best_weights.exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert result.summary == summary and summary["run_dir"] == str(run_dir)
    assert result.config.train.workers == 1 and result.config.algorithm.params.learning_starts == 200
    assert json.loads((run_dir / "config.json").read_text())["env"]["num_envs"] == 2
    assert Result.from_run_dir(run_dir) == result
    # telemetry's tensorboard storage wrote into the run directory; TensorBoard's own reader reads it
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"episode/return", "eval/mean", "worker/w0/env_steps_per_s"} <= tags, tags
    assert len(acc.Scalars("episode/return")) >= 1
    assert (run_dir / "telemetry" / "episode.csv").exists()  # the files storage too
    assert signal.getsignal(signal.SIGINT) is sigint_before
    assert not child_processes() - children_before  # broker, learner, worker, telemetry: all stopped


def test_settings_in_every_form_and_their_order():
    cfg = make_config(
        str(CONFIG),
        seed=3,
        max_seconds=60,
        target_return=None,
        algorithm={"lr": 0.01, "gamma": 0.9},
        env={"num_envs": 8},
        overrides={"algorithm.lr": 0.001, "learner.publish_every": 7},  # applied last
    )
    assert (cfg.train.seed, cfg.train.max_seconds, cfg.train.target_return) == (3, 60.0, None)
    assert (cfg.algorithm.params.lr, cfg.algorithm.params.gamma) == (0.001, 0.9)
    assert cfg.env.num_envs == 8 and cfg.learner.publish_every == 7
    assert cfg.algorithm.params.n_step == 3  # the file's other values stay
    cfg = make_config(algorithm="ppo", env="Acrobot-v1", run="acro", overrides=["algorithm.lr=0.0003"])
    assert (cfg.run, cfg.algorithm.name, cfg.env.id, cfg.algorithm.params.lr) == ("acro", "ppo", "Acrobot-v1", 3e-4)
    as_dict = {"run": "d", "algorithm": {"name": "dqn", "lr": 0.005}, "train": {"workers": 3}}
    cfg = make_config(as_dict, workers=1)
    assert (cfg.run, cfg.algorithm.params.lr, cfg.train.workers) == ("d", 0.005, 1)
    assert as_dict["train"] == {"workers": 3}  # the caller's dict is left alone
    again = make_config(cfg, seed=9)  # a RunConfig
    assert isinstance(again, RunConfig) and again.train.seed == 9 and again.algorithm.params.lr == 0.005
    assert make_config(REPO / "configs" / "cartpole_ppo.toml").algorithm.name == "ppo"  # a Path


@pytest.mark.parametrize(
    ("settings", "error", "says"),
    [
        ({"sed": 1}, ValueError, ["unknown setting 'sed'", "did you mean 'seed'", "max_seconds", "overrides="]),
        ({"total_timesteps": 10_000}, ValueError, ["'total_timesteps'", "max_env_steps"]),
        ({"learning_rate": 0.1}, ValueError, ["algorithm.lr"]),
        ({"overrides": {"algorithm.lrr": 0.1}}, ConfigError, ["unknown key algorithm.lrr", "lr, adam_eps"]),
        ({"overrides": {"trian.seed": 1}}, ConfigError, ["'trian'", "train"]),
        ({"learner": {"publish_evry": 5}}, ConfigError, ["unknown key learner.publish_evry", "publish_every"]),
        ({"env": 3}, ConfigError, ["env=3", "num_envs"]),
        ({"max_seconds": "soon"}, ConfigError, ["train.max_seconds='soon'", "expected a number"]),
        ({"algorithm": "nope"}, ValueError, ["unknown algorithm 'nope'", "dqn, ppo"]),
    ],
)
def test_bad_settings_fail_before_anything_starts(tmp_path, monkeypatch, settings, error, says):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as e:
        mqttrl.train(str(CONFIG), **settings)
    assert isinstance(e.value, ValueError)  # ConfigError is one: one except clause catches them all
    for phrase in says:
        assert phrase in str(e.value), (phrase, str(e.value))
    assert not (tmp_path / "runs").exists()


def test_a_run_that_cannot_start_leaves_nothing_running(tmp_path):
    """A start that fails after the broker started (per-node logins without the workers' and the
    others'): the broker is stopped again. (An env that cannot be made now fails before any broker.)"""
    from mqttrl.api import make_config
    from mqttrl.trainer.run import train

    before = child_processes()
    with pytest.raises(ValueError, match="credentials for worker"):
        train(
            make_config(None, {}),
            run_dir=tmp_path / "run",
            progress=False,
            embedded="mosquitto",
            credentials={"learner": ("learner", "pw")},
        )
    assert (tmp_path / "run" / "broker").exists()  # it did start one
    deadline = time.monotonic() + 10
    while child_processes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not child_processes() - before


def test_import_mqttrl_stays_cheap_and_exports_train():
    code = (
        "import sys, mqttrl\n"
        "heavy = [m for m in ('numpy', 'torch', 'mqttrl.api', 'mqttrl.trainer.run') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert 'train' in dir(mqttrl) and 'Result' in mqttrl.__all__\n"
        "from mqttrl import train, Result\n"
        "import mqttrl.api\n"
        "assert train is mqttrl.api.train and Result is mqttrl.api.Result\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=node_env(), timeout=120)
    assert out.returncode == 0, out.stderr


# ---- progress=False is silent; the Result has the learning curve ----------------------------
QUIET_RUN = """
import json, sys
import mqttrl
r = mqttrl.train(sys.argv[1], run_dir=sys.argv[2], workers=1, max_env_steps=3000, max_seconds=90,
                 target_return=None, eval_every_s=2, eval_episodes=3,
                 overrides={"algorithm.learning_starts": 200}, progress=False)
with open(sys.argv[3], "w") as f:
    json.dump({"curve": r.curve, "episode_returns": r.episode_returns, "env_steps": r.env_steps,
               "stop_reason": r.stop_reason}, f)
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_progress_false_prints_nothing_and_the_result_has_the_curve(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "out.json"
    p = subprocess.run(
        [sys.executable, "-c", QUIET_RUN, str(CONFIG), str(run_dir), str(out)],
        capture_output=True,
        text=True,
        env=node_env(),
        timeout=240,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr == ""  # no display, no summary, no log line
    assert "embedded" in (run_dir / "logs" / "trainer.log").read_text()  # the log lines went here
    got = json.loads(out.read_text())
    assert got["stop_reason"] in ("env step budget", "time budget")
    assert got["curve"] and all(len(point) == 3 for point in got["curve"])
    steps = [s for s, _, _ in got["curve"]]
    assert steps == sorted(steps)  # (env_steps, wall_s, mean), one per evaluation, in order
    returns = got["episode_returns"]
    assert returns and [s for s, _ in returns] == sorted(s for s, _ in returns)
    assert returns[-1][0] <= got["env_steps"] and all(r > 0 for _, r in returns)


def test_result_reads_the_curve_and_the_returns_by_env_step(tmp_path):
    from mqttrl.state.run_dir import write_resolved

    write_resolved(make_config(str(CONFIG)), tmp_path / "config.json")
    summary = {"run_dir": str(tmp_path), "solved": False, "stop_reason": "time budget", "wall_s": 9.0}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "evaluations.csv").write_text(
        "wall_s,model_version,env_steps,episodes,mean,std,min,max,eval_s,training_s\n"
        "2.5,3,100,5,20.0,1,19,21,0.1,\n5.0,7,250,5,80.5,1,79,82,0.1,4.0\n"
    )
    (tmp_path / "episodes.csv").write_text(
        "wall_s,worker,env,return,length,terminated,model_version,worker_env_steps\n"
        "1.0,w0,0,10.0,10,True,1,40\n1.1,w1,0,12.0,12,True,1,30\n1.2,w0,1,9.0,9,True,1,55\n"
    )
    r = Result.from_run_dir(tmp_path)
    assert r.curve == [(100, 2.5, 20.0), (250, 5.0, 80.5)]
    assert r.episode_returns == [(40, 10.0), (70, 12.0), (85, 9.0)]  # all workers' steps together


def test_a_run_dir_with_checkpoints_is_refused_before_anything_starts(tmp_path):
    from mqttrl.state.run_dir import RunDirInUse

    (tmp_path / "checkpoints" / "ckpt-1").mkdir(parents=True)
    with pytest.raises(RunDirInUse, match="add --resume"):
        mqttrl.train(str(CONFIG), run_dir=tmp_path, progress=False)
    assert not (tmp_path / "config.json").exists()
    with pytest.raises(RunDirInUse, match="choose one"):
        mqttrl.train(str(CONFIG), run_dir=tmp_path, resume=True, init_from=tmp_path, progress=False)


def test_the_old_name_of_write_resolved_still_writes_the_config_with_a_deprecation(tmp_path):
    import mqttrl.config

    with pytest.warns(DeprecationWarning, match="mqttrl.state.run_dir.write_resolved"):
        old = mqttrl.config.write_resolved
    old(make_config(str(CONFIG)), tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["run"] == make_config(str(CONFIG)).run
