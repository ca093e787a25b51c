"""What a new user hit (issue 46): ordinary mistakes and a full disk, each one line and its code.

An env kwarg the env does not take, a seed out of range, a read-only run directory and a broker
port of 0 are refused before anything starts (exit 2); a disk that fills during a run ends it with
exit 6 and one line saying what was kept, the run directory still read by ``enjoy``, ``compare``
and ``--resume``; ``enjoy --video`` without moviepy is 5; ``mqttrl-telemetry`` on Ctrl-C is 130.

The file system cases run against real file systems where this process may make them: a small or
read-only tmpfs needs root (``mount``), so those tests are skipped elsewhere; what they check that
needs no mount (the atomic writer's clean-up, the error mapping) runs everywhere, with the OSError
raised by a stand-in.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from mqttrl.cli import errors
from mqttrl.state import atomic

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
CARTPOLE = str(ROOT / "configs" / "cartpole_dqn.toml")


def run(argv: list[str], cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "MQTTRL_TRACEBACK": "0", **env}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)


def last_line(out: subprocess.CompletedProcess) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    return out.stderr.strip().splitlines()[-1]


def train(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run([str(BIN / "mqttrl"), "train", CARTPOLE, *args, "--no-progress"], cwd, timeout)


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size, ro=False)``: a fresh tmpfs mounted under tmp_path (root only; skipped elsewhere)."""
    mounted = []

    def mount(size: str, ro: bool = False) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        opts = f"size={size}" + (",ro" if ro else "")
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


# ---- env.kwargs the env does not take ------------------------------------------------------------------
def test_an_env_kwarg_the_env_does_not_take_is_a_config_error_naming_what_it_takes(tmp_path):
    out = train(tmp_path, "--set", "env.kwargs.gravity=1", "--run-dir", "r")
    line = last_line(out)
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    assert line.startswith("mqttrl: config error:") and "internal error" not in line
    assert "'CartPole-v1'" in line and "'gravity'" in line and "sutton_barto_reward, render_mode" in line
    assert not (tmp_path / "r").exists() and "broker" not in out.stderr  # refused before anything started


def test_a_plugin_env_that_takes_any_kwargs_still_names_the_kwarg():
    from mqttrl.envs.make import EnvKwargError, make_env

    pytest.importorskip("minatar")
    with pytest.raises(EnvKwargError, match=r"env 'minatar/breakout' .*takes no argument 'foo' \(env.kwargs.foo\)"):
        make_env("minatar/breakout", {"foo": 1})


def test_a_type_error_about_an_argument_the_user_did_not_give_stays_a_bug():
    """An env whose own code calls something with a wrong keyword: not the config's mistake."""
    from mqttrl.envs.make import make_env

    def broken_env(size: int = 1):
        raise TypeError("helper() got an unexpected keyword argument 'colour'")

    gym.register(id="MqttrlBrokenKwargs-v0", entry_point=broken_env)
    try:
        with pytest.raises(TypeError, match="colour") as raised:
            make_env("MqttrlBrokenKwargs-v0", {"size": 2})
        assert type(raised.value) is TypeError
    finally:
        del gym.registry["MqttrlBrokenKwargs-v0"]


# ---- the seed ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_out_of_range_is_refused_at_once(seed, tmp_path):
    t0 = time.monotonic()
    out = train(tmp_path, f"--seed={seed}", "--run-dir", "r")
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    assert f"train.seed={seed}: must be a whole number from 0 to 4294967295" in last_line(out)
    assert not (tmp_path / "r").exists() and time.monotonic() - t0 < 60  # no learner started, none restarted


def test_the_seed_range_is_what_numpy_and_torch_take():
    import numpy as np

    from mqttrl.cli.common import load
    from mqttrl.config import ConfigError
    from mqttrl.config.settings import SEED_MAX
    from mqttrl.state.rng import seed_everything

    assert load(CARTPOLE, [f"train.seed={SEED_MAX}"]).train.seed == SEED_MAX
    seed_everything(SEED_MAX)
    np.random.default_rng(SEED_MAX * 1000 + 97)  # a worker's env seeds: train.seed * 1000 + index * 97 + i
    with pytest.raises(ConfigError, match="train.seed=-1"):
        load(CARTPOLE, ["train.seed=-1"])
    with pytest.raises(ValueError):  # what the learner crashed on, four times, before
        np.random.default_rng(-1)


# ---- a run directory that cannot be written ---------------------------------------------------------------
def test_a_read_only_run_directory_is_refused_before_anything_starts(tmpfs, tmp_path):
    ro = tmpfs("1m", ro=True)
    for run_dir in (ro, ro / "run"):
        out = train(tmp_path, "--run-dir", str(run_dir))
        line = last_line(out)
        assert out.returncode == errors.EXIT_USAGE, out.stderr
        assert f"--run-dir {run_dir}: cannot write there" in line and "Read-only file system" in line
        assert "broker" not in out.stderr


def test_the_default_run_directory_in_a_read_only_folder_is_refused(tmpfs):
    ro = tmpfs("1m", ro=True)
    out = train(ro)
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    assert "the default run directory" in last_line(out) and "Read-only file system" in last_line(out)


def test_a_run_directory_under_a_file_or_not_ours_is_refused(tmp_path):
    from mqttrl.state.run_dir import RunDirNotWritable, check_writable

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(RunDirNotWritable, match="is a file, not a directory"):
        check_writable(tmp_path / "a-file" / "run")
    if os.geteuid() != 0:  # root writes through any mode: the read-only tmpfs above is its case
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(RunDirNotWritable, match="Permission denied"):
            check_writable(locked / "run")


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_path_the_user_cannot_write_is_a_usage_error_not_a_bug(code):
    line, exit_code = errors.describe(OSError(code, os.strerror(code), "/srv/runs/x"))
    assert exit_code == errors.EXIT_USAGE and "cannot use /srv/runs/x" in line


# ---- a full disk --------------------------------------------------------------------------------------------
def test_the_full_disk_code_is_documented_and_the_same_everywhere():
    assert errors.EXIT_DISK_FULL == atomic.EXIT_DISK_FULL == 6
    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("<!-- exit-codes -->") : doc.index("<!-- /exit-codes -->")]
    assert "| 6 | the disk" in table


def test_a_full_disk_is_its_own_code_however_it_is_worded():
    plain = OSError(errno.ENOSPC, "No space left on device", "/runs/x/summary.json")
    line, code = errors.describe(plain)
    assert code == errors.EXIT_DISK_FULL and "the disk is full writing /runs/x/summary.json" in line

    class SafetensorError(Exception):  # safetensors' own error, not an OSError
        pass

    wrapped = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert errors.describe(wrapped)[1] == errors.EXIT_DISK_FULL
    assert errors.describe(atomic.DiskFull("the disk is full: kept: x")) == (
        "the disk is full: kept: x",
        errors.EXIT_DISK_FULL,
    )
    assert errors.describe(OSError(errno.EIO, "I/O error"))[1] == 0  # anything else is still a bug


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text('{"old": true}')

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as raised:
        atomic.write_file_atomically(target, json.dumps({"new": "x" * 1000}))
    assert atomic.is_disk_full(raised.value)
    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_on_a_full_tmpfs_the_atomic_writer_and_the_csv_log_keep_whole_files(tmpfs):
    from mqttrl.trainer.record import CsvLog

    disk = tmpfs("64k")
    summary = disk / "summary.json"
    atomic.write_file_atomically(summary, '{"old": true}')
    log = CsvLog(disk / "episodes.csv", ["a", "b"])
    log.writerow([1, 2])
    log.flush()
    with pytest.raises(OSError) as raised:
        atomic.write_file_atomically(summary, "x" * 200_000)
    assert atomic.is_disk_full(raised.value) and json.loads(summary.read_text()) == {"old": True}
    for i in range(20_000):  # far more rows than fit
        log.writerow([i, "y" * 20])
    log.flush()
    assert log.full
    with open(disk / "episodes.csv", newline="") as f:
        assert list(csv.reader(f)) == [["a", "b"], ["1", "2"]]  # whole rows: the refused flush cut back
    assert sorted(p.name for p in disk.iterdir()) == ["episodes.csv", "summary.json"]


def test_a_child_that_exits_with_a_final_code_is_given_up_at_once(tmp_path):
    from mqttrl.trainer.supervisor import Child, Supervisor

    child = Child("learner", [sys.executable, "-c", "raise SystemExit(6)"], tmp_path / "c.log", max_restarts=3)
    sup = Supervisor([child], final_codes=(atomic.EXIT_DISK_FULL,))
    sup.start()
    child.proc.wait(30)
    assert sup.check() == [] and sup.given_up == [child] and child.restarts == 0


def test_a_disk_that_fills_during_mqttrl_train_ends_it_in_one_line_keeping_a_readable_run(tmpfs, tmp_path):
    """The real thing: a run directory on a 900 KiB tmpfs fills within seconds (a DQN checkpoint is
    half of it). One line, exit 6, no traceback; ``summary.json`` whole; the best model plays."""
    from mqttrl.policy import load_policy

    run_dir = tmpfs("900k") / "run"
    # an evaluation a second: the disk fills in about 8 s, before the default 10 s would give one
    evals = ("--set", "train.eval_every_s=1")
    out = train(tmp_path, "--run-dir", str(run_dir), "--max-seconds", "90", "--set", "train.target_return=1000", *evals)
    line = last_line(out)
    assert out.returncode == errors.EXIT_DISK_FULL, out.stdout + out.stderr
    assert "the disk is full" in line and "kept:" in line and "newest intact checkpoint" in line and "--resume" in line
    assert "internal error" not in out.stderr and "Logging error" not in out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "disk full" and "kept:" in summary["failure"]
    for name in ("evaluations.csv", "episodes.csv"):
        with open(run_dir / name, newline="") as f:
            rows = list(csv.reader(f))
        assert len({len(r) for r in rows}) == 1, name  # every row whole
    assert not [p for p in run_dir.rglob(".tmp-*")]  # no temporary file left to fill the disk
    policy = load_policy(run_dir)
    assert policy.algorithm == "dqn"
    compare = run([str(BIN / "mqttrl"), "compare", str(run_dir)], tmp_path)
    assert compare.returncode == 0, compare.stderr


# ---- enjoy --video without moviepy; telemetry on Ctrl-C -----------------------------------------------------
def test_enjoy_video_without_moviepy_exits_5_naming_the_extra(tmp_path):
    from helpers.policy_runs import make_run

    model = make_run(tmp_path / "run", "dqn", "CartPole-v1", hidden=[16, 16])
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import sys\nsys.modules['moviepy'] = None\n")
    pythonpath = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH", "")]))
    argv = [str(BIN / "mqttrl"), "enjoy", str(model.root), "--episodes", "1", "--video", str(tmp_path / "v")]
    out = run(argv, tmp_path, PYTHONPATH=pythonpath)
    assert out.returncode == errors.EXIT_MISSING, out.stderr
    assert "moviepy" in last_line(out) and "mqttrl[video]" in last_line(out)


def test_telemetry_stopped_by_ctrl_c_exits_130_and_by_sigterm_0(mosquitto, tmp_path):
    codes = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        log = tmp_path / f"telemetry-{sig.name}.log"
        argv = [str(BIN / "mqttrl-telemetry"), "--run", "no-learner", "--broker", mosquitto.url]
        with open(log, "w") as err:
            proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "telemetry for run" not in log.read_text():
                time.sleep(0.1)
            proc.send_signal(sig)
            codes[sig] = proc.wait(30)
        assert "Traceback" not in log.read_text()
    assert codes == {signal.SIGINT: errors.EXIT_INTERRUPTED, signal.SIGTERM: errors.EXIT_OK}


# ---- broker ports ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["mqtt://127.0.0.1:0", "127.0.0.1:0", "mqtt://127.0.0.1:65536", "mqtt://a:1,mqtt://b:0"]
)
def test_a_broker_port_outside_1_to_65535_is_refused_in_one_line(url, tmp_path):
    out = run([str(BIN / "mqttrl"), "status", "--run", "r", "--once", "0.1", "--broker", url], tmp_path)
    assert out.returncode == errors.EXIT_USAGE, out.stderr
    port = url.rpartition(":")[2]
    assert f"port {port}: a port is 1 to 65535" in last_line(out)


def test_the_port_rule_holds_wherever_broker_urls_are_parsed():
    from mqttrl.transport.client import BrokerSettings

    with pytest.raises(ValueError, match="port 0: a port is 1 to 65535"):
        BrokerSettings(url="mqtt://127.0.0.1:0").port  # the Python API's path, not argparse's
    assert BrokerSettings(url="mqtt://h:1").port == 1 and BrokerSettings(url="mqtt://h:65535").port == 65535
    assert BrokerSettings(url="mqtt://h").port == 1883
