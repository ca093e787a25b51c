"""Slow and broken links (issue 22): staleness in seconds, weights at a bounded rate and in half
precision, the worker decoding only the newest model, the proxy's MQTT corruption, and one
integration test: a PUBACK whose length field declares 2,000,000 bytes recycles the connection
within ``ack_timeout_s`` and the later messages are acknowledged."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from safetensors.numpy import save as st_save

from benchmarks.harness.link import PUBACK, Corrupter, Link, declare_length, encode_length, split_length
from mqttrl.nodes.learner.core import AsyncAdmission, LearnerCore, LearnerRules
from mqttrl.nodes.worker.weights_inbox import WeightsInbox
from mqttrl.transport.client import BrokerSettings, Message, MqttClient
from mqttrl.wire import FieldSpec, Rejected, SampleSpec, decode_weights, encode_batch, encode_weights

RUN = "slow-links"
SPEC = SampleSpec({"obs": FieldSpec("float32", (2,))})


class Learner:
    """An AsyncLearner that trains on every call and counts its updates."""

    def __init__(self) -> None:
        self.updates = 0
        self.added = 0

    def add(self, batch) -> int:
        self.added += 1
        return batch.count

    def train_due(self) -> bool:
        return True

    def train_step(self) -> dict:
        self.updates += 1
        return {}

    def behind(self) -> bool:
        return False


def make(**rules) -> tuple[LearnerCore, Learner]:
    learner = Learner()
    rules = {"publish_every": 1, "weights_every_s": 0.0, **rules}
    core = LearnerCore.create(LearnerRules(run=RUN, require_announce=False, **rules), SPEC, "async", learner, 0.0)
    return core, learner


def batch(seq: int, version: int) -> bytes:
    return encode_batch(RUN, "w0", seq, version, {"obs": np.zeros((2, 2), np.float32)})


def refusal(core: LearnerCore, payload: bytes, now: float) -> str | None:
    try:
        core.on_samples("w0", payload, now)
    except Rejected as r:
        return r.reason
    return None


# ---- staleness in seconds ----------------------------------------------------------
def test_staleness_boundary_in_seconds_since_the_model_was_replaced():
    """A batch of version 1 is in time until 2.0 s after version 2 was opened (at t = 10)."""
    core, learner = make(max_staleness_s=2.0)
    core.new_version(5.0)  # version 1
    core.new_version(10.0)  # version 2 replaces it
    assert refusal(core, batch(0, 1), 12.0) is None  # exactly 2.0 s: in time
    assert refusal(core, batch(1, 1), 12.001) == "stale_version"  # just outside
    assert refusal(core, batch(2, 2), 500.0) is None  # the current model's batches are always in time
    assert learner.added == 2


def test_a_fast_learner_does_not_make_batches_stale():
    """16 versions a second for 3 s: counted in versions (the old max_staleness = 3) a batch made
    0.3 s ago was refused; in seconds it is in time, and one from before the window is not."""
    core, _ = make(max_staleness_s=1.0)
    for i in range(48):
        core.new_version(i / 16)
    now = 47 / 16
    made_with = core.version - 5  # replaced 4/16 s before now
    assert refusal(core, batch(0, made_with), now) is None
    assert refusal(core, batch(1, core.version - 17), now) is None  # replaced exactly 1.0 s ago
    assert refusal(core, batch(2, core.version - 18), now) == "stale_version"
    assert refusal(core, batch(3, 0), now) == "stale_version"


def test_opening_times_are_forgotten_but_old_versions_stay_stale():
    core, _ = make(max_staleness_s=1.0)
    for i in range(1000):
        core.new_version(i * 0.1)
    admission = core.admission
    assert isinstance(admission, AsyncAdmission) and len(admission._opened) <= 12
    assert refusal(core, batch(0, 3), 100.0) == "stale_version"
    assert refusal(core, batch(1, core.version - 5), 99.9) is None


def test_the_deprecated_versions_key_still_refuses_and_warns():
    with pytest.warns(DeprecationWarning, match="max_staleness_s"):
        core, _ = make(max_staleness=2, max_staleness_s=100.0)
    for i in range(5):
        core.new_version(float(i))
    assert refusal(core, batch(0, 3), 5.0) is None  # 5 - 3 = 2 versions back
    assert refusal(core, batch(1, 2), 5.0) == "stale_version"  # 3 versions back


def test_no_warning_without_the_deprecated_key():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make()


# ---- versions at a bounded rate -------------------------------------------------------
def test_versions_open_at_most_every_weights_every_s():
    """A learner that updates 100 times a second with publish_every = 1 opens a version (a weights
    message to every worker) at most every 0.5 s; the first trained model goes out at once (the
    warm-up hold keeps workers waiting for it)."""
    core, learner = make(weights_every_s=0.5)
    core.new_version(0.0)
    opened = []
    for i in range(1, 301):  # 3 s, an update every 10 ms
        if core.step(i / 100).publish:
            opened.append(i / 100)
    assert learner.updates == 300
    assert opened[0] == 0.01 and len(opened) == 6
    gaps = np.diff(opened)  # 0.5 s, or the first update past it (the clock is in float hundredths)
    assert np.all(gaps >= 0.5 - 1e-9) and np.all(gaps <= 0.51 + 1e-9), gaps


# ---- weights in half precision --------------------------------------------------------
def dqn_weights(obs_space: gym.Space, n_actions: int, **params):
    """A DQN learner's exported weights and a numpy forward factory for them."""
    from mqttrl_plugins.dqn import make_forward, make_learner
    from mqttrl_plugins.dqn.common import DQNParams

    p = DQNParams(buffer_size=256, batch_size=32, **params)
    act = gym.spaces.Discrete(n_actions)
    tensors, info = make_learner(p, obs_space, act, "cpu", 3).export_weights()
    return tensors, info, lambda: make_forward(p, obs_space, act, "numpy", 0)


@pytest.mark.parametrize("wire_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("net", ["cartpole", "pixels"])
def test_half_precision_weights_act_the_same(net, wire_dtype):
    """The greedy actions of a batch of observations are the same from the float32 weights and from the
    half-precision ones the worker casts back; the message is about half the size."""
    rng = np.random.default_rng(0)
    if net == "cartpole":
        space = gym.spaces.Box(-4.0, 4.0, (4,), np.float32)
        tensors, info, forward = dqn_weights(space, 2)
        obs = rng.uniform(-2.4, 2.4, (512, 4)).astype(np.float32)
    else:
        space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        tensors, info, forward = dqn_weights(space, 6, network="nature_cnn")
        obs = rng.integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)  # numpy convolutions: fewer rows
    exact = encode_weights(1, "dqn", RUN, tensors, info)
    half = encode_weights(1, "dqn", RUN, tensors, info, wire_dtype=wire_dtype)
    assert len(half) < 0.55 * len(exact)
    received = decode_weights(half)
    assert all(received.tensors[k].dtype == np.float32 for k in tensors)
    a, b = forward(), forward()
    a.load_weights(decode_weights(exact).tensors, info)
    b.load_weights(received.tensors, info)
    qa, qb = a(obs)["q"], b(obs)["q"]
    assert not np.array_equal(qa, qb)  # the weights really went through half precision
    np.testing.assert_array_equal(qa.argmax(1), qb.argmax(1))


def test_a_tensor_too_big_for_float16_travels_in_float32_and_a_false_cast_is_refused():
    big = {"w": np.array([1e6, -2.0], np.float32), "b": np.array([0.5], np.float32)}
    got = decode_weights(encode_weights(1, "dqn", RUN, big, wire_dtype="float16"))
    np.testing.assert_array_equal(got.tensors["w"], big["w"])
    assert got.tensors["b"].dtype == np.float32
    # metadata that says a float32 tensor was cast to float16: refused by name, not misread
    tensors = {"w": np.zeros(2, np.float32)}
    meta = dict(json.loads(encode_weights(1, "dqn", RUN, tensors)[8:].split(b"\0")[0].rstrip())["__metadata__"])
    with pytest.raises(Rejected, match="bad_header"):
        decode_weights(st_save(tensors, metadata={**meta, "cast": '{"w":"float16"}'}))


# ---- the worker decodes only the newest weights ---------------------------------------
def test_the_worker_decodes_only_the_newest_of_queued_weights():
    from mqttrl.nodes.worker.node import WorkerNode

    worker = WorkerNode(BrokerSettings("mqtt://127.0.0.1:1", protocol="5"), RUN, name="w0")  # never connects
    put = worker.weights_inbox.put
    seen_flow: list[bool] = []
    worker.weights_inbox.put = lambda payload: (seen_flow.append(worker.core.paused), put(payload))
    inbox: queue.Queue = queue.Queue()
    for v in range(1, 6):
        payload = encode_weights(v, "dqn", RUN, {"w": np.zeros(2, np.float32)})
        inbox.put(Message(worker.topics.weights, payload, True))
    inbox.put(Message(worker.topics.flow, b'{"pause": true}', True))
    worker.client.inbox = inbox
    worker.drain()
    assert worker.core.pending_weights.version == 5 and worker.weights_inbox.superseded == 4
    assert seen_flow == [True]  # the flow message was handled before any model was decoded


def test_big_weights_are_decoded_off_the_game_loop_and_only_the_newest():
    """A message of at least thread_above bytes: put() returns at once while a slow decode runs
    on the decoder thread; of those queued meanwhile only the newest is decoded."""
    started = threading.Event()

    def slow_decode(payload: bytes):
        started.set()
        time.sleep(0.3)
        return decode_weights(payload)

    inbox = WeightsInbox(slow_decode, thread_above=100)
    msgs = [encode_weights(v, "dqn", RUN, {"w": np.zeros(64, np.float32)}) for v in range(1, 5)]
    t0 = time.monotonic()
    inbox.put(msgs[0])
    assert started.wait(2)
    for m in msgs[1:]:
        inbox.put(m)  # v2, v3 wait and are replaced; v4 is decoded next
    assert time.monotonic() - t0 < 0.2 and inbox.take() == []
    deadline = time.monotonic() + 5
    got = []
    while time.monotonic() < deadline and len(got) < 2:
        got += inbox.take()
        time.sleep(0.02)
    assert [w.version for w in got] == [1, 4] and inbox.superseded == 2
    inbox.put(b"garbage" * 100)
    while time.monotonic() < deadline and not (got := inbox.take()):
        time.sleep(0.02)
    assert isinstance(got[0], Rejected)  # a refusal the worker counts, not a dead thread
    inbox.close()


# ---- the proxy's corruption, as pure logic --------------------------------------------
def test_the_corrupter_rewrites_one_puback_and_passes_the_rest():
    publish = bytes([0x30]) + encode_length(7) + b"\x00\x01tabcd"
    puback = bytes([0x40, 0x02, 0x00, 0x07])
    c = Corrupter()
    c.arm(PUBACK, declare_length(2_000_000))
    stream = publish + puback + puback
    out = c.feed(stream[:3]) + c.feed(stream[3:])
    assert out[: len(publish)] == publish
    value, at = split_length(out, len(publish) + 1)
    assert value == 2_000_000 and out[len(publish)] == 0x40
    assert out[at:] == b"\x00\x07" + puback and c.rewritten == 1


# ---- the proxy's shaping and cuts, against a local echo server (no broker) -----------------
def echo_server() -> int:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def _echo(conn: socket.socket) -> None:
    try:
        while data := conn.recv(65536):
            conn.sendall(data)
    except OSError:
        pass


def round_trip(port: int, payload: bytes, timeout: float = 10.0) -> float:
    """Seconds to send ``payload`` through the link and read it back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        t0 = time.monotonic()
        c.sendall(payload)
        got = 0
        while got < len(payload):
            got += len(c.recv(65536))
        return time.monotonic() - t0


def test_the_link_delays_caps_silences_and_resets():
    link = Link(echo_server(), latency_s=0.1, jitter_s=0.02)
    try:
        assert 0.16 <= round_trip(link.port, b"x") < 0.5  # 100 +- 20 ms each way
        link.shape(rate=100_000)
        assert 0.45 <= round_trip(link.port, b"x" * 50_000) < 2.0  # 50 kB at 100 kB/s (up and back overlap)
        link.shape()
        with socket.create_connection(("127.0.0.1", link.port), timeout=5) as c:
            link.silence()
            c.sendall(b"held")
            c.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.recv(10)  # nothing passes, the connection stays up
            link.heal()
            c.settimeout(5)
            assert c.recv(10) == b"held"  # held bytes flow again
            link.reset()
            with pytest.raises(OSError):
                c.sendall(b"x" * 100)
                assert c.recv(10) == b""  # reset (or closed) by the proxy
                raise ConnectionResetError
        assert round_trip(link.port, b"again") < 1  # a reset link takes new connections
    finally:
        link.close()


# ---- one integration test: a corrupted PUBACK against a real mosquitto --------------
def test_a_corrupted_puback_recycles_the_connection_and_later_messages_are_acknowledged(mosquitto):
    """The issue's fault: one PUBACK declares 2,000,000 bytes, the client waits for them for ever
    (keepalive stays satisfied by the broker's other bytes). With ack_timeout_s the client
    reconnects within the bound, resends, and every message, later ones too, is acknowledged."""
    link = Link(mosquitto.port)
    node = MqttClient(BrokerSettings(f"mqtt://127.0.0.1:{link.port}"), "corrupt-w0", ack_timeout_s=1.0)
    try:
        node.start(wait=10)
        connections = link.connections
        link.corrupt(PUBACK, declare_length(2_000_000))
        acked: list[int] = []
        t0 = time.monotonic()
        node.publish("t/corrupt", b"first", qos=1, kind="samples", tag=0)
        while time.monotonic() - t0 < 5 and not link.rewritten:
            time.sleep(0.02)
        assert link.rewritten == 1, "the proxy rewrote no PUBACK"
        for i in range(1, 6):  # later batches, sent into the stuck connection
            node.publish("t/corrupt", f"batch-{i}".encode(), qos=1, kind="samples", tag=i)
        while time.monotonic() - t0 < 10 and len(acked) < 6:
            acked += node.take_acked()
            time.sleep(0.05)
        recovered = time.monotonic() - t0
        assert sorted(acked) == [0, 1, 2, 3, 4, 5], (acked, node.recycles)
        assert node.recycles >= 1 and link.connections > connections
        assert recovered < 1.0 + 4.0, recovered  # within ack_timeout_s, plus a reconnect
        node.publish("t/corrupt", b"after", qos=1, kind="samples", tag=6)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and 6 not in acked:
            acked += node.take_acked()
            time.sleep(0.05)
        assert 6 in acked
    finally:
        node.stop(flush_timeout=1)
        link.close()
