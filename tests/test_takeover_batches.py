"""Takeovers in the batches (issue 45): a step a person took over is marked in the batch's optional
``intervention`` field, and DQN learns from those rows as demonstrations (DQfD's margin loss).

The field is optional, and sent only by a batch that holds a takeover: a batch of the release before
(``tests/data/dqn_cartpole_batch_fe2a6c2.bin``, written by that release's worker code) is taken by
this learner, and a batch without takeovers is byte for byte the old format, which an older learner
reads. The flags are checked row by row against the steps a scripted person took, from the actor
alone and from a live worker over a real mosquitto."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.dqn_kit import small_params

from mqttrl.plugin import INTERVENTION, ActorContext, TakeoverActor
from mqttrl.wire import FieldSpec, Rejected, SampleSpec, decode_batch, encode_batch
from mqttrl_plugins.dqn import make_forward
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import sample_spec
from mqttrl_plugins.dqn.learner import DQNLearner

torch.set_num_threads(1)
OLD_BATCH = Path(__file__).parent / "data" / "dqn_cartpole_batch_fe2a6c2.bin"
#: the steps of each episode (0-based) the scripted person plays
TAKEN = range(3, 7)
EPISODE = 12


class TakenOver(gym.Env):
    """An episode of 12 steps whose observation says the step (obs[0] = t); a "person" takes
    over steps 3..6, playing action 1 whatever the policy says, and reports it as a takeover does
    (``info["demo_action"]``)."""

    observation_space = gym.spaces.Box(-1.0, 100.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.t, 0, 0, 0], np.float32)

    def step(self, action):
        person = self.t in TAKEN
        self.t += 1
        info = {"demo_action": 1, "intervention": True} if person else {}
        return self._obs(), 1.0, self.t >= EPISODE, False, info


gym.register("TakenOver-v0", entry_point=TakenOver)


def test_an_optional_field_may_be_left_out_and_is_checked_when_sent():
    spec = SampleSpec({"x": FieldSpec("float32"), "flag": FieldSpec("uint8", (), low=0, high=1, optional=True)})
    x = np.zeros(4, np.float32)
    spec.validate({"x": x}, 4)  # an older sender's batch
    spec.validate({"x": x, "flag": np.array([0, 1, 1, 0], np.uint8)}, 4)
    for bad, why in [(np.array([0, 2, 0, 0], np.uint8), "out_of_range"), (np.zeros(4, np.int64), "dtype")]:
        with pytest.raises(Rejected) as e:
            spec.validate({"x": x, "flag": bad}, 4)
        assert e.value.reason == why
    with pytest.raises(Rejected):  # a required field still is
        spec.validate({"flag": np.zeros(4, np.uint8)}, 4)
    assert spec.describe()["flag"]["optional"] is True and "optional" not in spec.describe()["x"]


def play(actor: DQNActor, steps: int, person_rows: bool = True) -> dict:
    """``steps`` steps of TakenOver on the actor's one env, the worker's INTERVENTION extra added
    where the person played (as the worker's StepRecorder adds it)."""
    env = TakenOver()
    obs, _ = env.reset()
    for _ in range(steps):
        action, extras = actor.act(obs[None])
        nxt, r, term, trunc, info = env.step(int(action[0]))
        if person_rows and "demo_action" in info:
            action = np.array([info["demo_action"]])
            extras = {**extras, INTERVENTION: np.array([True])}
        actor.record(obs[None], action, extras, np.array([r], np.float32), nxt[None], np.array([term]), [trunc])
        obs = nxt if not term else env.reset()[0]
    return actor.take()


def make_actor(**params) -> DQNActor:
    p, env = small_params(**params), TakenOver()
    forward = make_forward(p, env.observation_space, env.action_space, "numpy", 0)
    return DQNActor(p, env.observation_space, env.action_space, ActorContext(num_envs=1, seed=0), forward)


@pytest.mark.parametrize("n_step", [1, 3])
def test_the_actor_marks_exactly_the_transitions_whose_first_step_a_person_took(n_step):
    actor = make_actor(n_step=n_step)
    assert isinstance(actor, TakeoverActor) and actor.takes_interventions
    out = play(actor, 3 * EPISODE)
    t = out["obs"][:, 0].astype(int)
    assert len(t) == 3 * EPISODE and sorted(set(t)) == list(range(EPISODE))
    np.testing.assert_array_equal(out[INTERVENTION], np.isin(t, TAKEN).astype(np.uint8))
    np.testing.assert_array_equal(out["action"][np.isin(t, TAKEN)], 1)  # the person's action
    sample_spec(actor.params, TakenOver.observation_space, TakenOver.action_space).validate(out, len(t))
    # no takeover in a batch: no field, the batch as older learners read it
    assert INTERVENTION not in play(make_actor(n_step=n_step), 2 * EPISODE, person_rows=False)


def test_a_batch_of_the_last_release_s_worker_is_taken_by_this_learner():
    """The bytes a DQN worker of fe2a6c2 sent (CartPole, no intervention field): decoded, validated
    by this release's spec and trained on, with no takeover loss."""
    batch = decode_batch(OLD_BATCH.read_bytes())
    assert INTERVENTION not in batch.arrays and batch.worker == "w-old"
    env = gym.make("CartPole-v1")
    p = small_params(batch_size=16, learning_starts=16)
    learner = DQNLearner(p, env.observation_space, env.action_space, "cpu", 0)
    assert learner.add(batch) == batch.count == 62  # 64 steps, two still in their 3-step windows
    metrics = learner.train_step()
    assert np.isfinite(metrics["loss"]) and "takeover_transitions" not in metrics
    assert learner.replay.scalars[INTERVENTION][: batch.count].sum() == 0


def greedy_on_taken_steps(margin_loss: float, updates: int = 300) -> np.ndarray:
    """Greedy actions on the taken-over steps' observations after training on takeover batches in
    which the person's action (1) earns no more reward than the other: only the margin loss can
    teach the person's choice. The replay also holds the policy's own steps with action 0."""
    env = TakenOver()
    p = small_params(batch_size=32, learning_starts=32, takeover_margin_loss=margin_loss, n_step=1)
    learner = DQNLearner(p, env.observation_space, env.action_space, "cpu", 0)
    actor = make_actor(n_step=1, epsilon_base=0.0, epsilon_start=0.0)
    actor.act = lambda obs, greedy=False: (np.zeros(len(obs), np.int64), {"epsilon": np.zeros(len(obs), np.float32)})
    for _ in range(4):
        out = play(actor, 8 * EPISODE)
        learner.add(decode_batch(encode_batch("r", "w", 0, 0, out)))
    assert learner.takeovers.transitions == 4 * 8 * len(TAKEN)
    for _ in range(updates):
        metrics = learner.train_step()
    assert metrics["takeover_transitions"] == learner.takeovers.transitions
    obs = torch.tensor([[t, 0, 0, 0] for t in TAKEN], dtype=torch.float32)
    with torch.no_grad():
        return learner.online(obs).argmax(dim=1).numpy()


def test_dqn_learns_the_person_s_action_on_the_steps_they_took_over():
    """With the margin loss (the default weight 1.0) the person's action becomes the greedy one
    where they took over; without it (weight 0) the same data leave those steps to the TD loss,
    under which both actions are worth the same and the policy's own action 0 was the one seen on
    every step around them."""
    np.testing.assert_array_equal(greedy_on_taken_steps(1.0), 1)
    assert (greedy_on_taken_steps(0.0) == 0).any()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_live_worker_s_batches_flag_the_takeover_steps_and_the_learner_takes_them(tmp_path, mosquitto, monkeypatch):
    """A worker over mosquitto plays TakenOver (a person on steps 3..6 of every episode) for a
    learner of this release: every row of every batch is flagged exactly when the person took its
    step, nothing is refused, and the learner counts the takeover transitions it trained on."""
    from helpers.configs import cartpole_dqn_toml
    from helpers.e2e import start_learner, start_worker
    from helpers.watch import Watcher

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # the processes import this module's env
    run = "e2e-takeover"
    cfg = tmp_path / "takeover.toml"
    cfg.write_text(cartpole_dqn_toml(run, env={"id": "test_takeover_batches:TakenOver-v0", "num_envs": 2}))
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    worker = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: len(w.sample_batches) >= 12, 90, "twelve batches")
        watch.wait(lambda w: w.metrics and w.metrics[-1].get("samples", 0) > 200, 60, "samples trained on")
        rows = 0
        for b in list(watch.sample_batches):
            t = np.asarray(b.arrays["obs"])[:, 0].astype(int)
            person = np.isin(t, TAKEN)
            flags = np.asarray(b.arrays[INTERVENTION]) if INTERVENTION in b.arrays else np.zeros(len(t), np.uint8)
            np.testing.assert_array_equal(flags, person.astype(np.uint8))
            np.testing.assert_array_equal(np.asarray(b.arrays["action"])[person], 1)
            rows += int(person.sum())
        assert rows > 0
        assert sum(watch.metrics[-1]["rejected"].values()) == 0, watch.metrics[-1]["rejected"]
        watch.wait(lambda w: w.metrics[-1].get("train", {}).get("takeover_transitions", 0) > 0, 30, "takeovers counted")
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()


def test_takeovers_are_kept_in_the_protected_part_after_the_ring_evicts_them():
    """The flagged transitions are also copied to the protected part of replay (never evicted by
    the agent's own steps): after the ring (buffer 64) has long overwritten them, the protected part
    still holds them, at most ``takeover_keep`` (the oldest go first), and batches draw
    ``takeover_ratio`` of their rows from it; ``takeover_keep = 0`` keeps them in the ring only."""
    env = TakenOver()
    p = small_params(buffer_size=64, batch_size=32, learning_starts=32, n_step=1, takeover_keep=40)
    learner = DQNLearner(p, env.observation_space, env.action_space, "cpu", 0)
    actor = make_actor(n_step=1)
    for _ in range(6):  # 6 x 24 steps: 48 taken over, the ring overwritten twice
        learner.add(decode_batch(encode_batch("r", "w", 0, 0, play(actor, 2 * EPISODE))))
    kept = learner.demos
    assert learner.takeovers.transitions == 48 and kept.size == 40  # the newest 40 of 48
    np.testing.assert_array_equal(kept.arrays["action"], 1)  # the person's
    assert set(kept.arrays["obs"][:, 0].astype(int)) == set(TAKEN)
    assert learner.replay.scalars[INTERVENTION].sum() < 40  # the ring kept fewer
    learner.train_step()
    assert kept._rows == round(32 * p.takeover_ratio / (1 - p.takeover_ratio))  # rows drawn from it
    off = DQNLearner(small_params(buffer_size=64, takeover_keep=0), env.observation_space, env.action_space, "cpu", 0)
    off.add(decode_batch(encode_batch("r", "w", 0, 0, play(make_actor(n_step=1), 2 * EPISODE))))
    assert off.demos is None and off.takeovers.transitions == 8
