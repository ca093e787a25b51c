"""The benchmarks' figures: one place that lays out and writes them, and the learning-curve figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .scenario import NO_TARGET


def new_figure(*args, **kwargs):
    """``plt.subplots`` on the file-only backend (benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def save_figure(fig, path: Path) -> None:
    """Lay out, write (creating its folder) and close a benchmark's figure; say where it went."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"figure: {path}")


def plot_curves(series: Sequence[tuple[str, list]], path: Path, title: str, target: float | None = None) -> None:
    """Two panels: greedy mean against the env steps each evaluated model was trained on (runs at
    equal data) and against seconds. ``series``: (name, curves), a curve per seed, each a list of
    (env_steps, seconds, mean) points as :mod:`mqttrl.observe.curves` has them."""
    fig, (by_steps, by_clock) = new_figure(1, 2, figsize=(13, 5), sharey=True)
    for k, (name, curves) in enumerate(series):
        for j, curve in enumerate(c for c in curves if c):
            style = dict(color=f"C{k}", alpha=0.85, marker=".", lw=1.2, label=name if j == 0 else None)
            by_steps.plot([p[0] for p in curve], [p[2] for p in curve], **style)
            by_clock.plot([p[1] for p in curve], [p[2] for p in curve], **style)
    by_steps.set_xlabel("env steps the evaluated model was trained on")
    by_clock.set_xlabel("seconds (mqttrl: the whole command; a baseline: training, evaluation excluded)")
    by_steps.set_ylabel("greedy return, mean of the evaluation episodes")
    for ax in (by_steps, by_clock):
        if target is not None and math.isfinite(target) and target < NO_TARGET:
            ax.axhline(target, color="grey", ls="--", lw=0.8)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    by_steps.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)
