"""Issue 44, item 1, with real processes on a real broker: the broker lost the retained weights and
the learner resumed from an older checkpoint, so its new epoch numbers its models lower than the old
one did. The evaluator (``mqttrl evaluate``, playing) and a worker evaluating on its game
(``train.eval_on = "workers"``) keep running: both evaluate the new epoch's models at their usual
cadence, not once its versions pass the old mark, and each result is matched to the weights of its
own epoch (a listening evaluator node, as ``mqttrl train`` runs it, hands results on with them)."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from helpers.configs import resumable_dqn_toml
from helpers.e2e import start_learner, start_worker
from helpers.procs import Proc, node_env, script
from helpers.run_files import wait_for
from helpers.watch import Watcher

from mqttrl.nodes.evaluator import EvaluatorNode, Result
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN = "e2e-model-ref"


def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(resumable_dqn_toml(RUN, train={"eval_on": "workers", "eval_every_s": 2.0, "eval_episodes": 2}))
    return cfg


class Listener:
    """A listening evaluator node in a thread: every result on ``eval/#`` with the weights it was matched to."""

    def __init__(self, url: str):
        self.results: list[tuple[dict, int | None]] = []
        self.arrived: list[float] = []
        self._lock = threading.Lock()
        self.node = EvaluatorNode(BrokerSettings(url=url), RUN, 2, name="listener", on_result=self.take, play=False)
        self.node.start()
        threading.Thread(target=self.node.serve, daemon=True).start()

    def take(self, result: Result, weights, payload) -> None:
        as_dict = {**result.evaluation.to_json(), "evaluator": result.evaluator}
        with self._lock:
            self.results.append((as_dict, None if weights is None else weights.epoch))
            self.arrived.append(time.monotonic())

    def since(self, t: float) -> list[tuple[dict, int | None]]:
        """The results that arrived after ``t`` (``time.monotonic()``), epoch or none."""
        with self._lock:
            return [rw for rw, at in zip(self.results, self.arrived) if at > t]

    def of_epoch(self, epoch: int) -> list[tuple[dict, int | None]]:
        with self._lock:
            return [(r, w) for r, w in self.results if r.get("model_epoch") == epoch]


def forget_retained_weights(port: int) -> None:
    """The broker loses its retained weights (a restart without persistence does the same)."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="clear-weights")
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.publish(Topics(RUN).weights, b"", qos=1, retain=True).wait_for_publish(5)
    c.loop_stop()
    c.disconnect()


def test_a_resumed_learners_lower_versions_are_evaluated(tmp_path, mosquitto):
    cfg, run_dir = config(tmp_path), tmp_path / "run"
    watch = Watcher(mosquitto.port, RUN)
    listener = Listener(mosquitto.url)
    lrn = start_learner(tmp_path, cfg, mosquitto.url, run_dir)
    w0 = start_worker(tmp_path, mosquitto.url, RUN, "w0")
    ev = Proc(
        [script("mqttrl"), "evaluate", "--broker", mosquitto.url, "--run", RUN, "--every", "2", "--episodes", "2"],
        tmp_path / "evaluate.log",
        node_env(),
    )
    try:
        watch.wait(lambda w: (run_dir / "checkpoints" / "latest").exists(), 120, "a first checkpoint")
        time.sleep(0.5)
        old = shutil.copytree(run_dir / "checkpoints", tmp_path / "old-checkpoints")
        version_at_copy = watch.version
        watch.wait(lambda w: w.version >= version_at_copy + 15, 90, "fifteen more model versions")
        old_epoch = watch.latest["epoch"]
        # both evaluated the old epoch's models (the evaluator names itself eval-<id>)
        wait_for("w0's evaluation", lambda: {r["evaluator"] for r, _ in listener.since(0)} >= {"w0"}, 60)
        lrn.kill()
        old_mark = watch.version
        shutil.rmtree(run_dir / "checkpoints")
        shutil.copytree(old, run_dir / "checkpoints")  # the newer checkpoints are lost: resume from an old one
        forget_retained_weights(mosquitto.port)
        # the resumed learner publishes ten times less often: its versions stay under the old mark for long
        lrn = start_learner(tmp_path, cfg, mosquitto.url, run_dir, "--resume", "--set", "learner.publish_every=200")
        assert lrn.wait_for("resumed from", 60), lrn.text()[-3000:]
        resumed_at = int(re.search(r"resumed from \S+: version (\d+)", lrn.text()).group(1))
        assert resumed_at < old_mark, "the checkpoint was older than the old epoch's newest model"
        watch.wait(lambda w: w.latest.get("epoch", 0) > old_epoch, 60, "the resumed learner's metrics")
        new_epoch = watch.latest["epoch"]
        settled = time.monotonic() + 5.0  # an evaluation of the old epoch's models in flight has ended

        def both_evaluated_below_the_old_mark() -> bool:
            names = {r["evaluator"] for r, _ in listener.since(settled) if r["model_version"] < old_mark}
            return "w0" in names and any(n.startswith("eval-") for n in names)

        # by version alone both skipped the new epoch's models until they passed the old mark
        wait_for("the worker's and the evaluator's results of the new epoch", both_evaluated_below_the_old_mark, 90)
        newest_version = watch.version
    finally:
        ev.terminate()
        w0.terminate()
        lrn.terminate(60)
        listener.node.stop()
        watch.close()
    new = listener.of_epoch(new_epoch)
    # evaluated before the new epoch's versions passed the old mark (by version alone they were skipped)
    below = [r for r, _ in new if r["model_version"] < old_mark]
    assert {r["evaluator"] for r in below} >= {"w0"} and any(r["evaluator"].startswith("eval-") for r in below), (
        [(r["evaluator"], r["model_version"]) for r, _ in new],
        old_mark,
        newest_version,
    )
    # each result was matched to its own epoch's weights (where still kept)
    assert all(w == new_epoch for _, w in new if w is not None), [(r["model_version"], w) for r, w in new]
    assert any(w == new_epoch for _, w in new)
    assert "evaluated model" in w0.text()
