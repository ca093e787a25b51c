"""A run split over five hosts, as users deploy it (issue 34): network namespaces on one machine.

broker (mosquitto on the LAN), learner (no DISPLAY, the screen extra's modules unimportable, no game),
two game PCs (each its own Xvfb; its worker launches Catch itself: ``[env] launch``) and telemetry
(files). The learner waits for a game PC's env spec, then trains on both game PCs' samples; one game
PC's cable is pulled for a while and plugged back, and its worker plays on. The long version with
more faults is ``benchmarks/bench_hosts.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from helpers.run_files import episodes_by_worker, learner_updates, wait_for

from benchmarks.harness import netns
from benchmarks.harness.learner_host import QUICK_LEARNER_SETS, headless_env, node_env

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
why_not = netns.available() if sys.platform == "linux" else "network namespaces are Linux's"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(bool(why_not), reason=f"no hosts as network namespaces here: {why_not}"),
]


def test_catch_trains_across_five_hosts_and_a_game_pc_survives_a_pulled_cable(tmp_path):
    lan = netns.Lan()
    try:
        broker, learner_host, pc1, pc2, telemetry_host = (
            lan.host(n) for n in ("broker", "learner", "pc1", "pc2", "telemetry")
        )
        conf = tmp_path / "mosquitto.conf"
        conf.write_text("listener 1883 0.0.0.0\nallow_anonymous true\nmax_queued_messages 100000\n")
        broker.start(["mosquitto", "-c", str(conf)], tmp_path / "broker.log")
        url = f"mqtt://{broker.address}:1883"
        title = "catch on this pc"
        game = [sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", title, "--lives", "1"]
        sets = [
            f"env.launch={json.dumps([*game, '--ball-speed', '300'])}",
            'env.launch_env={SDL_VIDEODRIVER = "x11", SDL_AUDIODRIVER = "dummy"}',
            f"env.kwargs.window={json.dumps(title)}",
            "env.kwargs.step_s=0.03",
            *QUICK_LEARNER_SETS,
            "learner.metrics_interval_s=0.5",
        ]
        config = str(ROOT / "configs" / "screen_catch_dqn.toml")
        headless = headless_env(tmp_path)
        run_dir, telemetry_dir = tmp_path / "learner-run", tmp_path / "telemetry"
        learner_argv = [str(BIN / "mqttrl-learner"), "--config", config, "--broker", url, "--run-dir", str(run_dir)]
        learner_host.start(
            [*learner_argv, *(a for s in sets for a in ("--set", s))], tmp_path / "learner.log", headless
        )
        telemetry_host.start(
            [
                *(str(BIN / "mqttrl-telemetry"), "--run", "screen-catch", "--broker", url, "--interval", "0.5"),
                *("--storage-opt", f"files.dir={telemetry_dir}"),
            ],
            tmp_path / "telemetry.log",
            node_env(),
        )
        for pc in (pc1, pc2):
            display = pc.xvfb(tmp_path)
            worker = [str(BIN / "mqttrl-worker"), "--run", "screen-catch", "--broker", url, "--name", pc.name]
            pc.start(worker, tmp_path / f"worker-{pc.name}.log", node_env(DISPLAY=display))
        logs = sorted(tmp_path.glob("*.log"))

        def both_played() -> bool:
            counts = episodes_by_worker(telemetry_dir)
            return counts.get("pc1", 0) >= 1 and counts.get("pc2", 0) >= 1 and learner_updates(run_dir) > 0

        wait_for("both game PCs' episodes and learner updates", both_played, 240, logs)
        before = episodes_by_worker(telemetry_dir)["pc2"]
        pc2.link(up=False)  # the cable pulled for 8 s, then plugged back
        time.sleep(8)
        pc2.link(up=True)
        wait_for(
            "pc2 plays on after its cable came back",
            lambda: episodes_by_worker(telemetry_dir)["pc2"] > before,
            120,
            logs,
        )
    finally:
        lan.close()
    learner_log = (tmp_path / "learner.log").read_text()
    assert "cannot be made on this host (its workers launch the game (env.launch))" in learner_log
    for pc in ("pc1", "pc2"):
        text = (tmp_path / f"worker-{pc}.log").read_text()
        assert "started the game (pid" in text, text[-2000:]
    spec = json.loads((run_dir / "config.json").read_text())["env"]["spec"]
    assert spec["made_by"].split("@")[0] in ("worker pc1", "worker pc2")
