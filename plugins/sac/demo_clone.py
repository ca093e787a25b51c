"""SAC from demonstrations: behaviour cloning of the policy before the first model, then SAC fine-tunes.

``learn_from_demos`` (the seam's, :class:`~mqttrl.plugin.algorithm.AlgorithmInfo`) runs
``demos.pretrain_updates`` steps of ``batch_size`` demonstration steps each on the learner's policy,
with a fresh Adam at ``demos.pretrain_lr``:

    loss = mean || tanh(mu(s)) - a_E ||^2

where a_E is the demonstrated action mapped into the squashed box [-1, 1] (the env's box's centre
and half-width, as the policy's actions are mapped out). Only the policy's mean moves: its log-std
head is left to SAC's entropy target (a likelihood loss would shrink the spread towards a
deterministic demonstrator's and SAC's temperature would then have to undo it). The critics are not
trained here; SAC fine-tunes from its first replayed samples. A resumed learner clones nothing, and
the learner's ``updates`` are not counted.
"""

from __future__ import annotations

import numpy as np

from mqttrl.plugin import Episode

from .common import action_scale


def squashed_actions(episodes: list[Episode], info) -> np.ndarray:
    """The demonstrated actions (T, A) in the policy's squashed box [-1, 1]."""
    center, half = action_scale(info)
    acts = np.concatenate([ep.actions.reshape(ep.steps, -1) for ep in episodes]).astype(np.float64)
    return np.clip((acts - center) / np.where(half > 0, half, 1.0), -1.0, 1.0).astype(np.float32)


def clone(learner, episodes: list[Episode], updates: int, lr: float = 1e-3) -> dict[str, float]:
    """``updates`` behaviour-cloning steps of the learner's policy mean; figures for the log."""
    import torch

    actor, dev = learner.actor, learner.device
    obs = torch.from_numpy(np.ascontiguousarray(np.concatenate([ep.obs[:-1] for ep in episodes]))).to(dev)
    target = torch.from_numpy(squashed_actions(episodes, learner.info)).to(dev)
    params = [p for name, p in actor.named_parameters() if not name.startswith("log_std")]
    optimizer = torch.optim.Adam(params, lr=lr)
    rng = np.random.default_rng(int(learner.rng.integers(2**31)))
    n = len(obs)

    def error(idx=None) -> torch.Tensor:
        mean, _log_std = actor(obs if idx is None else obs[idx])
        return ((torch.tanh(mean) - (target if idx is None else target[idx])) ** 2).mean()

    with torch.no_grad():
        before = float(error())
    losses = []
    for _ in range(updates):
        idx = torch.from_numpy(rng.integers(0, n, min(learner.params.batch_size, n))).to(dev)
        loss = error(idx)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        after = float(error())
    return {
        "demo_clone_updates": float(updates),
        "demo_clone_mse_before": before,
        "demo_clone_mse": after,
    }


def learn_from_demos(learner, dataset, settings, pretrain: bool) -> dict[str, float]:
    """The seam's ``learn_from_demos`` for SAC: behaviour cloning in a new run, nothing in a resumed one."""
    info = {"demo_episodes": float(len(dataset.episodes)), "demo_steps": float(dataset.steps)}
    if pretrain and settings.pretrain_updates > 0:
        info.update(clone(learner, dataset.episodes, settings.pretrain_updates, settings.pretrain_lr))
    return info
