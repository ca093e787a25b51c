"""The worker's hold on steps whose frames stood still (mqttrl.nodes.worker.step.StillHold), as
plain logic: steps wait while a game's picture stands still, go to the actor once it moves, and
are dropped when the game is found frozen or a new model comes first; an episode that ends on a
still picture (a game over that stands still) releases them at once."""

from __future__ import annotations

import numpy as np

from mqttrl.nodes.worker.step import StillHold, VectorStep


class Actor:
    def __init__(self):
        self.truncated: list[int] = []

    def truncate(self, env_index, final_obs):
        self.truncated.append(env_index)


def step(k: int, terminated: bool = False) -> VectorStep:
    obs = np.full((1, 2), k, np.float32)
    return VectorStep(
        obs, np.zeros(1, np.int64), {}, np.zeros(1), obs + 1, np.array([terminated]), np.array([False]), []
    )


def test_still_steps_wait_until_the_picture_moves():
    hold = StillHold(Actor())
    assert [s.obs[0, 0] for s in hold.add({}, step(0), 1)] == [0]
    assert hold.add({0: 0.1}, step(1), 1) == [] and hold.add({0: 0.2}, step(2), 1) == []
    assert [s.obs[0, 0] for s in hold.add({}, step(3), 1)] == [1, 2, 3]


def test_an_episode_that_ends_on_a_still_picture_releases_its_steps_at_once():
    """Pacman stands still once caught and is done 10 still frames later: the game over is judged,
    so the death and the frames after it are recorded with the episode's end, not held over the
    relaunch (where a new model, as often as not, dropped them: the death never trained on)."""
    actor = Actor()
    hold = StillHold(actor)
    assert hold.add({0: 0.1}, step(1), 1) == [] and hold.add({0: 0.2}, step(2), 1) == []
    out = hold.add({0: 0.3}, step(3, terminated=True), 1)
    assert [s.obs[0, 0] for s in out] == [1, 2, 3] and bool(out[-1].terminated[0])
    assert hold.steps == [] and actor.truncated == []
    hold.drop([])  # a new model now: nothing is held, nothing lost
    assert actor.truncated == []


def test_held_steps_are_dropped_when_the_sequence_breaks():
    actor = Actor()
    hold = StillHold(actor)
    hold.add({0: 0.1}, step(1), 1)
    hold.drop([0])  # the game was found frozen
    assert hold.steps == [] and actor.truncated == [0]
