"""The install that holds: the wheel, installed into a fresh venv without torch, runs a worker that
trains with a learner over a real mosquitto; the plain install holds only what a worker needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: what a game PC's worker needs, and all the plain install may pull in directly
#: prometheus_client (pure Python, no dependencies of its own): a worker's /metrics endpoint
WORKER_DEPENDENCIES = {
    "paho-mqtt", "numpy", "gymnasium", "pluggy", "attrs", "cattrs", "safetensors", "zstandard", "prometheus_client",
}  # fmt: skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``python -m build``: the sdist and the wheel a release would upload, in an isolated build env."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    (whl,) = dist.glob("mqttrl-*.whl")
    return whl


def test_build_makes_an_sdist_that_holds_the_packages(dist):
    import tarfile

    (sdist,) = dist.glob("mqttrl-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for required in ("pyproject.toml", "README.md", "mqttrl/__init__.py", "plugins/dqn/__init__.py"):
        assert required in names, f"{required} is not in the sdist"


def test_the_plain_install_requires_only_what_a_worker_needs(wheel):
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    required = {
        line.split(":", 1)[1].strip().split(";")[0].split("<")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert required == WORKER_DEPENDENCIES


def test_the_wheel_in_a_fresh_venv_without_torch_runs_a_worker_that_trains(tmp_path, mosquitto, wheel):
    venv = tmp_path / "gamepc"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    no_torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0  # a game PC's install: torch is not there
    worker_script = py.parent / "mqttrl-worker"

    run = "wheel-worker"
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'run = "{run}"\n[env]\nid = "CartPole-v1"\nnum_envs = 4\n[algorithm]\nname = "dqn"\nlearning_starts = 300\n'
        "[learner]\npublish_every = 20\nmetrics_interval_s = 0.5\n[train]\nworkers = 1\n"
    )
    watch = Watcher(mosquitto.port, run)
    learner = Proc(
        [script("mqttrl-learner"), "--config", str(cfg), "--broker", mosquitto.url, "--run-dir", str(tmp_path / "r")],
        tmp_path / "learner.log",
    )
    env = {k: v for k, v in node_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    worker = Proc(
        [str(worker_script), "--broker", mosquitto.url, "--run", run, "--name", "gamepc"],
        tmp_path / "worker.log",
        env=env,
    )
    try:
        watch.wait(  # or the worker died: the asserts below say so with its log
            lambda w: worker.p.poll() is not None or w.latest.get("updates", 0) > 100,
            120,
            "the learner training on the wheel-installed worker's samples",
        )
        m = watch.latest
        assert worker.p.poll() is None, worker.text()[-3000:]
        assert m.get("updates", 0) > 100, (m, worker.text()[-2000:])
        assert m["workers"]["gamepc"]["samples"] > 0 and sum(m["rejected"].values()) == 0
    finally:
        assert worker.terminate() == 0, worker.text()[-3000:]
        assert learner.terminate(60) == 0, learner.text()[-3000:]
        watch.close()

    # the learner's checkpoint plays on the game PC (mqttrl.load_policy in numpy); exporting needs torch
    enjoy = subprocess.run(
        [str(py.parent / "mqttrl"), "enjoy", str(tmp_path / "r"), "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    assert "episode 2: return" in enjoy.stdout and "mean return" in enjoy.stdout
    export = subprocess.run(
        [str(py.parent / "mqttrl"), "export", str(tmp_path / "r"), "-o", str(tmp_path / "p.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert export.returncode == 5 and export.stderr.count("\n") == 1, export.stderr[-3000:]
    assert "exporting a policy needs torch" in export.stderr and "pip install 'mqttrl[export]'" in export.stderr
