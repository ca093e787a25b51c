"""PPO from demonstrations: behaviour cloning before the first round, then PPO fine-tunes.

``learn_from_demos`` (the seam's, :class:`~mqttrl.plugin.algorithm.AlgorithmInfo`) runs
``demos.pretrain_updates`` minibatch steps (``minibatch_size`` demonstration steps each) of

    loss = -log pi(a_E | s)  +  vf_coef * 0.5 * (V(s) - G)^2

on the learner's agent, where G is the discounted return-to-go of the demonstration from s (the
critic starts out valuing the demonstrator's behaviour, so the first PPO rounds' advantages are
not noise around a random critic, which would pull the cloned policy apart). With ``obs_norm``
the observation statistics first take in the demonstrations' observations, so the first published
model normalises as its cloning did. A fresh Adam is used and the learner's ``updates`` are not
counted: PPO's own optimizer state and schedules start with its first round. A resumed learner
does nothing here (its checkpoint holds the cloned-and-tuned policy).
"""

from __future__ import annotations

import numpy as np

from mqttrl.demos import Episode

from .common import normalize_obs


def returns_to_go(ep: Episode, gamma: float) -> np.ndarray:
    """Discounted return from each step to the episode's end (a truncated episode: to its last step)."""
    out = np.zeros(ep.steps, np.float64)
    acc = 0.0
    for t in range(ep.steps - 1, -1, -1):
        acc = float(ep.rewards[t]) + gamma * acc
        out[t] = acc
    return out.astype(np.float32)


def clone(learner, episodes: list[Episode], updates: int) -> dict[str, float]:
    """``updates`` behaviour-cloning steps of the learner's agent on ``episodes``; figures for the log."""
    import torch

    p, agent = learner.params, learner.agent
    obs = np.concatenate([ep.obs[:-1] for ep in episodes])
    actions = np.concatenate([ep.actions for ep in episodes])
    ret = np.concatenate([returns_to_go(ep, p.gamma) for ep in episodes])
    if learner.obs_rms is not None:
        learner.obs_rms.update(np.concatenate([ep.obs for ep in episodes]))
        obs = normalize_obs(obs, learner.obs_rms.mean, learner.obs_rms.var, p.obs_clip)
    dev = learner.device
    obs_t = torch.from_numpy(np.ascontiguousarray(obs)).to(dev)
    act_t = torch.from_numpy(np.ascontiguousarray(actions.reshape(len(actions), -1) if learner.continuous else actions))
    act_t, ret_t = act_t.to(dev), torch.from_numpy(ret).to(dev)
    optimizer = torch.optim.Adam(agent.parameters(), lr=p.lr, eps=p.adam_eps)
    rng = np.random.default_rng(int(learner.rng.integers(2**31)))
    n, bc, vl = len(obs), [], []
    for _ in range(updates):
        idx = torch.from_numpy(rng.integers(0, n, min(p.minibatch_size, n))).to(dev)
        logprob, _entropy, value = agent.evaluate(obs_t[idx], act_t[idx])
        bc_loss = -logprob.mean()
        v_loss = 0.5 * ((value - ret_t[idx]) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        (bc_loss + p.vf_coef * v_loss).backward()
        if p.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(agent.parameters(), p.max_grad_norm)
        optimizer.step()
        bc.append(float(bc_loss.detach()))
        vl.append(float(v_loss.detach()))
    with torch.no_grad():
        out, _ = agent(obs_t)
        agree = float((out.argmax(-1) == act_t).float().mean()) if not learner.continuous else float("nan")
    return {
        "demo_clone_updates": float(updates),
        "demo_clone_nll": float(np.mean(bc[-50:])) if bc else 0.0,
        "demo_value_loss": float(np.mean(vl[-50:])) if vl else 0.0,
        "demo_greedy_agreement": agree,
    }


def learn_from_demos(learner, dataset, settings, pretrain: bool) -> dict[str, float]:
    """The seam's ``learn_from_demos`` for PPO: behaviour cloning in a new run, nothing in a resumed one."""
    info = {"demo_episodes": float(len(dataset.episodes)), "demo_steps": float(dataset.steps)}
    if pretrain and settings.pretrain_updates > 0:
        info.update(clone(learner, dataset.episodes, settings.pretrain_updates))
    return info
