"""See what the kit sees: ``mqttrl screen probe`` and ``mqttrl screen glyphs``' backends.

:func:`probe` plays the configured window for a while (no keys, or random actions) and records each
frame's reward, done and readings; :func:`annotate` draws a frame with the capture's size, each
reader's region and its reading, and done; :func:`write_csv` writes the readings over time.
:func:`cut` cuts glyphs from a labelled frame into a folder (the glyphs already there split
characters that touch).
"""

from __future__ import annotations

import csv
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .readers import cut_glyphs, load_glyphs, read_png, save_glyphs, write_png
from .window import ScreenEnvError

#: a colour per reader, in table order (RGB)
COLOURS = [(255, 220, 0), (0, 220, 255), (255, 80, 200), (120, 255, 120), (255, 140, 0), (170, 140, 255)]


@dataclass
class Probe:
    """What :func:`probe` saw: the rows (``t, reward, done, name=value, name_status ...``), the last
    frame, the readers (name -> reader, empty for a ``module:function`` reward) and the capture's size."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    frame: np.ndarray | None = None
    readers: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    #: why the probe stopped before its seconds ("": it did not): a game over that a reset does
    #: not end (a game that needs a new process, ``[env] launch_each_episode``)
    stopped: str = ""


def probe(kwargs: dict[str, Any], seconds: float, keys: str = "none", seed: int = 0) -> Probe:
    """Play the screen env of ``kwargs`` for ``seconds``: ``keys = "none"`` sends no key (frames are
    read every ``step_s``), ``"random"`` takes random actions; a reset first (``reset_keys``)."""
    from gymnasium.spaces import Discrete

    from .env import make_screen_env

    env = make_screen_env(**kwargs)
    out = Probe()
    rng = random.Random(seed)
    try:
        env.reset()
        terms = getattr(env.reward_fn, "terms", {})
        out.readers = {name: term.reader for name, term in terms.items()}
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            if keys == "random":
                _, reward, done, _, _ = env.step(
                    # keys (no pad): Discrete, one of n; a pad: a Box
                    rng.randrange(env.action_space.n)
                    if isinstance(env.action_space, Discrete)
                    else env.action_space.sample()
                )
            else:
                time.sleep(max(0.0, env.last_frame_at + env.period - time.monotonic()))
                _, reward, done, _, _ = env.read_obs()
            row = {"t": round(env.last_frame_at - t0, 3), "reward": reward, "done": int(done)}
            for name, reading in getattr(env.reward_fn, "readings", {}).items():
                row[name] = reading.value
                row[f"{name}_status"] = reading.status
            out.rows.append(row)
            out.done = done
            if done:
                try:
                    env.reset()
                except RuntimeError as e:  # the game stays over: the probe ends at its game over
                    out.stopped = f"{e}; the probe stopped at the game over"
                    break
        out.frame = env.grab().copy()
    finally:
        env.close()
    return out


def write_csv(rows: list[dict[str, Any]], path: str | os.PathLike) -> None:
    names = list(dict.fromkeys(k for row in rows for k in row))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=names)
        w.writeheader()
        w.writerows(rows)


def annotate(frame: np.ndarray, readers: dict[str, Any], done: bool, scale: int = 0) -> np.ndarray:
    """``frame`` (RGB) enlarged (``scale``: 1-4, chosen by its size when 0) with each reader's region
    outlined in its colour and its last reading beside it, the capture's size and done below."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    h, w = frame.shape[:2]
    scale = scale or max(1, min(4, 640 // max(w, h)))
    pygame.font.init()
    font = pygame.font.Font(None, 18)
    big = np.kron(frame, np.ones((scale, scale, 1), np.uint8))
    lines = 1 + len(readers)
    surface = pygame.Surface((w * scale, h * scale + 16 * lines))
    surface.fill((0, 0, 0))
    surface.blit(pygame.surfarray.make_surface(big.transpose(1, 0, 2)), (0, 0))
    for k, (name, reader) in enumerate(readers.items()):
        colour = COLOURS[k % len(COLOURS)]
        x, y, rw, rh = reader.region
        pygame.draw.rect(surface, colour, (x * scale - 1, y * scale - 1, rw * scale + 2, rh * scale + 2), 1)
        status = "ok" if reader.ok else "unreadable"
        label = f"{reader.describe()}  [{reader.kind}, {status}; unreadable {reader.unreadable} of {reader.frames}]"
        surface.blit(font.render(name, True, colour), (x * scale + 1, (y + rh) * scale + 1))
        surface.blit(font.render(label, True, colour), (4, h * scale + 2 + 16 * k))
    tail = f"captured {w}x{h} px (shown x{scale}); done: {'yes' if done else 'no'}"
    surface.blit(font.render(tail, True, (230, 230, 230)), (4, h * scale + 2 + 16 * len(readers)))
    return pygame.surfarray.array3d(surface).transpose(1, 0, 2).copy()


def parse_region(text: str) -> tuple[int, int, int, int]:
    try:
        region = tuple(int(v) for v in text.replace(" ", "").split(","))
    except ValueError:
        region = ()
    if len(region) != 4 or min(region[2:]) <= 0 or min(region[:2]) < 0:
        raise ScreenEnvError(f"--region {text!r}: give x,y,width,height in pixels of the frame, e.g. 366,36,48,16")
    return region


def cut(
    frame_path: str | os.PathLike[str],
    region: tuple[int, int, int, int],
    label: str,
    out: str | os.PathLike,
    *,
    color: tuple[int, int, int] | None = None,
    tolerance: float = 60.0,
    threshold: float = 128.0,
) -> list[Path]:
    """Cut the glyphs of ``label`` from the frame's ``region`` into the folder ``out`` (the glyphs
    already there split characters that touch); the files written."""
    frame = read_png(frame_path, "glyphs")
    folder = Path(out)
    known = load_glyphs(folder) if folder.is_dir() and any(folder.glob("*.png")) else []
    glyphs = cut_glyphs(frame, region, label, color=color, tolerance=tolerance, threshold=threshold, known=known)
    return save_glyphs(glyphs, folder)


def save_probe(result: Probe, out: str | os.PathLike) -> list[Path]:
    """``probe.png`` (annotated), ``frame.png`` (the last frame as captured: cut glyphs, icons and
    references from it) and ``probe.csv`` in the folder ``out``."""
    assert result.frame is not None  # probe() ends with a grab
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "probe.png", folder / "frame.png", folder / "probe.csv"]
    write_png(paths[0], annotate(result.frame, result.readers, result.done))
    write_png(paths[1], result.frame)
    write_csv(result.rows, paths[2])
    return paths
