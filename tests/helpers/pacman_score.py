"""Pacman of Free Python Games (``pip install freegames``), run unchanged, with its score logged.

    python tests/helpers/pacman_score.py LOG [SEED]

The game is a module that plays when imported (``setup``, ``world``, ``move``, ``done()``: Tk's
main loop). Nothing of it is edited: this makes the module object itself (importlib), seeds
``random`` (the ghosts' turns) before it runs, and schedules, on the turtle Screen that the game
then shares, a timer that reads the module's own ``state['score']`` every 20 ms and appends
``time.monotonic() score`` to LOG whenever it changed (and once at the start). The game writes its
score at the start of each 100 ms tick, before that tick's pellet: the screen shows the score one
tick late (the tests allow it). When a ghost has caught Pacman (the game's own test: a ghost
within 20 px of it; the game then stops), ``time.monotonic()`` is written once to ``LOG.over``.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
import turtle

POLL_MS = 20


def main() -> None:
    log_path = sys.argv[1]
    if len(sys.argv) > 2:
        random.seed(int(sys.argv[2]))
    spec = importlib.util.find_spec("freegames.pacman")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    out = open(log_path, "a", buffering=1)
    screen = turtle.Screen()
    last, over = [None], [False]

    def poll() -> None:
        state = getattr(module, "state", None)
        if state is not None and state["score"] != last[0]:
            last[0] = state["score"]
            out.write(f"{time.monotonic():.4f} {state['score']}\n")
        pacman, ghosts = getattr(module, "pacman", None), getattr(module, "ghosts", [])
        if not over[0] and pacman is not None and any(abs(pacman - point) < 20 for point, _ in ghosts):
            over[0] = True
            with open(f"{log_path}.over", "w") as f:
                f.write(f"{time.monotonic():.4f}\n")
        screen.ontimer(poll, POLL_MS)

    screen.ontimer(poll, POLL_MS)
    spec.loader.exec_module(module)  # plays until the window is closed (turtle.done())


if __name__ == "__main__":
    main()
