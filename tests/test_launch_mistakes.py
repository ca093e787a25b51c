"""What a new user hit (issue 33): a failed launch, its exit code, a --resume with nothing to resume,
an algorithm that cannot act in the env, a damaged best model, and what a run says at its end.

The commands run as console scripts in a fresh folder (their cwd), as a user types them; the runs
they read are made in-process (tests/helpers/policy_runs.py) or written as ``mqttrl train`` writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqttrl.cli import errors
from mqttrl.policy import load_policy
from mqttrl.policy.source import newest_run_named
from mqttrl.state.best import GREEDY_EVAL, BestScore, score_file
from mqttrl.wire.episodes import EpisodeStats

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
CARTPOLE = str(ROOT / "configs" / "cartpole_dqn.toml")
PENDULUM = str(ROOT / "configs" / "pendulum_sac.toml")


def run(argv: list[str], cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "MQTTRL_TRACEBACK": "0", **env}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)


def last_line(out: subprocess.CompletedProcess) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    return out.stderr.strip().splitlines()[-1]


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run([str(BIN / "mqttrl"), "train", *args, "--no-progress"], cwd)


# ---- 1, 5: a launch that fails leaves nothing behind and starts nothing ------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((CARTPOLE, "--set", "env.id=CartPole-v9"), "unknown env 'CartPole-v9'"),
        ((CARTPOLE, "--set", "env.id=Pendulum-v1"), "algorithm 'dqn' cannot run on env 'Pendulum-v1'"),
    ],
)
def test_an_env_mistake_ends_before_a_broker_or_a_run_directory(args, says, tmp_path):
    out = train(tmp_path, *args)
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    assert says in last_line(out)
    assert not (tmp_path / "runs").exists()  # no run directory for `enjoy runs/NAME` to pick
    assert "broker" not in out.stderr  # nothing started: no "embedded mosquitto broker at ..." line


# ---- 4: an algorithm that cannot act in the env is a config error naming those that can --------------
def test_dqn_on_box_actions_names_the_algorithms_that_fit(tmp_path):
    line = last_line(out := train(tmp_path, CARTPOLE, "--set", "env.id=Pendulum-v1"))
    assert out.returncode == errors.EXIT_USAGE
    assert line.startswith("mqttrl: config error:") and "needs a Discrete action space" in line
    assert "algorithms that fit: crossq, ppo, sac" in line and "internal error" not in line


def test_another_algorithm_on_a_sac_config_names_the_space_not_a_sac_key(tmp_path):
    """``--set algorithm.name=dqn`` on a SAC config: SAC's keys are unknown to DQN, but the mistake
    that matters is DQN on Pendulum's Box actions."""
    out = train(tmp_path, PENDULUM, "--set", "algorithm.name=dqn")
    line = last_line(out)
    assert out.returncode == errors.EXIT_USAGE
    assert "needs a Discrete action space" in line and "algorithms that fit: crossq, ppo, sac" in line


def test_the_learner_refuses_a_misfit_in_one_line(tmp_path):
    argv = [str(BIN / "mqttrl-learner"), "--config", CARTPOLE, "--set", "env.id=Pendulum-v1"]
    out = run([*argv, "--run-dir", str(tmp_path / "r")], tmp_path)
    assert out.returncode == errors.EXIT_USAGE and "algorithms that fit: crossq, ppo, sac" in last_line(out)


# ---- 2: exit codes as docs/cli.md's table says -------------------------------------------------------
def test_a_misspelled_env_id_is_a_config_error_not_a_missing_package(tmp_path):
    out = train(tmp_path, CARTPOLE, "--set", "env.id=CartPole-v9")
    assert out.returncode == errors.EXIT_USAGE and "config error" in last_line(out)


def test_ctrl_c_on_mqttrl_train_exits_130_and_stops_cleanly(tmp_path):
    """Ctrl-C in a terminal reaches the whole foreground process group: the trainer, its children
    and (before the fix) the embedded broker, whose early exit made every node warn "disconnected"."""
    argv = [str(BIN / "mqttrl"), "train", CARTPOLE, "--no-progress", "--max-seconds", "120", "--run-dir", "r"]
    log = open(tmp_path / "train.out", "w")
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "workers 2/2" not in _text(tmp_path / "train.out"):
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    text = _text(tmp_path / "train.out")
    assert code == errors.EXIT_INTERRUPTED, text
    assert "stopped: interrupted" in text
    logs = "".join(_text(p) for p in (tmp_path / "r" / "logs").glob("*.log"))
    assert "reconnecting" not in text + logs  # the broker outlived the nodes that use it


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_worker_stopped_by_ctrl_c_exits_130_and_by_sigterm_0(mosquitto, tmp_path):
    codes = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        argv = [str(BIN / "mqttrl-worker"), "--run", "no-learner", "--broker", mosquitto.url]
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)  # connected, waiting for the run's config
        proc.send_signal(sig)
        codes[sig] = proc.wait(30)
    assert codes == {signal.SIGINT: errors.EXIT_INTERRUPTED, signal.SIGTERM: errors.EXIT_OK}


def test_export_without_its_extra_exits_5(tmp_path):
    from helpers.policy_runs import make_run

    model = make_run(tmp_path / "run", "dqn", "CartPole-v1", hidden=[16, 16])
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(  # as if `pip install mqttrl[export]` had not been run
        "import sys\nfor name in ('onnx', 'onnxscript', 'onnxruntime'):\n    sys.modules[name] = None\n"
    )
    pythonpath = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH", "")]))
    argv = [str(BIN / "mqttrl"), "export", str(model.root / "checkpoints"), "-o", str(tmp_path / "p.onnx")]
    out = run(argv, tmp_path, PYTHONPATH=pythonpath)
    assert out.returncode == errors.EXIT_MISSING, out.stderr
    assert "onnx" in last_line(out) and "mqttrl[export]" in last_line(out)


def test_train_help_repeats_the_documented_exit_codes():
    """`mqttrl train --help`'s table and docs/cli.md's hold the same codes, and errors.py defines them."""
    from mqttrl.cli import train as train_cli

    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("<!-- exit-codes -->") : doc.index("<!-- /exit-codes -->")]
    documented = {
        int(line.split("|")[1]) for line in table.splitlines() if line.startswith("| ") and "code" not in line
    }
    epilog = train_cli.EPILOG[train_cli.EPILOG.index("exit codes") :]
    in_help = {int(line.split()[0]) for line in epilog.splitlines()[1:] if line.strip()}
    assert in_help == documented == {v for k, v in vars(errors).items() if k.startswith("EXIT_")}


# ---- 3: --resume with nothing to resume -----------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "mqttrl-learner"])
def test_resume_without_a_checkpoint_is_refused(command, tmp_path):
    (tmp_path / "empty-run").mkdir()
    for where in ("typo-run", "empty-run"):
        if command == "train":
            out = train(tmp_path, CARTPOLE, "--run-dir", where, "--resume")
        else:
            argv = [str(BIN / "mqttrl-learner"), "--config", CARTPOLE, "--run-dir", where, "--resume"]
            out = run(argv, tmp_path)
        line = last_line(out)
        assert out.returncode == errors.EXIT_USAGE, out.stderr
        assert f"--resume: {where}" in line and "nothing to continue" in line
    assert not (tmp_path / "typo-run").exists() and not any((tmp_path / "empty-run").iterdir())


def test_resume_if_any_starts_afresh_without_a_checkpoint_and_resumes_with_one(tmp_path):
    """What the trainer's supervisor passes a restarted learner (it may have died before its first checkpoint)."""
    from mqttrl.state.run_dir import NothingToResume, claim, resumable

    with pytest.raises(NothingToResume):
        claim(tmp_path, resume=True, overwrite=False)
    assert claim(tmp_path, resume=True, overwrite=False, if_any=True) is None and not resumable(tmp_path)
    (tmp_path / "checkpoints" / "ckpt-0000000001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "ckpt-0000000001" / "meta.json").write_text("{}")
    assert resumable(tmp_path) and claim(tmp_path, resume=True, overwrite=False) is None


# ---- 1, 6: reading runs after a failed launch, and a damaged best model ----------------------------------
@pytest.fixture
def trained(tmp_path):
    """``runs/cartpole-dqn-<older>``: a checkpoint and a best model judged by a greedy evaluation."""
    from helpers.policy_runs import VERSION, make_run

    model = make_run(tmp_path / "runs" / "cartpole-dqn-20261101-100000", "dqn", "CartPole-v1", hidden=[16, 16])
    best = model.root / "best"
    best.mkdir()
    shutil.copy(model.root / "exported" / "weights.safetensors", best / "weights.safetensors")
    (best / "score.json").write_bytes(score_file(BestScore(500.0, VERSION, GREEDY_EVAL, 20)))
    return model.root


def failed_launch(runs: Path, stamp: str) -> Path:
    """What a launch that failed before any model left (before the fix: every failed launch)."""
    d = runs / f"cartpole-dqn-{stamp}"
    (d / "logs").mkdir(parents=True)
    (d / "broker").mkdir()
    shutil.copy(ROOT / "configs" / "cartpole_dqn.toml", d / "config.toml")
    (d / "config.json").write_text(json.dumps({"run": "cartpole-dqn"}))
    (d / "episodes.csv").write_text("wall_s,worker\n")
    (d / "evaluations.csv").write_text("")
    later = time.time() + 60
    os.utime(d, (later, later))
    return d


def test_a_run_name_skips_newer_runs_without_a_model(trained, tmp_path):
    failed = failed_launch(tmp_path / "runs", "20261101-110000")
    assert newest_run_named(tmp_path / "runs" / "cartpole-dqn") == trained
    policy = load_policy(tmp_path / "runs" / "cartpole-dqn")
    assert policy.source.path == trained / "best" / "weights.safetensors"
    assert failed.name in policy.source.reason and "holds none" in policy.source.reason
    out = run([str(BIN / "mqttrl"), "enjoy", "runs/cartpole-dqn", "--episodes", "1"], tmp_path)
    assert out.returncode == 0, out.stderr


def test_compare_skips_a_run_without_evaluations_with_a_line(tmp_path, capsys):
    from mqttrl import cli
    from mqttrl.trainer.record import EVAL_COLUMNS

    good = tmp_path / "runs" / "cartpole-dqn-20261101-100000"
    good.mkdir(parents=True)
    rows = [[0, 1, 1000, 10, 200.0, 1, 1, 1, 0.1, 1, 1000], [1, 2, 2000, 10, 480.0, 1, 1, 1, 0.1, 2, 2000]]
    (good / "evaluations.csv").write_text("\n".join(",".join(map(str, r)) for r in [EVAL_COLUMNS, *rows]) + "\n")
    failed = failed_launch(tmp_path / "runs", "20261101-110000")
    cli.main(["compare", str(good), str(failed), "--json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["groups"]
    assert f"skipped {failed}: no evaluations" in captured.err


def test_a_damaged_best_model_falls_back_to_the_newest_checkpoint(trained, capsys):
    (trained / "best" / "weights.safetensors").write_bytes(b"not safetensors")
    policy = load_policy(trained)
    assert policy.source.path.parent == trained / "checkpoints"
    assert policy.source.reason.startswith("the newest checkpoint: the best model does not read")
    with pytest.raises(ValueError, match="which='latest'") as refused:
        load_policy(trained, which="best")
    assert "expected a run directory" not in str(refused.value)


# ---- 7: what a run says at its end, a resumed run's count, the embedded broker, --help -------------------
def test_the_end_of_a_run_says_what_to_do_next(trained, tmp_path):
    from mqttrl.trainer.run import next_steps

    [line] = next_steps(trained)
    assert f"mqttrl enjoy {trained}" in line and "--resume" in line
    [line] = next_steps(failed_launch(tmp_path / "runs", "20261101-120000"))
    assert "no model was saved" in line


def test_a_budget_that_ends_solved_does_not_read_as_two_endings(capsys):
    from mqttrl.trainer.run import _print_summary

    summary = {
        "run": "r",
        "stop_reason": "time budget",
        "wall_s": 60.0,
        "solved": True,
        "solve_eval_mean": 480.0,
        "target_return": 475.0,
        "solve_model_version": 9,
        "time_to_solve_s": 61.0,
        "training_time_to_solve_s": 50.0,
        "env_steps_at_solve": 9000,
        "run_dir": "nowhere",
    }
    _print_summary(summary)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "run r stopped: time budget after 60s; the evaluation at its end reached the target"


def test_a_resumed_run_counts_env_steps_on_from_its_earlier_sessions(tmp_path):
    from mqttrl.config import from_dict
    from mqttrl.trainer.record import RunRecord

    (tmp_path / "summary.json").write_text(json.dumps({"env_steps": 7884}))
    record = RunRecord(from_dict({}), tmp_path)
    record.on_episode("w0", EpisodeStats.from_json({"return": 10.0, "length": 10, "env_steps": 100}))
    assert record.env_steps == 7984
    record.close()
    (tmp_path / "summary.json").unlink()  # a session killed before its summary: evaluations.csv tells
    with open(tmp_path / "evaluations.csv", "a") as f:
        f.write("30.0,12,9100,10,480.0,1,1,1,0.1,20,9050\n")
    record = RunRecord(from_dict({}), tmp_path)
    assert record.env_steps == 9100
    record.close()


def test_the_embedded_broker_is_out_of_reach_of_the_terminals_ctrl_c(tmp_path):
    from mqttrl.broker.embedded import EmbeddedBroker

    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed")
    with EmbeddedBroker("mosquitto", workdir=tmp_path) as broker:
        assert broker._proc is not None
        assert os.getpgid(broker._proc.pid) != os.getpgid(0)


def test_train_help_shows_the_default_values():
    out = run([str(BIN / "mqttrl"), "train", "--help"], ROOT)
    flat = " ".join(out.stdout.split())
    assert "(default: train.workers = 2)" in flat and "(default: train.seed = 0)" in flat


def test_the_files_the_docs_examples_write_are_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    for name in ("compare.png", "cartpole.onnx", "cartpole.pt", "policy.onnx"):
        assert name in ignored
