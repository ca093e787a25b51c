"""How much of the network Adam's epsilon governs: the share of parameters whose bias-corrected
second-moment root sqrt(v_hat) is below ``eps``.

Adam steps ``lr * m_hat / (sqrt(v_hat) + eps)``. Where sqrt(v_hat) >> eps the step is about ``lr``
whatever the gradient's scale; where it is << eps the step is ``lr / eps * m_hat``, plain SGD with
momentum, and a small gradient moves the weight little. A distributional head spreads its loss over
51 atoms, so its gradients are orders of magnitude smaller than a scalar head's: with Dopamine's eps
3.125e-4 on MinAtar Breakout, all but a few per cent of rainbow's parameters were in the second
regime, about 40 % of dqn's (docs/benchmarks.md, "Adam's epsilon"). The learner reports this share
as ``adam_below_eps`` so that a head that learns slowly for this reason shows it.
"""

from __future__ import annotations

import torch


def below_eps(exp_avg_sq, step: float, eps: float, beta2: float):
    """Which elements of Adam's second moment ``exp_avg_sq`` (a torch tensor or a numpy array, after
    ``step`` steps) have sqrt(v_hat) < eps: sqrt(v / (1 - beta2^t)) < eps  <=>  v < eps^2 (1 - beta2^t)."""
    return exp_avg_sq < eps * eps * (1.0 - beta2**step)


def adam_below_eps(optimizer: torch.optim.Optimizer) -> float | None:
    """The share of the optimizer's parameter elements with sqrt(v_hat) < eps (None before its first
    step). One pass over the second moments; the learner calls it every so many updates."""
    below = total = 0
    for group in optimizer.param_groups:
        eps, beta2 = float(group["eps"]), float(group["betas"][1])
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state or "exp_avg_sq" not in state:
                continue
            v = state["exp_avg_sq"]
            below += int(below_eps(v, float(state["step"]), eps, beta2).sum())
            total += v.numel()
    return below / total if total else None


#: updates between two readings of Adam's second moments (one pass over them; a device sync on a GPU)
READ_EVERY = 1000


class AdamWatch:
    """The learner's ``adam_below_eps``: read from ``holder.optimizer`` (the update's Adam, whichever
    it holds now) every READ_EVERY updates, the first update's too (a figure from the start)."""

    def __init__(self, holder) -> None:
        self.holder = holder
        #: the last reading (None before the first step; a checkpoint keeps it)
        self.value: float | None = None

    def stepped(self, updates: int) -> None:
        if updates % READ_EVERY == 1:
            self.value = adam_below_eps(self.holder.optimizer)

    def report(self, metrics: dict[str, float]) -> None:
        if self.value is not None:
            metrics["adam_below_eps"] = self.value
