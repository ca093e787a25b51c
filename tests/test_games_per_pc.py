"""Several games on one game PC from one command (issue 34): ``{index}`` and ``{worker}`` in ``[env]``.

``mqttrl workers --processes N`` starts N workers; each fills the placeholders in ``[env] launch*``
and the string values of ``[env.kwargs]`` with its own index and name (``mqttrl.envs.launch.for_worker``),
so one config gives each game its own display, window title, port or save folder. The unit tests
hold the substitution with plain configs; the end-to-end test runs two Catch games, each on its own
X display started by its worker (``xvfb-run -n``), from one ``mqttrl workers`` command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.run_files import episodes_by_worker, learner_updates, wait_for

from benchmarks.harness.learner_host import QUICK_LEARNER_SETS, headless_env, node_env
from mqttrl.config import from_dict
from mqttrl.config.settings import ConfigError
from mqttrl.envs.launch import LaunchSettings, for_worker

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent


def test_each_worker_fills_in_its_own_index_and_name():
    env = from_dict(
        {
            "env": {
                "id": "screen",
                "num_envs": 1,
                "launch": ["xvfb-run", "-n", "5{index}", "game", "--title", "catch {worker}", "--json={}"],
                "launch_cwd": "saves/{worker}",
                "launch_env": {"GAME_PORT": "70{index}", "OTHER": 3},
                "kwargs": {"window": "catch {worker}", "display": ":5{index}", "keys": [["{index}"]], "size": 32},
            }
        }
    ).env
    mine = for_worker(env, "pc-1", 1)
    assert mine.launch == ["xvfb-run", "-n", "51", "game", "--title", "catch pc-1", "--json={}"]
    assert mine.launch_cwd == "saves/pc-1" and mine.launch_env == {"GAME_PORT": "701", "OTHER": 3}
    assert mine.kwargs == {"window": "catch pc-1", "display": ":51", "keys": [["1"]], "size": 32}
    assert LaunchSettings.of(mine).command[:3] == ("xvfb-run", "-n", "51")
    # the run's config is left as it was: each worker fills in its own
    assert env.kwargs["display"] == ":5{index}" and for_worker(env, "pc-0", 0).kwargs["display"] == ":50"


def test_a_config_without_placeholders_is_the_same_object():
    env = from_dict({"env": {"id": "CartPole-v1", "kwargs": {"render_mode": "{rgb}"}}}).env
    assert for_worker(env, "w0", None) is env  # other braces are not placeholders


def test_index_without_an_index_is_one_line():
    env = from_dict({"env": {"num_envs": 1, "launch": ["game", "--port", "70{index}"]}}).env
    with pytest.raises(ConfigError, match=r"use \{index\}: start each worker of this game PC with --index N"):
        for_worker(env, "pc", None)
    assert for_worker(from_dict({"env": {"kwargs": {"w": "{worker}"}}}).env, "pc", None).kwargs == {"w": "pc"}


def _free_display_base() -> int:
    """A display-number prefix D such that :D0 and :D1 are free."""
    for base in range(57, 99):
        if not any(
            Path(f"/tmp/.X11-unix/X{base}{i}").exists() or Path(f"/tmp/.X{base}{i}-lock").exists() for i in (0, 1)
        ):
            return base
    pytest.skip("no free X display numbers :570-:991")


@pytest.mark.e2e
def test_two_games_on_one_pc_each_on_its_own_display_from_one_command(mosquitto, tmp_path):
    """``mqttrl workers --processes 2``: each worker starts its own Catch on its own X display
    (``xvfb-run -n D{index}``, ``display = ":D{index}"``, window ``catch {worker}``), both play and
    the learner (headless, no screen extra) trains on both; stopping the command stops both games."""
    base = _free_display_base()
    game = [
        # -ac: the worker, which has not xvfb-run's cookie, may read the window and send keys
        *("xvfb-run", "-n", f"{base}{{index}}", "-s", "-ac -screen 0 320x240x24"),
        *(sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", "catch {worker}"),
        *("--lives", "1", "--ball-speed", "300"),
    ]
    sets = [
        f"env.launch={json.dumps(game)}",
        'env.launch_env={SDL_VIDEODRIVER = "x11", SDL_AUDIODRIVER = "dummy"}',
        'env.kwargs.window="catch {worker}"',
        f'env.kwargs.display=":{base}{{index}}"',
        "env.kwargs.step_s=0.03",
        *QUICK_LEARNER_SETS,
        "learner.metrics_interval_s=0.5",
    ]
    set_args = [a for s in sets for a in ("--set", s)]
    config = str(ROOT / "configs" / "screen_catch_dqn.toml")
    run_dir, telemetry_dir, worker_logs = tmp_path / "run", tmp_path / "telemetry", tmp_path / "worker-logs"
    procs, logs = [], []

    def start(name: str, argv: list[str], env: dict) -> subprocess.Popen:
        log = tmp_path / f"{name}.log"
        logs.append(log)
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))
        return procs[-1]

    url = mosquitto.url
    start(
        "learner",
        [str(BIN / "mqttrl-learner"), "--config", config, "--broker", url, "--run-dir", str(run_dir), *set_args],
        headless_env(tmp_path),
    )
    start(
        "telemetry",
        [
            str(BIN / "mqttrl-telemetry"),
            "--run",
            "screen-catch",
            "--broker",
            url,
            "--interval",
            "0.5",
            "--storage-opt",
            f"files.dir={telemetry_dir}",
        ],
        node_env(),
    )
    # the game PC: one command, two games; no DISPLAY of its own: each worker's display is its game's
    workers = start(
        "workers",
        [
            str(BIN / "mqttrl"),
            "workers",
            "--run",
            "screen-catch",
            "--processes",
            "2",
            "--name-prefix",
            "pc",
            "--log-dir",
            str(worker_logs),
            "--broker",
            url,
        ],
        node_env(),
    )
    try:
        wait_for(
            "both games' episodes and learner updates",
            lambda: (
                min(episodes_by_worker(telemetry_dir).get(w, 0) for w in ("pc-0", "pc-1")) >= 1
                and learner_updates(run_dir) > 0
            ),
            240,
            [*logs, worker_logs / "pc-0.log", worker_logs / "pc-1.log"],
        )
        workers.send_signal(signal.SIGTERM)
        assert workers.wait(60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(90)  # mqttrl workers stops its workers (each up to 30 s), they stop their games
            except subprocess.TimeoutExpired:
                p.kill()
    game_pids = []
    for i in (0, 1):
        text = (worker_logs / f"pc-{i}.log").read_text()
        started = re.search(r"started the game \(pid (\d+)\): (.*)", text)
        assert started, text[-2000:]
        assert f"xvfb-run -n {base}{i} " in started.group(2) and f"--title 'catch pc-{i}'" in started.group(2)
        game_pids.append(int(started.group(1)))
    spec = json.loads((run_dir / "config.json").read_text())["env"]
    assert spec["kwargs"]["display"] == f":{base}{{index}}"  # the run keeps the placeholders
    for pid in game_pids:  # the command's stop stopped both games (and their X servers)
        deadline = time.monotonic() + 15
        while _alive(pid):
            assert time.monotonic() < deadline, f"game {pid} outlived its worker"
            time.sleep(0.2)
    assert not any(Path(f"/tmp/.X11-unix/X{base}{i}").exists() for i in (0, 1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"
