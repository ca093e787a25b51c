"""A Pacman player for the tests (freegames.pacman, from its window's pixels alone): the path
through the maze's blue tiles to the nearest pellet, away from the red ghosts, one arrow key at a
time. It only has to make the score rise, so that the screen's number reader sees many values.

The board is 20 x 20 tiles of 20 px, the window's tile (row, col) at pixels ``10 + 20 * row`` down
and ``10 + 20 * col`` across; pellets are white dots at the tiles' centres, Pacman a yellow disc.
"""

from __future__ import annotations

from collections import deque

import numpy as np

TILE, OFFSET, N = 20, 10, 20
MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


def _colour(frame: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> np.ndarray:
    return np.abs(frame.astype(np.int16) - np.array(rgb, np.int16)).max(axis=2) <= tol


def board(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int] | None]:
    """(path tiles, pellet tiles, ghost tiles, Pacman's tile) from a 420 x 420 RGB frame."""
    blue, red, yellow = _colour(frame, (0, 0, 255)), _colour(frame, (255, 0, 0)), _colour(frame, (255, 255, 0))
    cells = lambda m: m[OFFSET : OFFSET + N * TILE, OFFSET : OFFSET + N * TILE].reshape(N, TILE, N, TILE)  # noqa: E731
    path = cells(blue | red | yellow).mean(axis=(1, 3)) > 0.3
    ghosts = cells(red).sum(axis=(1, 3)) > 20
    white = cells(frame.min(axis=2) > 200)[:, TILE // 2 - 4 : TILE // 2 + 4, :, TILE // 2 - 4 : TILE // 2 + 4]
    pellets = white.any(axis=(1, 3)) & path
    ys, xs = np.nonzero(yellow)
    me = None
    if len(ys):
        me = (round((ys.mean() - OFFSET - TILE / 2) / TILE), round((xs.mean() - OFFSET - TILE / 2) / TILE))
    return path, pellets, ghosts, me


def hunt_key(frame: np.ndarray) -> str | None:
    """The arrow key towards the nearest ghost (a test that wants the game over soon)."""
    path, _, ghosts, me = board(frame)
    return None if me is None else _first_key(path, ghosts, me)


def next_key(frame: np.ndarray) -> str | None:
    """The arrow key towards the nearest pellet that no ghost is near (None: nothing to do)."""
    path, pellets, ghosts, me = board(frame)
    if me is None:
        return None
    danger = ghosts.copy()
    for dy, dx in MOVES.values():
        danger |= np.roll(ghosts, (dy, dx), axis=(0, 1))
    return _first_key(path & ~danger, pellets, me)


def _first_key(open_: np.ndarray, goal: np.ndarray, me: tuple[int, int]) -> str | None:
    """The first arrow key of a shortest way from ``me`` along ``open_`` tiles to the nearest
    ``goal`` tile other than ``me`` (breadth first; None: none reachable)."""
    seen = {me: None}
    queue = deque([me])
    while queue:
        r, c = queue.popleft()
        if goal[r, c] and (r, c) != me:
            while seen[(r, c)][0] != me:
                r, c = seen[(r, c)][0]
            return seen[(r, c)][1]
        for key, (dy, dx) in MOVES.items():
            nxt = (r + dy, c + dx)
            if 0 <= nxt[0] < N and 0 <= nxt[1] < N and open_[nxt] and nxt not in seen:
                seen[nxt] = ((r, c), key)
                queue.append(nxt)
    return None
