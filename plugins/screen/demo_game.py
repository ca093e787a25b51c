"""Catch: a tiny real-time pygame game in its own window, to try the screen kit on (and its tests).

A ball falls from the top; the paddle at the bottom moves while Left or Right is held. A catch
scores 1, a miss costs a life; at 0 lives the screen turns red ("GAME OVER") until Return starts a
new game (Return restarts at any time); or, with ``--exit-at-game-over``, the game shows it for
half a second and exits with status 0, as many unchanged games do (a worker that launched it
starts a new game: mqttrl.envs.launched). The game runs on the wall clock whatever its player does.

The score is drawn as text and, for a program to read, as a HUD: the top strip holds the score
in binary (8 cells, white = 1, lowest bit on the left) and one red square per life on the right.
:class:`CatchScore` reads it from a captured frame: it is the ``reward`` function of the screen
kit's example (``reward = "mqttrl_plugins.screen.demo_game:CatchScore"``).

``--hud digits`` draws the score in the HUD strip as digits instead (pygame's default font, size
20, left-aligned at :data:`DIGITS_AT`), for the screen readers to read (docs/real-games.md);
``--score-log FILE`` appends ``time score lives over`` to FILE each time a frame shows a new one
(``time.monotonic()`` after the frame is on the screen): what a test checks readings against.

    python -m mqttrl_plugins.screen.demo_game --title "mqttrl catch"
"""

from __future__ import annotations

import argparse
import os
import random

import numpy as np

HUD = 16  #: height of the HUD strip, px
CELL = 8  #: side of a score cell and of a life square, px
BITS = 8  #: score cells (the score is shown modulo 256)
PADDLE_W, PADDLE_H, BALL = 40, 6, 10
BG, GAME_OVER_BG = (20, 20, 40), (140, 20, 20)
#: with ``--exit-at-game-over``: seconds the game-over screen shows before the game exits
GAME_OVER_SHOWN_S = 0.5
ON, OFF, LIFE = (255, 255, 255), (60, 60, 60), (230, 40, 40)
#: with ``--hud digits``: where the score's text starts (its top-left, px)
DIGITS_AT = (4, 1)


def _cell_x(i: int) -> int:
    return 4 + i * (CELL + 2)


def _life_x(size: int, i: int) -> int:
    return size - 4 - (i + 1) * (CELL + 2)


class Catch:
    """The game's state and rules, apart from pygame (``tick`` advances it by ``dt`` seconds)."""

    def __init__(
        self, size: int, lives: int, ball_speed: float, paddle_speed: float, seed: int | None, hud: str = "bits"
    ):
        self.size, self.max_lives, self.hud = size, lives, hud
        self.ball_speed, self.paddle_speed = ball_speed, paddle_speed
        self.rng = random.Random(seed)
        self.restart()

    def restart(self) -> None:
        self.score, self.lives = 0, self.max_lives
        self.paddle = (self.size - PADDLE_W) / 2
        self.new_ball()

    def new_ball(self) -> None:
        self.ball_x = self.rng.uniform(0, self.size - BALL)
        self.ball_y = float(HUD)

    @property
    def over(self) -> bool:
        return self.lives <= 0

    def tick(self, dt: float, left: bool, right: bool) -> None:
        if self.over:
            return
        move = (right - left) * self.paddle_speed * dt
        self.paddle = min(max(self.paddle + move, 0.0), self.size - PADDLE_W)
        self.ball_y += self.ball_speed * dt
        floor = self.size - PADDLE_H - 2
        if self.ball_y + BALL >= floor:
            hit = self.paddle - BALL < self.ball_x < self.paddle + PADDLE_W
            if hit:
                self.score += 1
            else:
                self.lives -= 1
            self.new_ball()

    def draw(self, screen, font) -> None:
        import pygame

        s = self.size
        screen.fill(GAME_OVER_BG if self.over else BG)
        if self.hud == "digits":
            screen.blit(font.render(str(self.score), True, ON), DIGITS_AT)
        for i in range(BITS if self.hud == "bits" else 0):
            colour = ON if (self.score >> i) & 1 else OFF
            pygame.draw.rect(screen, colour, (_cell_x(i), 4, CELL, CELL))
        for i in range(self.lives):
            pygame.draw.rect(screen, LIFE, (_life_x(s, i), 4, CELL, CELL))
        pygame.draw.rect(screen, (80, 200, 80), (int(self.paddle), s - PADDLE_H - 2, PADDLE_W, PADDLE_H))
        pygame.draw.rect(screen, ON, (int(self.ball_x), int(self.ball_y), BALL, BALL))
        if self.over or self.hud == "bits":
            text = font.render("GAME OVER" if self.over else str(self.score), True, ON)
            screen.blit(text, ((s - text.get_width()) // 2, HUD + 4))


def read_hud(frame: np.ndarray) -> tuple[int, int, bool]:
    """``(score mod 256, lives, game over)`` from an RGB frame of the whole window (H, W, 3)."""
    h, w = frame.shape[:2]
    y = 4 + CELL // 2
    score = sum(1 << i for i in range(BITS) if frame[y, _cell_x(i) + CELL // 2].min() > 200)
    lives = 0
    while _life_x(w, lives) > _cell_x(BITS) and _is_life(frame[y, _life_x(w, lives) + CELL // 2]):
        lives += 1
    corner = frame[h // 2, 1]
    return score, lives, bool(corner[0] > 100 and corner[1] < 60)


def _is_life(px: np.ndarray) -> bool:
    return px[0] > 180 and px[1] < 90 and px[2] < 90


class CatchScore:
    """The screen kit's reward function for Catch: +1 per catch, -1 per life lost, done at game over.

    One instance per env (the kit makes it from the class); :meth:`reset` is given the first
    frame of an episode, ``__call__`` every later one."""

    def __init__(self) -> None:
        self.score = self.lives = 0

    def reset(self, frame: np.ndarray) -> None:
        self.score, self.lives, _ = read_hud(frame)

    def __call__(self, frame: np.ndarray) -> tuple[float, bool]:
        score, lives, over = read_hud(frame)
        caught = (score - self.score) % 256 if score >= self.score else 0  # a restart reads as 0, not 255
        lost = max(self.lives - lives, 0)
        self.score, self.lives = score, lives
        return float(caught - lost), over


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Catch: a tiny real-time game for the screen kit")
    p.add_argument("--title", default="mqttrl catch", help="window title (what the screen kit finds)")
    p.add_argument("--size", type=int, default=160, help="window width and height, px")
    p.add_argument("--pos", default="0,0", help="window position x,y on the screen")
    p.add_argument("--fps", type=int, default=60)
    p.add_argument("--lives", type=int, default=3)
    p.add_argument("--ball-speed", type=float, default=120.0, help="px/s")
    p.add_argument("--paddle-speed", type=float, default=240.0, help="px/s")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--hud", choices=["bits", "digits"], default="bits", help="the score in the HUD: binary cells, or digits text"
    )
    p.add_argument(
        "--score-log", default="", help="append 'time score lives over' here whenever a frame shows new ones"
    )
    p.add_argument(
        "--exit-at-game-over",
        action="store_true",
        help=f"exit (status 0) {GAME_OVER_SHOWN_S:g} s after the game is over, instead of waiting for Return",
    )
    return p.parse_args(argv)


class ScoreLog:
    """``--score-log``: a line ``time score lives over`` each time a frame shows a new state."""

    def __init__(self, path: str):
        self.file = open(path, "a") if path else None
        self.last: tuple | None = None

    def shown(self, game: Catch) -> None:
        import time

        state = (game.score, game.lives, int(game.over))
        if self.file is not None and state != self.last:
            self.last = state
            self.file.write(f"{time.monotonic():.4f} {state[0]} {state[1]} {state[2]}\n")
            self.file.flush()


def _stage(what: str) -> None:
    """One start-up line on stdout, flushed: a window that never comes says where it stopped."""
    print(f"catch: {what}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Run the game until its window is closed (or the process is ended; or, with
    ``--exit-at-game-over``, the game is over)."""
    args = parse_args(argv)
    os.environ.setdefault("SDL_VIDEO_WINDOW_POS", args.pos)
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    _stage("display init")
    pygame.display.init()
    pygame.font.init()
    _stage(f"window on {pygame.display.get_driver()}")
    screen = pygame.display.set_mode((args.size, args.size))
    pygame.display.set_caption(args.title)
    _stage(f"window titled {args.title!r} is up")
    font = pygame.font.Font(None, 20)
    game = Catch(args.size, args.lives, args.ball_speed, args.paddle_speed, args.seed, args.hud)
    score_log = ScoreLog(args.score_log)
    clock = pygame.time.Clock()
    over_for = 0.0
    while True:
        dt = clock.tick(args.fps) / 1000.0
        over_for = over_for + dt if game.over else 0.0
        if args.exit_at_game_over and over_for >= GAME_OVER_SHOWN_S:
            pygame.quit()
            return
        for event in pygame.event.get():
            if event.type == pygame.QUIT:
                pygame.quit()
                return
            if event.type == pygame.KEYDOWN and event.key == pygame.K_RETURN:
                game.restart()
        keys = pygame.key.get_pressed()
        game.tick(min(dt, 0.1), keys[pygame.K_LEFT], keys[pygame.K_RIGHT])
        game.draw(screen, font)
        pygame.display.flip()
        score_log.shown(game)


if __name__ == "__main__":
    main()
