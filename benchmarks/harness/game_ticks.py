"""A game's own tick counter, for a game that has none: run an unchanged Python game with its frames
counted, to see how fast its clock runs (``[env] game_speed`` under libfaketime, docs/real-time.md).

    python -m benchmarks.harness.game_ticks FILE pygame mqttrl_plugins.screen.demo_game --fps 30
    python -m benchmarks.harness.game_ticks FILE turtle freegames.pacman

``pygame`` counts ``pygame.display.flip`` calls (a frame drawn); ``turtle`` counts the callbacks of
``turtle.ontimer`` as they run (a turtle game's tick: freegames' games schedule their next move so).
The count goes to FILE at every tick, as one fixed-width line written in place (one ``pwrite``), so
a reader never sees half a number: :func:`read_ticks`. The game's module runs as ``__main__`` with
the rest of the arguments as its own.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

WIDTH = 16


class Counter:
    """Ticks counted into an open file."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.n = 0
        self.write()

    def write(self) -> None:
        os.pwrite(self.fd, f"{self.n:{WIDTH}d}\n".encode(), 0)

    def tick(self) -> None:
        self.n += 1
        self.write()


def count_pygame(counter: Counter) -> None:
    import pygame

    flip = pygame.display.flip

    def counted_flip(*args):
        counter.tick()
        return flip(*args)

    pygame.display.flip = counted_flip


def count_turtle(counter: Counter) -> None:
    import turtle

    ontimer = turtle.ontimer

    def counted_ontimer(fun, t=0):
        def run():
            counter.tick()
            fun()

        return ontimer(run, t)

    turtle.ontimer = counted_ontimer


def read_ticks(path: str | Path) -> int | None:
    """The count a game wrote to ``path``, or None before it wrote one."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.strip() else None


def ticks_per_s(path: str | Path, seconds: float, warmup_s: float = 0.0) -> float:
    """The game's ticks per wall second over ``seconds`` (after ``warmup_s``), from its count file."""
    time.sleep(warmup_s)
    t0, n0 = time.monotonic(), read_ticks(path) or 0
    time.sleep(seconds)
    t1, n1 = time.monotonic(), read_ticks(path) or 0
    return (n1 - n0) / (t1 - t0)


def main(argv: list[str]) -> None:
    path, kind, module, *rest = argv
    counter = Counter(path)
    {"pygame": count_pygame, "turtle": count_turtle}[kind](counter)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
