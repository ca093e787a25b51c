"""A person's returns beside the agent's: ``[train] human_baseline``, the JSON ``mqttrl play`` writes.

Atari's human-normalised score, ``(agent - random) / (human - random)``: 0 is random play, 1 a
person's. The random policy's mean is the file's ``random`` entry (``mqttrl play --random-episodes
N`` plays it on the same game, through the same readers); without one, the score is the agent's
share of the person's mean, ``agent / human``, and named so (``of_human``). Read once when the run
starts: a missing or malformed file is one line then, not a hole in ``summary.json`` at the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs

from mqttrl.config.settings import ConfigError


@attrs.frozen
class Baseline:
    path: str
    human: float
    random: float | None = None

    def fields(self, final: float | None, best: float | None) -> dict:
        """``summary.json``'s baseline fields for the run's final and best evaluation means (None: none)."""
        out: dict = {"human_baseline": self.path, "human_mean": self.human, "random_mean": self.random}
        normalized = self.random is not None and self.human != self.random
        for name, score in (("final", final), ("best", best)):
            key = f"human_normalized_{name}" if normalized else f"of_human_{name}"
            value = None if score is None else self.score(score)
            out[key] = None if value is None else round(value, 4)
        return out

    def score(self, agent: float) -> float | None:
        """``(agent - random) / (human - random)``, or ``agent / human`` without a random mean (None
        for a person's mean of 0)."""
        if self.random is not None and self.human != self.random:
            return (agent - self.random) / (self.human - self.random)
        return agent / self.human if self.human else None


def load_baseline(path: str) -> Baseline | None:
    """The baseline at ``path`` (``""``: none); a file that cannot be read is a :class:`ConfigError`."""
    if not path:
        return None
    where = f"train.human_baseline = {path!r}"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file (mqttrl play CONFIG -o {path} writes it)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: not a baseline file ({e})") from None
    human = data.get("mean") if isinstance(data, dict) else None
    if not _number(human):
        raise ConfigError(f"{where}: no 'mean' of the person's returns (mqttrl play writes one)")
    random = data.get("random", {}).get("mean") if isinstance(data.get("random"), dict) else None
    return Baseline(path, float(human), float(random) if _number(random) else None)


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
