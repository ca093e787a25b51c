"""What a run leaves behind, made in-process for the policy and export tests: a learner of the real
algorithm (torch), its weights moved away from the initial ones, written as a run directory.

``make_run(root, algorithm, env_id, **params)`` writes, under ``root``,

* ``config.json``: the resolved run config (``write_resolved``, as ``mqttrl train`` writes it);
* ``checkpoints/ckpt-...`` + ``checkpoints/latest``: the learner's checkpoint as the learner node
  saves it (``algo/`` tensors, ``meta.json`` with ``algo``, ``node``, ``config``), model version 7;
* ``exported/weights.safetensors``: the learner's weights message (``encode_weights``), version 7.

The learner's weights are moved from their initial values (:func:`perturb`), with the first seed (from
``seed`` on) whose greedy actions differ between the observations of :meth:`Run.observations`, so that
comparing actions means something.

:data:`CASES` is the set of runs the policy and export tests check, :func:`greedy` the actions a
network's outputs give.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import gymnasium as gym
import numpy as np
import torch

from helpers.pixel_env import BOOL_GRID, PIXEL_DOT
from mqttrl.config import RunConfig, from_dict
from mqttrl.envs.make import make_env
from mqttrl.plugin.manager import get_registry
from mqttrl.state.checkpoint import CheckpointStore
from mqttrl.state.run_dir import write_resolved
from mqttrl.wire import encode_weights

VERSION = 7

#: id -> (algorithm, env id, parameters): every built-in head and torso, and both action kinds of PPO
CASES = {
    "dqn-mlp": ("dqn", "CartPole-v1", {}),
    "dqn-c51-noisy": ("dqn", "CartPole-v1", {"distributional": "c51", "noisy": True, "v_min": -10.0, "v_max": 10.0}),
    "dqn-qr": ("dqn", "CartPole-v1", {"distributional": "qr", "dueling": False}),
    "dqn-cnn": ("dqn", PIXEL_DOT, {"network": "minatar_cnn"}),
    "ppo-discrete": ("ppo", "CartPole-v1", {"obs_norm": True}),
    "ppo-box": ("ppo", "Pendulum-v1", {"obs_norm": True}),
    "ppo-cnn": ("ppo", BOOL_GRID, {"network": "minatar_cnn"}),
    "sac-box": ("sac", "Pendulum-v1", {}),
}

#: DQN's small MLP and PPO's defaults are what a test usually wants; the CNNs need an image env
SMALL = {
    "dqn": {"hidden": [32, 32], "buffer_size": 1000, "batch_size": 16},
    "ppo": {"hidden": [32, 32]},
    "sac": {"hidden": [32, 32], "buffer_size": 1000, "batch_size": 16},
}


@attrs.frozen
class Run:
    root: Path
    config: RunConfig
    learner: object
    obs_space: object
    act_space: object

    @property
    def checkpoint(self) -> Path:
        return CheckpointStore(self.root / "checkpoints").latest()

    @property
    def weights(self) -> Path:
        return self.root / "exported" / "weights.safetensors"

    def observations(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` observations: samples of the space (wide, so both actions show up) and states of the env."""
        space = self.obs_space
        space.seed(seed)
        samples = [space.sample() for _ in range(n // 2)]
        env = make_env(self.config.env.id, self.config.env.kwargs)
        obs, _ = env.reset(seed=seed)
        while len(samples) < n:
            samples.append(obs)
            obs, _, term, trunc, _ = env.step(self.act_space.sample())
            if term or trunc:
                obs, _ = env.reset()
        env.close()
        return np.stack(samples).astype(space.dtype)

    def torch_outputs(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """The learner's own network (torch) on ``obs``: DQN ``q`` (a noisy head with its mean weights),
        PPO ``logits`` or ``mean``, and ``value``, with PPO's observation normalisation as it trains."""
        x = torch.from_numpy(np.ascontiguousarray(obs))
        with torch.no_grad():
            if self.config.algorithm.name == "dqn":
                net = self.learner.online
                q = net(x, noise=False) if self.config.algorithm.params.noisy else net(x)
                return {"q": q.numpy()}
            if self.config.algorithm.name == "sac":
                mean, log_std = self.learner.actor(x)
                return {
                    "action": self.learner.actor.greedy(x).numpy(),
                    "mean": mean.numpy(),
                    "log_std": log_std.numpy(),
                }
            from mqttrl_plugins.ppo.common import normalize_obs

            if self.learner.obs_rms is not None:
                rms = self.learner.obs_rms
                x = torch.from_numpy(normalize_obs(obs, rms.mean, rms.var, self.config.algorithm.params.obs_clip))
            agent = self.learner.agent
            out, value = agent(x)
            if agent.continuous:
                return {
                    "mean": out.numpy(),
                    "log_std": agent.actor_logstd.expand_as(out).numpy(),
                    "value": value.numpy(),
                }
            return {"logits": out.numpy(), "value": value.numpy()}


def perturb(learner, rng: np.random.Generator) -> None:
    """Move every weight (and PPO's observation statistics) away from its initial value, so that a
    loader that ignored the saved weights, or a normalisation left out, shows."""
    nets = [getattr(learner, name) for name in ("online", "agent", "actor") if hasattr(learner, name)]
    with torch.no_grad():
        for net in nets:
            for p in net.parameters():  # on the scale of each tensor's own values: the outputs stay varied
                scale = 0.5 * max(float(p.abs().mean()), 0.01)
                p.add_(torch.from_numpy(rng.normal(0.0, scale, tuple(p.shape)).astype(np.float32)))
    rms = getattr(learner, "obs_rms", None)
    if rms is not None:
        rms.mean = rng.normal(0.0, 0.5, rms.mean.shape)
        rms.var = rng.uniform(0.2, 3.0, rms.var.shape)


def make_run(root: Path, algorithm: str, env_id: str, seed: int = 3, env_kwargs: dict | None = None, **params) -> Run:
    registry = get_registry()
    env = {"id": env_id, **({"kwargs": env_kwargs} if env_kwargs else {})}
    data = {"run": f"t-{algorithm}", "env": env, "algorithm": {"name": algorithm, **params}}
    config = from_dict(data, lambda name: registry.algorithm(name).params)
    env = make_env(env_id, env_kwargs or {}, registry)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    for attempt in range(40):  # weights whose greedy actions differ between the test observations
        learner = registry.algorithm(algorithm).make_learner(
            config.algorithm.params, obs_space, act_space, "cpu", seed + attempt
        )
        perturb(learner, np.random.default_rng(seed + attempt))
        run = Run(root, config, learner, obs_space, act_space)
        if not isinstance(act_space, gym.spaces.Discrete):
            break
        out = run.torch_outputs(run.observations(64))
        if len(np.unique((out["q"] if "q" in out else out["logits"]).argmax(axis=1))) > 1:
            break
    else:
        raise AssertionError(f"no weights of {algorithm} on {env_id} act differently on different observations")
    root.mkdir(parents=True, exist_ok=True)
    write_resolved(config, root / "config.json")
    tensors, meta = learner.state_dict(include_replay=False)
    CheckpointStore(root / "checkpoints").save_periodic(
        11,
        {f"algo/{k}": v for k, v in tensors.items()},
        {"algo": meta, "node": {"version": VERSION}, "config": config.to_dict()},
    )
    weights, info = learner.export_weights()
    (root / "exported").mkdir()
    (root / "exported" / "weights.safetensors").write_bytes(
        encode_weights(VERSION, algorithm, config.run, weights, info)
    )
    return run


def greedy(run, out: dict[str, np.ndarray]) -> np.ndarray:
    """The greedy actions the network's outputs give."""
    if "q" in out:
        return out["q"].argmax(axis=1)
    if "logits" in out:
        return out["logits"].argmax(axis=1)
    if "action" in out:  # SAC: tanh(mean) scaled into the box
        return out["action"]
    return np.clip(out["mean"], run.act_space.low, run.act_space.high)
