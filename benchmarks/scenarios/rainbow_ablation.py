"""Rainbow's ablation on MinAtar Breakout: the same config with one ingredient on at a time, 10
minutes a run (docs/benchmarks/rainbow.md). Every variant sets each ingredient's key, so what the
config writes about them does not matter; ``--config`` runs the ablation on another config (one with
a C51 support: v_min and v_max). Variants (VARIANTS):

- ``dqn``: double, dueling, n-step, uniform replay, the epsilon ladder (no preset);
- ``per-max``, ``per-actor``: prioritized replay, new transitions at the running maximum priority or
  at priorities the actors computed (Ape-X);
- ``c51``, ``qr``: the distributional heads; ``noisy``: noisy nets instead of the epsilon ladder;
- ``rainbow``: the preset (C51, noisy, prioritized with actor priorities, double, dueling, 3-step);
- ``rainbow-resets``: rainbow with shrink-and-perturb resets every 7,000 updates (one in a 100k-env-step run).
"""

import json

from benchmarks.harness.scenario import NO_TARGET, Mqttrl, Scenario
from mqttrl_plugins.dqn.common import PRESETS

#: each ingredient's key when it is off (every variant sets all of them)
OFF: dict[str, object] = {
    "preset": "none",
    "prioritized": False,
    "initial_priority": "actor",
    "distributional": "none",
    "noisy": False,
    "reset_every": 0,
}


def variant(**on: object) -> tuple[str, ...]:
    """The --set overrides of the config with these ingredients on and every other one off (values
    as TOML: true/false, numbers and "strings" are written alike in JSON and TOML)."""
    return tuple(f"algorithm.{key}={json.dumps(value)}" for key, value in {**OFF, **on}.items())


#: variant -> the --set overrides that make it from the config
VARIANTS: dict[str, tuple[str, ...]] = {
    "dqn": variant(),
    "per-max": variant(prioritized=True, initial_priority="max"),
    "per-actor": variant(prioritized=True, initial_priority="actor"),
    "c51": variant(distributional="c51"),
    "qr": variant(distributional="qr"),
    "noisy": variant(noisy=True),
    "rainbow": variant(preset="rainbow", **PRESETS["rainbow"]),
    # one reset in 100k env steps at replay ratio 8 and batch 64 (12,500 updates), at 56k env steps;
    # every 4,000 updates left rainbow no time to recover (docs/benchmarks/rainbow.md, issue 24)
    "rainbow-resets": variant(preset="rainbow", **PRESETS["rainbow"], reset_every=7000),
}

SCENARIO = Scenario(
    title="Rainbow ablation, MinAtar Breakout",
    page="benchmarks/rainbow.md",
    target=NO_TARGET,  # none: the variants are compared by their best greedy mean
    measure="best",
    seconds=600,
    stop_at_target=False,
    sides=tuple(Mqttrl(name, "configs/minatar_breakout_dqn.toml", sets) for name, sets in VARIANTS.items()),
    headline=False,
)
