"""DQN's demonstrations (DQfD, Hester et al. 2018): a replay part that is never evicted, mixed into
every batch at a set ratio, and the large-margin supervised loss.

``DemoReplay`` turns a dataset's episodes (:mod:`mqttrl.demos`) into the same n-step transitions
the actors send (``obs, action, reward, next_obs, discount``: reward the discounted sum of up to
``n_step`` rewards, discount ``gamma ** k``, 0 where the episode terminated inside the window, so a
truncated episode still bootstraps) and holds them in arrays of their own: the main replay's ring
overwrites its oldest transitions, this part never changes after it is built.

Each update appends ``extra_rows(batch_size)`` of its rows after the main replay's ``batch_size``
rows, so that they are ``demos.ratio`` of the batch; pretraining (:func:`pretrain`) trains on
batches of demonstrations alone. Demonstration rows have importance weight 1 and are not re-prioritized.
With ``demos.margin_loss`` > 0, the supervised loss ``max_a [Q(s, a) + l(a_E, a)] - Q(s, a_E)``
(l = ``demos.margin`` where a differs from the demonstrated a_E, else 0) over the demonstration
rows is added to the TD loss, weighted by it: the demonstrator's action is pushed above the others
by a margin, so the greedy policy imitates it where the TD targets alone say little.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from mqttrl.demos import Episode


def nstep_transitions(episodes: Iterable[Episode], gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """All n-step transitions of ``episodes``, one per step (as :class:`.actor.DQNActor` makes them)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "discount")}
    for ep in episodes:
        T = ep.steps
        r = ep.rewards.astype(np.float64)
        t = np.arange(T)
        k = np.minimum(n_step, T - t)  # rewards summed from step t
        reward = np.zeros(T)
        for j in range(n_step):
            inside = j < k
            reward[inside] += gamma**j * r[t[inside] + j]
        discount = gamma**k
        if ep.terminated:
            discount[t + k == T] = 0.0  # the terminal step is inside the window: no bootstrap
        parts["obs"].append(ep.obs[:T])
        parts["next_obs"].append(ep.obs[t + k])
        parts["action"].append(ep.actions.astype(np.int64).reshape(T))
        parts["reward"].append(reward.astype(np.float32))
        parts["discount"].append(discount.astype(np.float32))
    return {name: np.concatenate(arrs) for name, arrs in parts.items()}


@attrs.define
class DemoReplay:
    """A fixed set of demonstration transitions and how an update uses them."""

    arrays: dict[str, np.ndarray]
    #: share of each batch drawn from here once the main replay can be learned from
    ratio: float
    #: weight of the large-margin loss (0: off) and the margin l
    margin_loss: float = 0.0
    margin: float = 0.8
    rng: np.random.Generator = attrs.field(factory=np.random.default_rng)
    #: demonstration rows appended to the batch being trained (set by :meth:`mix`)
    _rows: int = attrs.field(default=0, init=False)

    @classmethod
    def of(cls, episodes: Iterable[Episode], gamma: float, n_step: int, settings, seed: int = 0) -> DemoReplay:
        return cls(
            nstep_transitions(episodes, gamma, n_step),
            ratio=float(settings.ratio),
            margin_loss=float(settings.margin_loss),
            margin=float(settings.margin),
            rng=np.random.default_rng(seed),
        )

    @property
    def size(self) -> int:
        return len(self.arrays["action"])

    def sample(self, n: int) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, n)
        return {name: arr[idx] for name, arr in self.arrays.items()}

    def margin_term(self, q_all, action, n: int):
        """DQfD's supervised loss over the last ``n`` rows (torch tensors: Q-values (B, A), actions (B,)), weighted."""
        import torch

        q, a = q_all[-n:], action[-n:]
        margins = torch.full_like(q, self.margin)
        margins.scatter_(1, a.unsqueeze(1), 0.0)
        loss = ((q + margins).max(dim=1).values - q.gather(1, a.unsqueeze(1)).squeeze(1)).mean()
        return self.margin_loss * loss

    # ---- the learner's hooks (plugins/dqn/learner.py calls these when it has demonstrations)

    def extra_rows(self, batch_size: int) -> int:
        """Demonstration rows appended to a batch of ``batch_size`` replay rows: ``ratio`` of the whole."""
        if self.ratio <= 0:
            return 0
        return max(1, round(batch_size * self.ratio / (1.0 - self.ratio))) if self.ratio < 1 else batch_size

    def mix(self, weights, batch: dict, device) -> tuple[Any, dict]:
        """A sampled batch (tensors on ``device``) with demonstration rows appended; their importance
        weights are 1 (numpy or torch weights, as the learner keeps them). Remembers the row count
        for :meth:`after_loss`."""
        import torch

        self._rows = n = self.extra_rows(len(next(iter(batch.values()))))
        if n == 0:
            return weights, batch
        demo = self.sample(n)
        batch = {k: torch.cat([v, torch.from_numpy(demo[k]).to(device)]) for k, v in batch.items()}
        if isinstance(weights, np.ndarray):
            weights = np.concatenate([weights, np.ones(n, weights.dtype)])
        elif weights is not None:
            weights = torch.cat([weights, torch.ones(n, dtype=weights.dtype, device=weights.device)])
        return weights, batch

    def after_loss(self, net, batch: dict, loss, elementwise, target, q):
        """The margin loss added (when on); per-row values cut to the replay's rows (only those are
        re-prioritized and reported)."""
        n = self._rows
        if n == 0:
            return loss, elementwise, target, q
        if self.margin_loss > 0:
            loss = loss + self.margin_term(net(batch["obs"][-n:]), batch["action"][-n:], n)
        return loss, elementwise[:-n], target[:-n], q[:-n]


def pretrain(learner, demos: DemoReplay, updates: int) -> dict[str, float]:
    """DQfD's pretraining: ``updates`` gradient steps on demonstration batches alone (TD loss plus the
    margin loss), the target net copied on its usual cadence. They do not count as the learner's
    ``updates`` (the replay ratio's pacing starts when the workers' samples do)."""
    import torch

    p, net = learner.params, learner.online
    losses = []
    for i in range(updates):
        demo = {k: torch.from_numpy(v).to(learner.device) for k, v in demos.sample(p.batch_size).items()}
        if net.spec.noisy:
            net.reset_noise(generator=learner.noise_rng)
            learner.target.reset_noise(generator=learner.noise_rng)
        next_out = learner._next_targets(demo["next_obs"])
        loss, *_ = learner._loss(demo["obs"], demo["action"], demo["reward"], demo["discount"], next_out, None)
        if demos.margin_loss > 0:
            loss = loss + demos.margin_term(net(demo["obs"]), demo["action"], p.batch_size)
        learner._optimize(loss)
        losses.append(float(loss.detach()))
        if (i + 1) % p.target_update_every == 0:
            learner._update_target()
    if updates:
        learner._update_target()
    return {
        "demo_pretrain_updates": float(updates),
        "demo_pretrain_loss": float(np.mean(losses[-100:]) if losses else 0.0),
    }


def learn_from_demos(learner, dataset, settings, pretrain_now: bool) -> dict[str, float]:
    """The seam's ``learn_from_demos`` for DQN: the dataset as the learner's never-evicted replay part,
    then (a new run, not a resumed one) ``demos.pretrain_updates`` updates on it alone."""
    p = learner.params
    demos = DemoReplay.of(dataset.episodes, p.gamma, p.n_step, settings, seed=int(learner.rng.integers(2**31)))
    learner.demos = demos
    info = {"demo_transitions": float(demos.size), "demo_episodes": float(len(dataset.episodes))}
    if pretrain_now and settings.pretrain_updates > 0:
        info.update(pretrain(learner, demos, settings.pretrain_updates))
    return info
