"""The worker's rules without a broker: weights, flow, batching, sync shares, heartbeats, stopping.

The core is driven with made-up times and hand-made payloads. The last tests run
the real shell (:class:`WorkerNode`) over a fake MQTT node, a fake sync algorithm
and CartPole, to check that ``max_env_steps`` stops a sync-mode worker (it used to
send its share and wait for the next model forever).
"""

from __future__ import annotations

import collections
import json
import threading

import pytest
from helpers.worker_core_kit import RUN, config_payload, fake_worker, make_core, parse, published, weights

from mqttrl.config import RunConfig
from mqttrl.envs.rollout import EpisodeEnd
from mqttrl.nodes.worker import node as node_mod
from mqttrl.nodes.worker.core import Move, WorkerCore, WorkerRules
from mqttrl.plugin.algorithm import SyncActor
from mqttrl.transport.client import BrokerSettings, Message
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import Rejected, decode_batch, decode_json, encode_json
from mqttrl.wire.weights import newer


def load_newest(core: WorkerCore):
    """What the shell does with the core's answer: load the weights and say so."""
    load = core.weights_to_load()
    if load is not None:
        core.loaded(load.weights)
    return load


# ---- config -------------------------------------------------------------------------
def test_the_first_config_is_the_runs_and_later_ones_change_nothing():
    core = WorkerCore(RUN, "w0", parse)
    assert core.config is None
    core.on_config(config_payload(batch_size=7))
    assert core.config.worker.batch_size == 7 and core.config.algorithm.name == "fake"
    core.on_config(config_payload(batch_size=99))  # a retained copy after a reconnect, or a new learner's
    assert core.config.worker.batch_size == 7


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(b"not json", "garbage"), (b'{"no_run": 1}', "bad_header"), (b'{"run": "r1", "bogus": {}}', "bad_value")],
)
def test_a_bad_config_is_refused_and_the_worker_keeps_waiting(payload, reason):
    core = WorkerCore(RUN, "w0", parse)
    with pytest.raises(Rejected) as e:
        core.on_config(payload)
    assert e.value.reason == reason
    assert core.config is None
    core.on_config(config_payload())
    assert core.config is not None


def test_rules_come_from_the_config_and_the_mode():
    cfg = parse(decode_json(config_payload(batch_size=5, max_batch_delay_s=0.25, sync_timeout_s=9.0)))
    rules = WorkerRules.from_config(cfg, "sync", max_env_steps=100)
    assert rules == WorkerRules(
        batch_size=5,
        max_batch_delay_s=0.25,
        heartbeat_interval_s=cfg.worker.heartbeat_interval_s,
        sync=True,
        sync_timeout_s=9.0,
        max_env_steps=100,
    )
    assert not WorkerRules.from_config(cfg, "async").sync


# ---- weights --------------------------------------------------------------------------
def test_weights_order_is_epoch_then_version():
    assert newer((0, 0), (0, -1)) and newer((0, 57), (0, -1))  # no model yet: anything
    assert newer((0, 4), (0, 3))  # newer version
    assert not newer((0, 3), (0, 3)) and not newer((0, 2), (0, 3))  # same or older: a late copy
    assert newer((2, 5), (1, 1500))  # a restarted learner: a new epoch wins at a lower version
    assert not newer((1, 9999), (2, 0))  # an older epoch's weights (a broker restored them) never do


def test_a_learner_whose_version_went_back_is_followed():
    """Issue 9, item 3: the learner resumed from an older checkpoint (version 3) in a new epoch
    while this worker ran version 40: the worker loads version 3 of the new epoch, then ignores a
    stale retained copy of the old epoch's version 41, and its batches carry the new epoch."""
    core = make_core()
    core.on_weights(weights(40, epoch=1))
    load_newest(core)
    core.on_weights(weights(3, epoch=2))
    assert load_newest(core).weights.version == 3 and (core.epoch, core.version) == (2, 3)
    core.on_weights(weights(41, epoch=1))
    assert core.weights_to_load() is None and (core.epoch, core.version) == (2, 3)


def test_weights_are_held_until_loaded_and_the_newest_wins():
    core = make_core()
    assert not core.has_model and core.weights_to_load() is None
    core.on_weights(weights(0))
    core.on_weights(weights(2))
    core.on_weights(weights(1))  # arrives late: older than the held version 2, so 2 stays
    assert core.has_model and core.version == -1  # nothing loaded between steps yet
    load = load_newest(core)
    assert load.weights.version == 2 and core.version == 2
    assert core.weights_to_load() is None  # taken
    core.on_weights(weights(2))  # the same version again (a retained copy after a reconnect)
    core.on_weights(weights(0))
    assert core.weights_to_load() is None
    core.on_weights(weights(5))
    assert load_newest(core).weights.version == 5


def test_weights_of_another_run_or_algorithm_are_refused():
    core = make_core()
    with pytest.raises(Rejected) as e:
        core.on_weights(weights(0, run="other"))
    assert e.value.reason == "wrong_run" and not core.has_model
    with pytest.raises(Rejected) as e:
        core.on_weights(b"\x00" * 4)
    assert e.value.reason == "truncated"
    core.on_weights(weights(0, algorithm="ppo"))  # known only at load time, when the config is surely in
    with pytest.raises(Rejected) as e:
        core.weights_to_load()
    assert e.value.reason == "bad_value" and core.version == -1
    assert core.weights_to_load() is None  # refused once, not again at every step


# ---- flow and learner state -------------------------------------------------------------
def test_pause_holds_back_only_while_the_learner_is_online():
    core = make_core()
    assert not core.held_back
    core.on_flow(encode_json({"pause": True}))
    assert core.paused and not core.held_back  # a pause left by a learner that is gone could never be lifted
    core.on_learner_state(encode_json({"status": "online"}))
    assert core.learner_online and core.held_back
    core.on_learner_state(b"")  # a cleared retained state changes nothing
    assert core.held_back
    core.on_learner_state(encode_json({"status": "offline", "reason": "connection lost"}))
    assert not core.held_back
    core.on_learner_state(encode_json({"status": "online"}))
    core.on_flow(encode_json({"pause": False}))
    assert not core.held_back
    core.on_flow(encode_json({}))
    assert not core.paused
    with pytest.raises(Rejected):
        core.on_learner_state(encode_json({"state": "online"}))
    assert core.learner_online


# ---- batching -------------------------------------------------------------------------
def test_async_sends_a_full_batch():
    core = make_core(batch_size=4, max_batch_delay_s=10.0)
    assert core.next_move(0, 0.0) is Move.STEP
    assert core.next_move(2, 0.1) is Move.STEP
    assert core.next_move(4, 0.2) is Move.SEND
    assert core.batch_sent() == (0, -1)
    assert core.next_move(5, 0.3) is Move.SEND  # more than a batch is pending: still one send
    assert not core.awaiting_model  # async mode never waits for a model


def test_async_sends_a_partial_batch_once_its_oldest_transition_is_too_old():
    core = make_core(batch_size=100, max_batch_delay_s=0.5)
    assert core.next_move(1, 10.0) is Move.STEP  # the batch starts now
    assert core.next_move(3, 10.4) is Move.STEP
    assert core.next_move(3, 10.5) is Move.STEP  # exactly the delay: not yet
    assert core.next_move(4, 10.51) is Move.SEND
    core.batch_sent()
    assert core.next_move(1, 10.6) is Move.STEP  # a new batch starts at 10.6, not at 10.0
    assert core.next_move(2, 11.0) is Move.STEP
    assert core.next_move(2, 11.2) is Move.SEND


def test_sequence_numbers_count_sent_batches_and_carry_the_model_version():
    core = make_core(batch_size=1)
    core.on_weights(weights(3))
    load_newest(core)
    sent = [core.batch_sent() for _ in range(5)]
    assert sent == [(0, 3), (1, 3), (2, 3), (3, 3), (4, 3)]
    core.on_weights(weights(4))
    load_newest(core)
    assert core.batch_sent() == (5, 4)
    assert core.seq == 6


def test_sync_sends_the_whole_share_then_waits_for_a_newer_model():
    core = make_core(sync=True, batch_size=1000, max_batch_delay_s=0.01)
    core.on_weights(weights(0))
    assert not load_newest(core).discard_partial  # nothing collected before the first model
    # a sync actor reports nothing pending until its share is complete: no batching by size or delay
    assert core.next_move(0, 0.0) is Move.STEP
    assert core.next_move(0, 100.0) is Move.STEP
    assert core.next_move(64, 100.1) is Move.SEND  # the share, however small
    assert core.batch_sent() == (0, 0)
    assert core.awaiting_model and core.awaiting_newer_than == 0
    core.on_weights(weights(0))  # the version the share was made with: no use
    assert core.weights_to_load() is None and core.awaiting_model
    core.on_weights(weights(1))
    load = load_newest(core)
    assert not load.discard_partial  # the share was sent: nothing partial to drop
    assert not core.awaiting_model and core.version == 1
    assert core.heartbeat_due(100.2)  # the learner hears about the new version at once
    assert core.next_move(64, 101.0) is Move.SEND
    assert core.batch_sent() == (1, 1)


def test_sync_drops_a_partial_share_when_a_round_finished_without_this_worker():
    core = make_core(sync=True)
    core.on_weights(weights(0))
    load_newest(core)
    assert core.next_move(0, 0.0) is Move.STEP  # collecting the share for version 0
    core.on_weights(weights(1))  # the round closed without us
    assert load_newest(core).discard_partial
    async_core = make_core(sync=False)
    async_core.on_weights(weights(0))
    load_newest(async_core)
    async_core.on_weights(weights(1))
    assert not load_newest(async_core).discard_partial


# ---- stopping ---------------------------------------------------------------------------
def test_max_env_steps_stops_an_async_worker():
    core = make_core(batch_size=4, max_env_steps=12)
    for step in range(5):
        if core.next_move(step + 1, float(step)) is Move.SEND:
            core.batch_sent()
        core.stepped(3, [], 0.0)
        if core.finished:
            break
    assert core.env_steps == 12 and core.finished
    assert core.next_move(3, 9.0) is Move.STOP  # the shell sends what is pending on its way out


@pytest.mark.parametrize("share_pending", [0, 8])
def test_max_env_steps_stops_a_sync_worker(share_pending):
    """Before the fix a sync worker sent its share and waited for the next model before it
    ever looked at max_env_steps; with no next model it never stopped."""
    core = make_core(sync=True, max_env_steps=8)
    core.on_weights(weights(0))
    load_newest(core)
    core.stepped(4, [], 0.0)
    assert not core.finished and core.next_move(0, 0.0) is Move.STEP
    core.stepped(4, [], 0.0)  # the share is complete (or not) right at the limit
    assert core.finished
    assert core.next_move(share_pending, 0.0) is Move.STOP
    assert not core.awaiting_model  # nothing to wait for: the shell sends the share (if any) and stops


def test_no_limit_never_finishes():
    core = make_core(max_env_steps=None)
    core.stepped(10**9, [], 0.0)
    assert not core.finished


# ---- episodes and heartbeats -------------------------------------------------------------
def test_finished_episodes_are_counted_and_sent_with_the_next_batch():
    core = make_core()
    core.on_weights(weights(2))
    load_newest(core)
    assert core.take_episodes() is None
    core.stepped(4, [EpisodeEnd(1, 21.5, 20, True)], 1000.0)
    core.stepped(4, [EpisodeEnd(0, 9.0, 8, False), EpisodeEnd(3, 10.0, 9, True)], 1001.0)
    assert core.episodes == 3 and core.env_steps == 8
    body = json.loads(core.take_episodes().encode())  # the message, as it goes out
    assert body["worker"] == "w0"
    assert body["episodes"][0] == {
        "env": 1,
        "return": 21.5,
        "length": 20,
        "terminated": True,
        "model_version": 2,
        "env_steps": 4,
        "time": 1000.0,
    }
    assert [e["env"] for e in body["episodes"]] == [1, 0, 3]
    assert [e["env_steps"] for e in body["episodes"]] == [4, 8, 8]
    assert core.take_episodes() is None  # sent once


def test_heartbeats_are_due_every_interval_starting_at_once():
    core = make_core(heartbeat_interval_s=2.0)
    assert core.heartbeat_due(50.0)
    assert not core.heartbeat_due(50.0) and not core.heartbeat_due(51.9)
    assert core.heartbeat_due(52.0)
    assert not core.heartbeat_due(53.0)
    assert core.heartbeat_due(60.0)  # late: the next is an interval after this one
    assert not core.heartbeat_due(61.0)


def test_every_worker_process_is_a_new_incarnation():
    a, b = WorkerCore(RUN, "w0", parse), WorkerCore(RUN, "w0", parse)
    assert a.incarnation != b.incarnation and len(a.incarnation) == 12


def test_heartbeat_contents():
    core = make_core(batch_size=1)
    core.on_weights(weights(7, epoch=3))
    load_newest(core)
    core.stepped(4, [EpisodeEnd(0, 1.0, 4, True)], 0.0)
    core.batch_sent()
    core.on_learner_state(encode_json({"status": "online"}))
    core.on_flow(encode_json({"pause": True}))
    hb = core.heartbeat(
        1234.5, 99, 3, collections.Counter(samples=2), {"garbage": 1}, env_restarts=2, person_steps=5
    ).to_json()
    assert hb == {
        "worker": "w0",
        "incarnation": "inc-1",
        "epoch": 3,
        "pid": 99,
        "model_version": 7,
        "env_steps": 4,
        "episodes": 1,
        "env_restarts": 2,
        "person_steps": 5,
        "seq": 1,
        "outbox": 3,
        "dropped": {"samples": 2},
        "rejected": {"garbage": 1},
        "paused": True,
        "idle": None,
        "paused_s": 0.0,
        "time": 1234.5,
    }
    assert list(hb) == ["worker", "incarnation", "pid", "epoch", "model_version", "env_steps", "episodes"] + [
        "env_restarts",
        "person_steps",
        "seq",
        "outbox",
        "dropped",
        "rejected",
        "paused",
        "idle",
        "paused_s",
        "time",
    ]
    encode_json(hb)  # it goes out as JSON


def run_briefly(worker: node_mod.WorkerNode, max_env_steps: int) -> None:
    t = threading.Thread(target=worker.run, kwargs={"max_env_steps": max_env_steps}, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        worker.stop()
        t.join(5)
        pytest.fail(f"the worker did not stop at max_env_steps={max_env_steps} (env steps: {worker.env_steps})")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_worker_stops_at_max_env_steps(monkeypatch, mode):
    """Sync mode: the share completes at the limit, and no next model ever comes."""
    worker = fake_worker(monkeypatch, mode)
    run_briefly(worker, max_env_steps=8)  # 2 envs x 4 steps: exactly one share
    assert worker.env_steps == 8 and worker.version == 0
    samples = [decode_batch(p) for p in published(worker, Kind.SAMPLES)]
    assert [(b.seq, b.model_version, b.count) for b in samples] == [(0, 0, 8)]
    assert decode_json(published(worker, Kind.WORKER_STATE)[-1])["status"] == "offline"
    assert published(worker, Kind.HEARTBEAT)
    assert worker.forward.closed and worker.client.stopped
    assert worker.actor.loaded == [0] and worker.actor.discards == 0


def test_a_sync_worker_waits_for_the_next_model_between_shares(monkeypatch):
    worker = fake_worker(monkeypatch, "sync")
    topics = Topics(RUN)

    def learner():  # publishes version 1 once the first share is out
        while not published(worker, Kind.SAMPLES):
            threading.Event().wait(0.01)
        worker.client.inbox.put(Message(topics.weights, weights(1)))

    threading.Thread(target=learner, daemon=True).start()
    run_briefly(worker, max_env_steps=16)
    samples = [decode_batch(p) for p in published(worker, Kind.SAMPLES)]
    assert [(b.seq, b.model_version) for b in samples] == [(0, 0), (1, 1)]
    assert worker.actor.loaded == [0, 1] and worker.actor.discards == 0
    assert isinstance(worker.actor, SyncActor)


def test_workers_started_alike_differ_by_name_unless_pinned_by_index():
    """No --index: seeds and exploration come from the worker's name; --index pins the ladder slot."""
    settings = BrokerSettings(url="mqtt://127.0.0.1:1", protocol="5")  # never connects
    cfg = RunConfig()
    made = {}
    for name, index in (("pc-1", None), ("pc-2", None), ("pc-3", 3)):
        worker = node_mod.WorkerNode(settings, RUN, name=name, index=index)
        envs, ctx = worker._make_envs(cfg)
        envs.close()
        made[name] = ctx
    assert made["pc-1"].seed != made["pc-2"].seed
    assert made["pc-1"].ladder_phase != made["pc-2"].ladder_phase
    assert made["pc-3"].ladder_phase is None and made["pc-3"].first_env_index == 3 * cfg.env.num_envs


def test_the_worker_bounds_its_outbox_by_worker_outbox_limit(monkeypatch):
    """``worker.outbox_limit`` is the run's (it was declared and documented, but a literal 2000 was used)."""
    worker = fake_worker(monkeypatch, "async", outbox_limit=37)
    run_briefly(worker, 20)
    assert worker.client.outbox_limit == 37


def test_an_mqtt_nodes_outbox_limit_can_be_set_once_the_config_is_in():
    from mqttrl.transport.client import MqttClient

    node = MqttClient(BrokerSettings(url="mqtt://127.0.0.1:1", protocol="5"), client_id="t", outbox_limit=10)
    node.outbox_limit = 3
    assert node.outbox_limit == 3
    with pytest.raises(ValueError, match="at least one message"):
        node.outbox_limit = 0
