"""PPO from demonstrations: behaviour cloning before the first round, then PPO fine-tunes with a
decaying behaviour-cloning term (DAPG, Rajeswaran et al. 2018).

``learn_from_demos`` (the seam's, :class:`~mqttrl.plugin.algorithm.AlgorithmInfo`) runs
``demos.pretrain_updates`` minibatch steps (``minibatch_size`` demonstration steps each) of

    loss = -log pi(a_E | s)  +  vf_coef * 0.5 * (V(s) - G)^2

on the learner's agent, where G is the discounted return-to-go of the demonstration from s (the
critic starts out valuing the demonstrator's behaviour, so the first PPO rounds' advantages are
not noise around a random critic, which would pull the cloned policy apart). Three things make the
clone fit (measured on LunarLander, docs/benchmarks.md; before them 1,000 steps left 75 % greedy
agreement with the heuristic lander and a clone that crashed, after them 93-95 % and a clone that
lands): the actor's and the critic's gradients are clipped apart (``max_grad_norm`` each: one norm
over both let the critic's large return errors scale the actor's step down to nothing), the
critic's output bias starts at the demonstrations' mean return, and the step size is
``demos.pretrain_lr`` (1e-3), not PPO's. With ``obs_norm`` the observation statistics first take in
the demonstrations' observations, so the first published model normalises as its cloning did.
A fresh Adam is used and the learner's ``updates`` are not counted: PPO's own optimizer state and
schedules start with its first round. A resumed learner clones nothing (its checkpoint holds the
cloned-and-tuned policy) but keeps the fine-tuning term at its decayed weight.

During fine-tuning (``demos.bc_coef`` > 0), each PPO minibatch step adds
``w * -log pi(a_E | s)`` over ``minibatch_size`` demonstration steps drawn afresh, with ``w`` going
linearly from ``bc_coef`` to 0 over the first ``demos.bc_env_steps`` env steps the learner trains
on (``learner.demo_bc``, :class:`BCAnchor`; the hook is one line in :meth:`PPOLearner._update`):
PPO's first rounds, whose advantages come from a critic that has seen only the demonstrator, cannot
pull the policy far from the demonstrator's, and PPO has it to itself afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np

from mqttrl.plugin import Episode

from .common import normalize_obs

if TYPE_CHECKING:  # torch is imported where it is used
    import torch


def returns_to_go(ep: Episode, gamma: float) -> np.ndarray:
    """Discounted return from each step to the episode's end (a truncated episode: to its last step)."""
    out = np.zeros(ep.steps, np.float64)
    acc = 0.0
    for t in range(ep.steps - 1, -1, -1):
        acc = float(ep.rewards[t]) + gamma * acc
        out[t] = acc
    return out.astype(np.float32)


def _actions(learner, episodes: list[Episode]) -> np.ndarray:
    actions = np.concatenate([ep.actions for ep in episodes])
    return np.ascontiguousarray(actions.reshape(len(actions), -1) if learner.continuous else actions)


def _critic_out(agent):
    """The critic's output layer (an MLP's last Linear, or the CNN's linear head)."""
    return agent.critic[-1] if hasattr(agent.critic, "__getitem__") else agent.critic


def param_groups(agent) -> tuple[list, list]:
    """(actor parameters: the actor, its log-std, a shared torso; critic parameters)."""
    actor: list[torch.nn.Parameter] = []
    critic: list[torch.nn.Parameter] = []
    for name, param in agent.named_parameters():
        (critic if name.startswith("critic") else actor).append(param)
    return actor, critic


def clone(learner, episodes: list[Episode], updates: int, lr: float = 1e-3) -> dict[str, float]:
    """``updates`` behaviour-cloning steps of the learner's agent on ``episodes``; figures for the log."""
    import torch

    p, agent = learner.params, learner.agent
    obs = np.concatenate([ep.obs[:-1] for ep in episodes])
    actions = _actions(learner, episodes)
    ret = np.concatenate([returns_to_go(ep, p.gamma) for ep in episodes])
    if learner.obs_rms is not None:
        learner.obs_rms.update(np.concatenate([ep.obs for ep in episodes]))
        obs = normalize_obs(obs, learner.obs_rms.mean, learner.obs_rms.var, p.obs_clip)
    dev = learner.device
    obs_t = torch.from_numpy(np.ascontiguousarray(obs)).to(dev)
    act_t, ret_t = torch.from_numpy(actions).to(dev), torch.from_numpy(ret).to(dev)
    with torch.no_grad():  # the critic learns the returns' spread, not their level
        _critic_out(agent).bias.fill_(float(ret.mean()))
    actor_params, critic_params = param_groups(agent)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=p.adam_eps)
    rng = np.random.default_rng(int(learner.rng.integers(2**31)))
    n, bc, vl = len(obs), [], []
    for _ in range(updates):
        idx = torch.from_numpy(rng.integers(0, n, min(p.minibatch_size, n))).to(dev)
        logprob, _entropy, value = agent.evaluate(obs_t[idx], act_t[idx])
        bc_loss = -logprob.mean()
        v_loss = 0.5 * ((value - ret_t[idx]) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        (bc_loss + p.vf_coef * v_loss).backward()
        if p.max_grad_norm > 0:  # apart: the critic's large errors must not scale the actor's step down
            torch.nn.utils.clip_grad_norm_(actor_params, p.max_grad_norm)
            torch.nn.utils.clip_grad_norm_(critic_params, p.max_grad_norm)
        optimizer.step()
        bc.append(float(bc_loss.detach()))
        vl.append(float(v_loss.detach()))
    figures = {
        "demo_clone_updates": float(updates),
        "demo_clone_nll": float(np.mean(bc[-50:])) if bc else 0.0,
        "demo_value_loss": float(np.mean(vl[-50:])) if vl else 0.0,
    }
    with torch.no_grad():
        out, value = agent(obs_t)
        figures["demo_value_rmse"] = float(((value - ret_t) ** 2).mean().sqrt())
        if learner.continuous:
            figures["demo_mean_action_error"] = float((out - act_t).abs().mean())
        else:
            figures["demo_greedy_agreement"] = float((out.argmax(-1) == act_t).float().mean())
    return figures


@attrs.define
class BCAnchor:
    """The demonstrations kept for PPO's fine-tuning: a behaviour-cloning term whose weight decays
    linearly from ``coef`` to 0 over ``env_steps`` trained-on env steps."""

    obs: np.ndarray  # raw observations (normalised when drawn, with the learner's statistics then)
    actions: np.ndarray
    coef: float
    env_steps: int
    rng: np.random.Generator

    def weight(self, samples_added: int) -> float:
        if self.coef <= 0 or self.env_steps <= 0:
            return 0.0
        return self.coef * max(0.0, 1.0 - samples_added / self.env_steps)

    def loss(self, learner):
        """``weight * -log pi(a_E | s)`` over ``minibatch_size`` demonstration steps, or 0 (a float)
        once the weight is 0."""
        import torch

        w = self.weight(learner.samples_added)
        if w <= 0:
            return 0.0
        idx = self.rng.integers(0, len(self.obs), min(learner.params.minibatch_size, len(self.obs)))
        obs = self.obs[idx]
        if learner.obs_rms is not None:
            obs = normalize_obs(obs, learner.obs_rms.mean, learner.obs_rms.var, learner.params.obs_clip)
        dev = learner.device
        out, _value = learner.agent(torch.from_numpy(np.ascontiguousarray(obs)).to(dev))
        logprob, _entropy = learner.agent._logprob_entropy(out, torch.from_numpy(self.actions[idx]).to(dev))
        return -w * logprob.mean()


def learn_from_demos(learner, dataset, settings, pretrain: bool) -> dict[str, float]:
    """The seam's ``learn_from_demos`` for PPO: behaviour cloning in a new run (nothing in a resumed
    one), and the fine-tuning term (``demos.bc_coef``) in both."""
    info = {"demo_episodes": float(len(dataset.episodes)), "demo_steps": float(dataset.steps)}
    if pretrain and settings.pretrain_updates > 0:
        info.update(clone(learner, dataset.episodes, settings.pretrain_updates, settings.pretrain_lr))
    if settings.bc_coef > 0 and settings.bc_env_steps > 0:
        learner.demo_bc = BCAnchor(
            np.concatenate([ep.obs[:-1] for ep in dataset.episodes]),
            _actions(learner, dataset.episodes),
            float(settings.bc_coef),
            int(settings.bc_env_steps),
            np.random.default_rng(int(learner.rng.integers(2**31))),
        )
        info["demo_bc_weight"] = learner.demo_bc.weight(learner.samples_added)
    return info
