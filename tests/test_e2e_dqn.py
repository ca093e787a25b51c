"""End to end with real mosquitto and the real console scripts: learner + workers as processes."""

from __future__ import annotations

import functools
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from helpers.configs import write_config
from helpers.e2e import start_learner, start_worker
from helpers.watch import Watcher

from mqttrl.transport.topics import Topics
from mqttrl.wire import encode_batch, encode_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_learner_and_two_workers_learn_cartpole(tmp_path, mosquitto):
    """Separate processes on a real broker: the policy improves well beyond random (~22)."""
    run = "e2e-learn"
    cfg = write_config(tmp_path, run)
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    workers = [start_worker(tmp_path, mosquitto.url, run, f"w{i}", i) for i in range(2)]
    try:

        def improving(w):
            eps = w.episodes[-40:]
            return len(eps) == 40 and np.mean([e["return"] for e in eps]) > 150

        # and more than 10 models out (with the warm-up hold a run can solve on its 10th)
        watch.wait(
            lambda w: improving(w) and len(set(w.weights_versions)) > 10,
            240,
            "a 40-episode mean return above 150 and 11 models",
        )
        m = watch.latest
        assert m["updates"] > 500
        assert m["workers_online"] == 2
        assert sum(m["rejected"].values()) == 0, m["rejected"]
        assert m["missing_batches"] == 0
        versions = watch.weights_versions
        assert versions == sorted(versions) and len(set(versions)) > 10
    finally:
        for w in workers:
            assert w.terminate() == 0, w.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()
    assert (tmp_path / "run" / "config.json").exists()
    assert (tmp_path / "run" / "checkpoints" / "latest").exists()


def test_late_worker_gets_current_weights_and_killed_worker_is_noticed(tmp_path, mosquitto):
    run = "e2e-late"
    cfg = write_config(tmp_path, run)
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    w0 = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    w1 = None
    try:
        watch.wait(lambda w: w.version >= 8, 120, "model version 8")
        version_at_join = watch.version
        w1 = start_worker(tmp_path, mosquitto.url, run, "late", 1)
        watch.wait(lambda w: "late" in w.first_batch, 60, "first samples of the late worker")
        # its very first batch was produced with the model that was current when it joined (or newer)
        assert watch.first_batch["late"]["model_version"] >= version_at_join

        # kill w0 hard: no clean offline message, the learner must notice by itself
        w0.kill()
        killed_at = time.monotonic()
        watch.wait(lambda w: w.latest["workers"]["w0"]["online"] is False, 30, "w0 marked offline in metrics")
        noticed_after = time.monotonic() - killed_at
        updates_then = watch.latest["updates"]
        watch.wait(lambda w: w.latest["updates"] > updates_then + 100, 60, "training to go on without w0")
        assert watch.latest["workers"]["late"]["online"] is True
        assert noticed_after < 30
    finally:
        if w1:
            w1.terminate()
        learner.terminate(60)
        watch.close()


def test_learner_sigkill_resume(tmp_path, mosquitto):
    """SIGKILL the learner, restart with --resume: versions never go back; the worker idles while
    the learner is away (what it made would be stale when it arrived) and goes on after; what was
    in flight at the kill arrives (persistent session), nothing is skipped."""
    run = "e2e-resume"
    cfg = write_config(tmp_path, run)
    run_dir = tmp_path / "run"
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, run_dir)
    w0 = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: w.latest.get("updates", 0) >= 700, 180, "700 updates (a few checkpoints)")
        learner.kill()
        version_before = watch.version
        ckpt = (run_dir / "checkpoints" / "latest").read_text()
        watch.wait(lambda w: w.heartbeats["w0"].get("idle") == "learner_offline", 15, "the worker idling")
        steps_idle = watch.heartbeats["w0"]["env_steps"]
        time.sleep(2)
        hb = watch.heartbeats["w0"]
        assert hb["env_steps"] == steps_idle and hb["paused_s"] > 1.0, hb  # no experience made for nobody
        seq_while_down = hb["seq"]  # the next batch's number
        n_metrics = len(watch.metrics)
        learner = start_learner(tmp_path, cfg, mosquitto.url, run_dir, "--resume")
        assert learner.wait_for("resumed from", 60), learner.text()[-3000:]
        assert ckpt in learner.text()
        watch.wait(
            lambda w: len(w.metrics) > n_metrics + 4 and w.latest["workers"]["w0"]["first_seq"] >= 0,
            60,
            "metrics after restart",
        )
        m = watch.latest
        # the resumed learner's first batch from w0 was in flight at the kill, or the next one: none skipped
        assert m["workers"]["w0"]["first_seq"] <= seq_while_down
        assert watch.version > version_before
        versions = watch.weights_versions
        assert versions == sorted(versions), "model version went backwards"
        updates_then = m["updates"]
        watch.wait(lambda w: w.latest["updates"] > updates_then + 50, 60, "training after resume")
        assert w0.p.poll() is None, "worker died during the learner outage"
    finally:
        w0.terminate()
        learner.terminate(60)
        watch.close()


def _announce(c: mqtt.Client, topics: Topics, worker: str) -> None:
    c.publish(
        topics.worker_state(worker), encode_json({"status": "online", "worker": worker}), qos=1, retain=True
    ).wait_for_publish(5)


def _zstd_bomb(batch: bytes) -> bytes:
    """``batch`` with its array data swapped for a zstd frame of 1 GiB of zeros (~32 KiB; the
    header still declares the batch's real size): the learner must refuse it unallocated."""
    import json

    from mqttrl.wire.samples import _PREFIX, _align

    _, proto, hlen = _PREFIX.unpack_from(batch, 0)
    header = json.loads(batch[_PREFIX.size : _PREFIX.size + hlen])
    start = _align(_PREFIX.size + hlen)
    header["codec"], header["raw_size"] = "zstd", len(batch) - start
    hbytes = json.dumps(header).encode()
    out = bytearray(_align(_PREFIX.size + len(hbytes)))
    _PREFIX.pack_into(out, 0, batch[:4], proto, len(hbytes))
    out[_PREFIX.size : _PREFIX.size + len(hbytes)] = hbytes
    return bytes(out) + _zeros_zstd()


@functools.cache
def _zeros_zstd() -> bytes:
    """1 GiB of zeros as one zstd frame, made in 1 MiB pieces (0.2 s: made before it is timed)."""
    import zstandard

    c = zstandard.ZstdCompressor(level=1).compressobj(size=1 << 30)
    return b"".join([c.compress(bytes(1 << 20)) for _ in range(1024)] + [c.flush()])


def _batch(run, worker, seq, version, n=8, **changes):
    arrays = {
        "obs": np.zeros((n, 4), np.float32),
        "action": np.zeros(n, np.int64),
        "reward": np.ones(n, np.float32),
        "next_obs": np.zeros((n, 4), np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }
    arrays.update(changes)
    return encode_batch(run, worker, seq, version, arrays)


def test_bad_input_is_rejected_by_reason_and_training_goes_on(tmp_path, mosquitto):
    run = "e2e-bad"
    cfg = write_config(tmp_path, run, max_mb=0.05)
    # staleness is in seconds since a version was replaced: a short window, waited out below
    cfg.write_text(cfg.read_text().replace("[learner]\n", "[learner]\nmax_staleness_s = 3.0\n"))
    topics = Topics(run)
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    w0 = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    evil = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="evil", protocol=mqtt.MQTTv5)
    evil.connect("127.0.0.1", mosquitto.port)
    evil.loop_start()
    try:
        watch.wait(lambda w: w.version >= 6 and w.latest.get("updates", 0) > 50, 120, "training under way")
        _announce(evil, topics, "evil")
        _zeros_zstd()  # the bomb's frame, made now: the batches below must not go stale while it is
        time.sleep(3.5)  # version 0 was replaced (by 1, before 6) more than max_staleness_s ago
        v = watch.version
        good = _batch(run, "evil", 0, v)
        header_end = good.index(b"}]}") + 3
        sends = [
            ("garbage", b"\x00\xffnot a batch at all" * 10),
            ("truncated", good[: header_end + 20]),
            ("protocol_version", good[:4] + bytes([99]) + good[5:]),
            ("dtype", _batch(run, "evil", 1, v, obs=np.zeros((8, 4), np.float64))),
            ("shape", _batch(run, "evil", 2, v, obs=np.zeros((8, 5), np.float32))),
            ("non_finite", _batch(run, "evil", 3, v, reward=np.array([np.nan] * 8, np.float32))),
            ("non_finite", _batch(run, "evil", 4, v, next_obs=np.full((8, 4), np.inf, np.float32))),
            ("oversize", _batch(run, "evil", 5, v, n=4000)),
            ("stale_version", _batch(run, "evil", 6, 0)),
            ("out_of_range", _batch(run, "evil", 7, v, action=np.full(8, 7, np.int64))),
            ("missing_field", encode_batch(run, "evil", 8, v, {"obs": np.zeros((8, 4), np.float32)})),
            ("decompression_bomb", _zstd_bomb(_batch(run, "evil", 9, v))),
        ]
        for _, payload in sends:
            evil.publish(topics.samples("evil"), payload, qos=1).wait_for_publish(5)
        # a well-formed batch from a sender that never announced itself
        evil.publish(topics.samples("ghost"), _batch(run, "ghost", 0, v), qos=1).wait_for_publish(5)
        expected: dict[str, int] = {}
        for reason, _ in sends:
            expected[reason] = expected.get(reason, 0) + 1
        expected["unknown_sender"] = 1

        def all_counted(w):
            rej = w.latest["rejected"]
            return all(rej.get(k, 0) >= n for k, n in expected.items())

        watch.wait(all_counted, 30, f"rejections {expected}")
        rejected = watch.latest["rejected"]
        for k, n in expected.items():
            assert rejected[k] == n, (k, rejected)
        # one good batch from the announced sender is accepted (bad ones did not poison it)
        samples_before = watch.latest["workers"]["evil"]["samples"]
        evil.publish(topics.samples("evil"), _batch(run, "evil", 20, watch.version), qos=1).wait_for_publish(5)
        watch.wait(lambda w: w.latest["workers"]["evil"]["samples"] == samples_before + 8, 20, "good batch accepted")
        updates_then = watch.latest["updates"]
        watch.wait(lambda w: w.latest["updates"] > updates_then + 50, 60, "training continues")
        assert learner.p.poll() is None
    finally:
        evil.loop_stop()
        w0.terminate()
        assert learner.terminate(60) == 0
        watch.close()
