"""One log line when C51's support is too narrow for the returns the agent now earns.

A support chosen for an early agent (MinAtar Breakout's [-10, 10] holds the values of 100k env steps)
can be outgrown as the agent improves: targets beyond v_max are clipped onto the edge atom and the
head can no longer tell good states from better ones, which shows only as a learning curve that
flattens. The learner's metrics carry ``target_edge_mass`` (the share of the projected targets on the
two edge atoms); this watch turns a lasting rise of it into a warning that names the fix.
"""

from __future__ import annotations

import logging

log = logging.getLogger("mqttrl.dqn")


class SupportWatch:
    """A running mean of ``target_edge_mass`` over about ``window`` updates; it warns once when the
    mean passes ``threshold`` after at least ``window`` updates, and again only after it has fallen
    below half the threshold (a support widened by a restart, or returns that came back).

    The default threshold is twice the edge share of a flat distribution over ``n_atoms`` (an
    untrained head's; 4 / 51 = 7.8 %), and at least 5 %: a support that fits keeps ~1e-4 there."""

    def __init__(
        self, v_min: float, v_max: float, n_atoms: int = 51, threshold: float | None = None, window: int = 1000
    ):
        self.v_min, self.v_max = v_min, v_max
        self.threshold = max(0.05, 4.0 / n_atoms) if threshold is None else threshold
        self.window = window
        self.mean = 0.0
        self.seen = 0
        self.warned = False

    @classmethod
    def over(cls, support) -> SupportWatch:
        """The watch of a C51 head's ``support`` (its atoms, a tensor or an array)."""
        return cls(float(support[0]), float(support[-1]), len(support))

    def report(self, metrics: dict[str, float]) -> None:
        """The learner's hook: watch its metrics' ``target_edge_mass``."""
        self.observe(metrics.get("target_edge_mass"))

    def observe(self, edge_mass: float | None) -> bool:
        """Take one update's edge mass (None: no figure this update); True when this call warned."""
        if edge_mass is None:
            return False
        self.seen += 1
        self.mean += (float(edge_mass) - self.mean) / min(self.seen, self.window)
        if self.warned and self.mean < self.threshold / 2:
            self.warned = False
        if self.warned or self.seen < self.window or self.mean <= self.threshold:
            return False
        self.warned = True
        log.warning(
            "C51's support [%g, %g] is too narrow for the returns: %.1f%% of the target mass sits on its "
            "edge atoms (mean of the last %d updates); set algorithm.v_min / v_max wider (or reward_max)",
            self.v_min,
            self.v_max,
            100 * self.mean,
            self.window,
        )
        return True
