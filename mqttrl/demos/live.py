"""A live worker's demonstrations to a dataset (``worker.record_demos_to``).

A game a person plays while a run trains reports the action really taken in
``info["demo_action"]`` (docs/demonstrations.md); the worker sends those steps to the learner as
any other and, with ``worker.record_demos_to = DIR``, also writes every episode the person played
from its first step to its last to a dataset in ``DIR`` on the worker's machine, through the same
:class:`~mqttrl.demos.DatasetWriter` (and its checks) as ``mqttrl record``: a dataset that
``mqttrl train --demos DIR`` reads later. An episode with any step the policy played (the person
took over midway, or let go) is not written, nor one whose game crashed or reset on its thread
midway: a dataset holds only people's whole episodes. Nothing is created until the first such
episode ends, so a worker whose games nobody plays writes nothing. A dataset already in ``DIR``
is appended to when its env and spaces are the run's (several sittings add up); one that is not
is one error line and recording stops (the worker plays on). Each episode is written when it
ends, atomically, so a worker that is stopped keeps what was finished.

:meth:`LiveRecorder.step` is the worker's hook (``WorkerNode._take_step``): it takes each vector
step as it was recorded for the learner (the actions the envs really took).
"""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym

from .dataset import DatasetWriter
from .episode import EpisodeBuilder
from .validate import DatasetError

log = logging.getLogger("mqttrl.demos")


class LiveRecorder:
    """Per env an :class:`EpisodeBuilder` that follows the open episode while a person plays it."""

    def __init__(
        self,
        path: str | Path,
        env_id: str,
        observation_space: gym.Space,
        action_space: gym.Space,
        num_envs: int,
        played_by: str,
        env_kwargs: dict | None = None,
    ):
        self.path = Path(path)
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.observation_space, self.action_space = observation_space, action_space
        self.builders = [EpisodeBuilder(observation_space, action_space, played_by) for _ in range(num_envs)]
        #: per env: its open episode is being followed (every step so far a person's)
        self.following = [False] * num_envs
        #: per env: the next step starts an episode (after an end, a reset or a crash)
        self.at_start = [True] * num_envs
        self.writer: DatasetWriter | None = None
        #: episodes written, and whole episodes not written because the policy played part of them
        self.written = 0
        self.skipped = 0
        self.failed: str | None = None

    def step(self, envs, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """One vector step as the worker recorded it (``actions``: the ones taken)."""
        if self.failed is not None:
            return
        demo = envs.demo_actions
        failed, resetting = set(envs.failed), set(getattr(envs, "resetting_rows", ()))
        for i, b in enumerate(self.builders):
            if i in resetting:  # a game resetting on its thread: no transition; its next step starts an episode
                self.following[i], self.at_start[i] = False, True
                continue
            if i in failed:  # a crashed game made afresh: the row is its new episode's first step, the policy's
                self.following[i], self.at_start[i] = False, bool(terminated[i] or truncated[i])
                continue
            if self.at_start[i]:
                self.at_start[i] = False
                self.following[i] = i in demo
                if self.following[i]:
                    b.start(obs[i])
            elif self.following[i] and i not in demo:  # the policy played a step: not a person's episode
                self.following[i] = False
                b.start(obs[i])  # drops what was collected
            ended = bool(terminated[i] or truncated[i])
            if self.following[i]:
                ep = b.step(actions[i], float(rewards[i]), next_obs[i], bool(terminated[i]), bool(truncated[i]))
                if ep is not None:
                    self._write(ep)
            elif ended and not self.at_start[i]:
                self.skipped += 1
            if ended:
                self.at_start[i], self.following[i] = True, False

    def _write(self, ep) -> None:
        try:
            if self.writer is None:
                self.writer = DatasetWriter(
                    self.path, self.env_id, self.observation_space, self.action_space, self.env_kwargs, append=True
                )
            self.writer.add(ep)
        except (DatasetError, OSError) as e:
            self.failed = str(e)
            log.error("worker.record_demos_to: %s; no more demonstrations are written", e)
            return
        self.written += 1
        log.info(
            "a person's episode (%d steps, return %.1f) written to %s (%d so far)",
            ep.steps,
            ep.episode_return,
            self.path,
            self.written,
        )


def live_recorder(cfg, envs, played_by: str) -> LiveRecorder | None:
    """The recorder a worker with ``worker.record_demos_to`` set keeps, else None."""
    path = cfg.worker.record_demos_to
    if not path:
        return None
    env = envs.envs[0]
    return LiveRecorder(
        Path(path).expanduser(),
        cfg.env.id,
        env.observation_space,
        env.action_space,
        envs.num_envs,
        played_by,
        cfg.env.kwargs,
    )
