"""One recorded episode, and the builder that turns env steps into one.

An episode is what an algorithm needs to learn from someone's play, whatever the algorithm:
``obs`` has one row more than the actions (the observation after the last step is kept, for
bootstrapping a truncated episode and for n-step targets), ``actions`` and ``rewards`` one row
per step, and how it ended. Observations keep the env's dtype (a uint8 frame stays uint8).
"""

from __future__ import annotations

import attrs
import gymnasium as gym
import numpy as np


@attrs.frozen(eq=False)
class Episode:
    """``obs`` (T+1, *obs_shape), ``actions`` (T, *act_shape), ``rewards`` (T,) float32."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    #: the env ended it (a terminal state: no bootstrapping past the last step)
    terminated: bool
    #: cut by a time limit or by the recorder (the last observation is not terminal)
    truncated: bool
    #: who played it: "policy:module:function", "run:PATH", "person:NAME", "worker:NAME" ...
    played_by: str = ""
    #: the reset seed, when known
    seed: int | None = None

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def episode_return(self) -> float:
        return float(np.sum(self.rewards, dtype=np.float64))


def action_dtype(space: gym.Space) -> np.dtype:
    """The dtype actions are stored in: int64 for Discrete (as DQN's samples), the space's for the rest,
    float32 for float Boxes."""
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64)
    dtype = np.dtype(space.dtype)
    return np.dtype(np.float32) if dtype.kind == "f" else dtype


class EpisodeBuilder:
    """Collects one env's steps; :meth:`step` returns the finished :class:`Episode` when it ends.

    ``obs_space``/``act_space`` fix the stored dtypes and shapes, so an env that hands back float64
    observations or a Python int action gives the same arrays as any other recording."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, played_by: str = ""):
        from mqttrl.envs.rollout import obs_dtype

        self.obs_dtype = obs_dtype(obs_space)
        self.obs_shape = tuple(obs_space.shape)
        self.act_dtype = action_dtype(act_space)
        self.act_shape = tuple(act_space.shape or ())
        self.played_by = played_by
        self._obs: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._rewards: list[float] = []
        self._seed: int | None = None

    def start(self, obs: np.ndarray, seed: int | None = None) -> None:
        """A new episode from its first observation (an unfinished one is dropped)."""
        self._obs = [self._as_obs(obs)]
        self._actions, self._rewards, self._seed = [], [], seed

    @property
    def steps(self) -> int:
        return len(self._actions)

    def step(self, action, reward: float, next_obs: np.ndarray, terminated: bool, truncated: bool) -> Episode | None:
        if not self._obs:
            raise RuntimeError("EpisodeBuilder.step before start")
        self._actions.append(np.asarray(action, dtype=self.act_dtype).reshape(self.act_shape))
        self._rewards.append(float(reward))
        self._obs.append(self._as_obs(next_obs))
        if terminated or truncated:
            return self.finish(bool(terminated))
        return None

    def finish(self, terminated: bool = False) -> Episode | None:
        """End the open episode here (truncated unless ``terminated``); None when it has no step."""
        if not self._actions:
            self._obs = []
            return None
        ep = Episode(
            obs=np.stack(self._obs),
            actions=np.stack(self._actions),
            rewards=np.asarray(self._rewards, dtype=np.float32),
            terminated=terminated,
            truncated=not terminated,
            played_by=self.played_by,
            seed=self._seed,
        )
        self._obs, self._actions, self._rewards = [], [], []
        return ep

    def _as_obs(self, obs) -> np.ndarray:
        return np.asarray(obs, dtype=self.obs_dtype).reshape(self.obs_shape)
