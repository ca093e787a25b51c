"""``mqttrl train``'s budget and run-dir options, one --broker rule for every command, help on
every flag, and supervisors that give up with one line (docs/cli.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.procs import node_env

from mqttrl import cli
from mqttrl.cli.common import DEFAULT_BROKER, EMBEDDED_HELP
from mqttrl.config import from_dict
from mqttrl.plugin.manager import get_registry
from mqttrl.state.run_dir import RunDirInUse
from mqttrl.trainer import run as trainer_run
from mqttrl.trainer.plan import plan_children
from mqttrl.trainer.supervisor import Child, Supervisor
from mqttrl.transport.client import BrokerSettings

CONFIG = str(REPO / "configs" / "cartpole_dqn.toml")


def config(**train):
    registry = get_registry()
    return from_dict(
        {"run": "opt", "env": {"id": "CartPole-v1"}, "train": {"workers": 1, **train}},
        lambda name: registry.algorithm(name).params,
    )


def a_finished_run(run_dir: Path) -> Path:
    (run_dir / "checkpoints" / "ckpt-00000010").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-00000010" / "meta.json").write_text("{}")  # a checkpoint, as --resume needs
    (run_dir / "episodes.csv").write_text("wall_s,worker\n1,w0\n")
    return run_dir


# ---- mqttrl train's options ------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    """mqttrl.trainer.run.train replaced: what mqttrl train hands it, and a summary to return."""
    seen: dict = {"summary": {"solved": False}}

    def fake(cfg, **kwargs):
        seen.update(cfg=cfg, **kwargs)
        return seen["summary"]

    monkeypatch.setattr(trainer_run, "train", fake)
    return seen


def exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    return e.value.code


def test_budget_flags_set_the_train_settings(captured, tmp_path):
    run_dir = str(tmp_path / "r")
    argv = ["train", CONFIG, "--max-seconds", "7.5", "--max-env-steps", "1234", "--run-dir", run_dir, "--resume"]
    assert exit_code(argv) == 3  # the config has a target; the (fake) run did not reach it
    cfg = captured["cfg"]
    assert (cfg.train.max_seconds, cfg.train.max_env_steps) == (7.5, 1234)
    assert captured["resume"] is True and captured["overwrite"] is False and captured["init_from"] is None


def test_init_from_is_handed_on_and_a_missing_one_is_refused_in_one_line(captured, tmp_path, capsys):
    model = tmp_path / "weights.safetensors"
    model.write_bytes(b"x")
    assert exit_code(["train", CONFIG, "--init-from", str(model)]) == 3
    assert captured["init_from"] == model
    captured.clear()
    assert exit_code(["train", CONFIG, "--init-from", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"mqttrl train: error: --init-from {tmp_path / 'nothing'}: no such run directory or file"
    assert "cfg" not in captured  # nothing started


def test_resume_and_init_from_contradict_each_other(capsys, tmp_path):
    assert exit_code(["train", CONFIG, "--resume", "--init-from", str(tmp_path), "--run-dir", str(tmp_path)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_failed_run_ends_in_one_line_and_exit_1(captured, capsys):
    line = "the run failed: learner exited (1) 4 times; given up (see runs/x/logs/learner.log)"
    captured["summary"] = {"solved": False, "failure": line}
    assert exit_code(["train", CONFIG]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"mqttrl: {line}"


def test_train_help_names_the_budget_defaults_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-seconds S" in out and "(default: train.max_seconds = " in out
    assert "--max-env-steps N" in out and "(default: train.max_env_steps = " in out
    assert "exit codes" in out and "3 the budget (--max-seconds, --max-env-steps) ended before the target" in out
    assert "4 the broker cannot be reached" in out


def test_a_run_dir_with_checkpoints_is_refused_before_anything_starts(tmp_path, capsys):
    run_dir = a_finished_run(tmp_path / "old")
    assert exit_code(["train", CONFIG, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run's checkpoints: add --resume" in err[0], err
    assert not (run_dir / "config.json").exists() and not (run_dir / "logs").exists()  # nothing started


def test_overwrite_moves_the_old_run_aside(tmp_path):
    run_dir = a_finished_run(tmp_path / "old")
    assert trainer_run._claim(run_dir, resume=False, overwrite=True, init_from=None) == {
        "resume": False,
        "init_from": None,
    }
    (aside,) = run_dir.glob("checkpoints.replaced-*")
    assert (aside / "ckpt-00000010").is_dir() and (aside / "episodes.csv").exists()
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "episodes.csv").exists()


def test_claim_refuses_what_cannot_work(tmp_path):
    with pytest.raises(RunDirInUse, match="need the run directory"):
        trainer_run._claim(None, resume=True, overwrite=False, init_from=None)
    with pytest.raises(FileNotFoundError, match="no such run directory or file"):
        trainer_run._claim(tmp_path, resume=False, overwrite=False, init_from=tmp_path / "none")
    assert trainer_run._claim(a_finished_run(tmp_path / "r"), resume=True, overwrite=False, init_from=None) == {
        "resume": True,
        "init_from": None,
    }


def test_the_plan_gives_the_learner_resume_or_init_from_from_its_first_start(tmp_path):
    broker = BrokerSettings(url="mqtt://h:1883")
    assert "--resume" not in plan_children(config(), tmp_path, broker).learner.argv
    resumed = plan_children(config(), tmp_path, broker, resume=True).learner
    assert resumed.first_args == ["--resume"] and "--resume" not in resumed.argv
    # a restart may find no checkpoint yet (the learner died before its first): it continues if it can
    assert resumed.restart_args == ["--resume-if-any"]
    model = tmp_path / "m.safetensors"
    learner = plan_children(config(), tmp_path, broker, init_from=model).learner
    assert learner.first_args == ["--init-from", str(model)] and "--resume" not in learner.argv
    assert learner.restart_args == ["--resume-if-any"]  # a restart resumes its own checkpoint instead
    with pytest.raises(ValueError, match="choose one"):
        plan_children(config(), tmp_path, broker, resume=True, init_from=model)


def test_first_args_are_given_to_the_first_start_only(tmp_path):
    show = [sys.executable, "-c", "import sys; print(sys.argv[1:])"]
    child = Child("c", show, tmp_path / "c.log", node_env(), restart_args=["--resume"], first_args=["--init-from", "m"])
    child.start()
    child.proc.wait(30)
    child.restart()
    child.proc.wait(30)
    child.stop()
    assert (tmp_path / "c.log").read_text().splitlines() == ["['--init-from', 'm']", "['--resume']"]


# ---- one --broker rule, help on every flag ------------------------------------------------
def parsers(p: argparse.ArgumentParser, name: str = "mqttrl"):
    """``(name, parser)`` of ``p`` and of every subcommand under it."""
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_command_defaults_to_the_local_broker_and_says_so(capsys):
    seen = {}
    for name, p in parsers(cli.build_parser()):
        for a in p._actions:
            if "--broker" in a.option_strings:
                seen[name] = a.default
                assert not a.required, name
                expected = EMBEDDED_HELP if name == "mqttrl train" else f"default: {DEFAULT_BROKER}"
                assert expected in a.help, (name, a.help)
    assert {n: d for n, d in seen.items() if n != "mqttrl train"} == dict.fromkeys(
        set(seen) - {"mqttrl train"}, DEFAULT_BROKER
    )
    assert seen["mqttrl train"] is None  # an embedded broker for the run
    assert {"mqttrl worker", "mqttrl workers", "mqttrl telemetry", "mqttrl inference", "mqttrl learner"} <= set(seen)
    assert "mqttrl broker add-run" in seen
    with pytest.raises(SystemExit):
        cli.main(["workers", "--help"])
    assert f"(default: {DEFAULT_BROKER})" in " ".join(capsys.readouterr().out.split())


def test_every_flag_of_every_command_has_help():
    missing = []
    for name, p in parsers(cli.build_parser()):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            if not a.help or a.help is argparse.SUPPRESS or not str(a.help).strip():
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    assert not missing, missing


# ---- supervisors give up with one line -------------------------------------------------------
EXITS_4 = "import sys; print('mqttrl: broker: cannot connect to 127.0.0.1:1'); sys.exit(4)"


def test_a_supervisor_whose_children_never_stay_up_is_hopeless(tmp_path):
    child = Child("w0", [sys.executable, "-c", EXITS_4], tmp_path / "w0.log", node_env())
    sup = Supervisor([child], max_backoff_s=0.05, give_up_after_s=1.0, healthy_after_s=0.5)
    sup.start()
    reason = None
    for _ in range(200):
        sup.check()
        reason = sup.hopeless()
        if reason:
            break
        __import__("time").sleep(0.05)
    sup.stop()
    assert reason is not None and child.restarts >= 1
    assert "the last, w0, exited with 4: mqttrl: broker: cannot connect to 127.0.0.1:1" in reason
    assert Supervisor([child]).hopeless() is None  # without give_up_after_s: never


def test_workers_against_a_dead_broker_give_up_with_exit_4(tmp_path):
    from mqttrl.broker.embedded import free_port

    argv = [sys.executable, "-m", "mqttrl", "workers", "--run", "r", "--processes", "1"]
    argv += ["--broker", f"mqtt://127.0.0.1:{free_port()}", "--give-up-after", "3", "--log-dir", str(tmp_path)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=node_env())
    assert p.returncode == 4, (p.stdout, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("mqttrl workers: giving up: no process stayed up") and "unreachable" in last, last
    assert "Traceback" not in p.stderr


def test_node_lines_go_to_their_file_and_the_trainer_lines_to_the_console_unless_quiet(tmp_path, caplog):
    import logging

    for quiet in (False, True):
        run_dir = tmp_path / str(quiet)
        restore = trainer_run._node_logs(run_dir, quiet=quiet)
        caplog.clear()
        logging.getLogger("mqttrl.telemetry").warning("a node line")
        logging.getLogger("mqttrl.train").warning("a trainer line")
        restore()
        console = [r.getMessage() for r in caplog.records]
        assert console == ([] if quiet else ["a trainer line"]), quiet
        assert "a node line" in (run_dir / "logs" / "telemetry.log").read_text()
        trainer_log = (run_dir / "logs" / "trainer.log").read_text()
        assert "a trainer line" in trainer_log and "a node line" not in trainer_log
