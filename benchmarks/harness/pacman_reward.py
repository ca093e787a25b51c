"""The reward of freegames' Pacman (``pip install freegames``) read off its 420x420 window: +1 when
the score (drawn in white at the top right) changes, done when the maze has not changed for
``STILL_FRAMES`` frames (a caught Pacman just stops the game; the window stays, frozen).

The score is the dots eaten and a dot is one a tile, four game ticks apart: between two frames it
goes up by at most one, so a change of its pixels is exactly its delta (no glyphs needed). Ghosts
move every tick, so a maze still for a second is the game over and never play.
"""

from __future__ import annotations

import numpy as np

#: the score's pixels (rows, columns) and the maze's, in the window's frame
SCORE = (slice(30, 65), slice(340, 420))
MAZE = (slice(20, 380), slice(20, 340))
#: frames (0.1 s each) of a still maze that are the game over
STILL_FRAMES = 10


class PacmanScore:
    """``(reward, done)`` per frame; one instance per env (the screen kit makes it from the class)."""

    def __init__(self) -> None:
        self.score: np.ndarray | None = None
        self.maze: np.ndarray | None = None
        self.still = 0

    def reset(self, frame: np.ndarray) -> None:
        self.score, self.maze, self.still = frame[SCORE].copy(), frame[MAZE].copy(), 0

    def __call__(self, frame: np.ndarray) -> tuple[float, bool]:
        score, maze = frame[SCORE], frame[MAZE]
        reward = 0.0 if self.score is None or np.array_equal(score, self.score) else 1.0
        self.still = self.still + 1 if self.maze is not None and np.array_equal(maze, self.maze) else 0
        self.score, self.maze = score.copy(), maze.copy()
        return reward, self.still >= STILL_FRAMES
