"""Reward and done from the screen (issue 47): the screen kit's readers (plugins/screen/readers/) and
the ``[env.kwargs.reward]`` table that composes them (plugins/screen/reward_config.py).

Frames drawn off screen check each reader and every start-up mistake (one line); then two real
games in real windows on Xvfb, read through the kit and checked against the games' own scores:
mqttrl's Catch (``--hud digits --score-log``) and Pacman of Free Python Games, installed unchanged
from PyPI, its score logged by tests/helpers/pacman_score.py and its keys sent with xdotool.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.xvfb import Game, Xvfb
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.demo_game import Catch
from mqttrl_plugins.screen.readers import (
    BarReader,
    Glyph,
    LivesReader,
    MatchReader,
    NumberReader,
    StillReader,
    cut_glyphs,
    load_glyphs,
    render_glyphs,
    save_glyphs,
    write_png,
)
from mqttrl_plugins.screen.reward_config import ScreenReward

ROOT = Path(__file__).resolve().parents[1]
PACMAN_GLYPHS = ROOT / "configs" / "games" / "freegames_pacman" / "glyphs"
#: Catch --hud digits: the score's text (pygame's default font, size 20) and the life squares
SCORE_REGION, LIVES_REGION = [0, 0, 80, 16], [90, 2, 70, 12]


def render(game: Catch) -> np.ndarray:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    pygame.font.init()
    surface = pygame.Surface((game.size, game.size))
    game.draw(surface, pygame.font.Font(None, 20))
    return pygame.surfarray.array3d(surface).transpose(1, 0, 2).copy()


def catch(score: int = 0, lives: int = 3) -> np.ndarray:
    game = Catch(160, 3, 100, 100, 0, hud="digits")
    game.score, game.lives = score, lives
    return render(game)


@pytest.fixture(scope="module")
def digits() -> list[Glyph]:
    return render_glyphs(None, 20)  # what Catch draws with: pygame.font.Font(None, 20)


# ---- the number reader ----------------------------------------------------------------------------
def test_the_number_reader_reads_every_score_catch_draws(digits):
    reader = NumberReader(SCORE_REGION, digits)
    for n in [*range(0, 120), 1234, 98765, 1111, 8080]:
        reading = reader.read(catch(n))
        assert reading.ok and reading.value == n and reading.text == str(n), (n, reading)
    assert reader.unreadable == 0


def test_a_sprite_over_the_digits_makes_a_frame_unreadable_never_wrong(digits, caplog):
    """Squares of other colours (and of the text's) over random scores: many read, some are
    unreadable (counted, logged at DEBUG, the last value kept), none reads a wrong number."""
    import pygame

    reader = NumberReader(SCORE_REGION, digits)
    rng = np.random.default_rng(0)
    good = 0
    with caplog.at_level(logging.DEBUG, "mqttrl.screen.readers"):
        for k in range(300):
            n = int(rng.integers(0, 100000))
            frame = catch(n)
            surface = pygame.surfarray.make_surface(frame.transpose(1, 0, 2))
            colour = [(200, 30, 30), (255, 255, 0), (255, 255, 255), (20, 20, 40)][k % 4]
            box = (int(rng.integers(4, 40)), int(rng.integers(0, 14)), int(rng.integers(1, 6)), int(rng.integers(1, 6)))
            pygame.draw.rect(surface, colour, box)
            reader.value = -1  # the "last value", to tell a kept reading from a fresh one
            reading = reader.read(pygame.surfarray.array3d(surface).transpose(1, 0, 2))
            if reading.ok:
                assert reading.value == n, (n, reading, box, colour)
                good += 1
            else:
                assert reading.value == -1 and reading.status == "unreadable" and reading.why
    assert 150 < good < 300 and reader.unreadable == 300 - good
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == reader.unreadable


def test_a_jump_past_max_change_waits_for_three_frames(digits):
    reader = NumberReader(SCORE_REGION, digits, max_change=5)
    assert reader.read(catch(10)).value == 10
    assert [reader.read(catch(90)).ok for _ in range(3)] == [False, False, True]
    assert reader.value == 90 and reader.read(catch(93)).ok


def test_glyphs_round_trip_through_a_folder_an_npz_and_json(tmp_path, digits):
    save_glyphs(digits, tmp_path / "g")
    assert save_glyphs(digits, tmp_path / "g") == []  # the same glyphs again: nothing new written
    np.savez(tmp_path / "g.npz", **{g.char: g.mask for g in digits})
    rows = {g.char: ["".join("#" if v else "." for v in r) for r in g.mask] for g in digits}
    (tmp_path / "g.json").write_text(json.dumps(rows))
    for source in ("g", "g.npz", "g.json"):
        glyphs = load_glyphs(tmp_path / source)
        assert {g.char: g.mask.tolist() for g in glyphs} == {g.char: g.mask.tolist() for g in digits}, source
        assert NumberReader(SCORE_REGION, glyphs).read(catch(4711)).value == 4711


def test_glyphs_are_cut_from_a_labelled_frame_touching_ones_with_the_known(digits):
    frame = catch(1234)
    with pytest.raises(ScreenEnvError, match="label '1234' has 4"):
        cut_glyphs(frame, SCORE_REGION, "1234")  # 3 and 4 touch
    known = [g for g in digits if g.char in "34"]  # the 2 is what lies between the 1 and the 3
    cut = cut_glyphs(frame, SCORE_REGION, "1234", known=known)
    assert [g.char for g in cut] == list("1234")
    assert NumberReader(SCORE_REGION, cut).read(catch(4321)).value == 4321


# ---- match, lives, bar ------------------------------------------------------------------------------
def test_match_lives_and_bar_readers(tmp_path):
    over = Catch(160, 3, 100, 100, 0, hud="digits")
    over.lives = 0
    write_png(tmp_path / "over.png", render(over))
    match = MatchReader([0, 60, 160, 40], str(tmp_path / "over.png"))  # a whole frame: the region is cut from it
    assert not match.read(catch(5)).value and match.read(render(over)).value
    changed = MatchReader([0, 60, 160, 40], render(over)[60:100], when="different")
    assert changed.read(catch(5)).value and not changed.read(render(over)).value

    icon = catch()[4:12, 126:134]
    lives = LivesReader(LIVES_REGION, icon)
    assert [lives.read(catch(0, n)).value for n in (3, 2, 1, 0)] == [3, 2, 1, 0]

    bar = np.zeros((20, 100, 3), np.uint8)
    bar[5:15, :37] = (200, 40, 40)
    bar[8:10, 60:64] = (200, 40, 40)  # a thin line: not filled columns
    assert BarReader([0, 5, 100, 10], [200, 40, 40]).read(bar).value == pytest.approx(0.37)


def test_the_still_reader_is_done_once_a_region_stood_still_for_its_frames():
    """A moving sprite in the region: never still; the same frame ``frames`` times in a row: still
    (and done, in a table), until a frame changes; a change outside the region is not looked at."""
    reader = StillReader([0, 60, 160, 40], frames=3)
    playing = [catch(n) for n in range(6)]
    for k, frame in enumerate(playing):
        frame[70:80, 10 * k : 10 * k + 10] = (255, 0, 0)  # a sprite moves along the region
    assert [reader.read(f).value for f in playing] == [False] * 6 and reader.still == 0
    frozen = playing[-1]
    assert [reader.read(frozen).value for _ in range(4)] == [False, False, True, True]
    assert reader.still == 4 and reader.difference == 0.0
    assert reader.read(playing[0]).value is False and reader.still == 0
    outside = catch(5)
    reader.read(outside)
    assert [reader.read(catch(9)).value for _ in range(3)] == [False, False, True]  # the score changed: not looked at
    reader.forget()  # a new episode: the frame before is forgotten
    assert reader.read(catch(9)).value is False and reader.still == 0
    tolerant = StillReader([0, 60, 160, 40], frames=2, tolerance=1.0)
    noisy = [catch(1).astype(np.int16) + d for d in (0, 1, 0, 1)]  # every pixel off by one, frame to frame
    assert [tolerant.read(np.clip(f, 0, 255).astype(np.uint8)).value for f in noisy] == [False, False, True, True]

    table = ScreenReward({"over": {"kind": "still", "region": [0, 60, 160, 40], "frames": 2, "reward": -1.0}})
    table.reset(catch(0))
    assert [table(catch(0)) for _ in range(3)] == [(0.0, False), (-1.0, True), (0.0, True)]
    assert table(playing[0]) == (0.0, False) and table.readings["over"].value is False


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"frames": 0}, "frames=0: an int >= 1"),
        ({"frames": 2.5}, "frames=2.5: an int >= 1"),
        ({"tolerance": -1}, "tolerance=-1: a number >= 0"),
    ],
)
def test_a_still_reader_s_bad_argument_is_one_line(args, says):
    with pytest.raises(ScreenEnvError) as e:
        StillReader([0, 0, 9, 9], name="over", **args)
    assert str(e.value).startswith("screen env: reward.over: ") and says in str(e.value) and "\n" not in str(e.value)


# ---- the reward table -------------------------------------------------------------------------------
def catch_table(tmp_path: Path, **score) -> dict:
    write_png(tmp_path / "catch.png", catch())
    return {
        "score": {"kind": "number", "region": SCORE_REGION, "font": "default", "font_size": 20, **score},
        "lives": {
            "kind": "lives",
            "region": LIVES_REGION,
            "icon": str(tmp_path / "catch.png"),
            "icon_region": [126, 4, 8, 8],
            "done_at": 0,
        },
    }


def test_the_table_rewards_score_deltas_lost_lives_and_ends_at_none(tmp_path):
    reward = ScreenReward(catch_table(tmp_path, scale=0.5))
    reward.reset(catch(0, 3))
    assert reward(catch(4, 3)) == (2.0, False)
    assert reward(catch(4, 2)) == (-1.0, False)
    assert reward(catch(4, 3)) == (0.0, False)  # a blinking icon comes back: no reward
    assert reward(catch(4, 2)) == (0.0, False)  # and costs once
    assert reward(catch(6, 3)) == (1.0, False)
    # game over: Catch's ground turns red, its text's antialiased edges binarize thicker, and the
    # score is unreadable (kept at 6: no reward from it) rather than read wrong; no lives left: done
    assert reward(catch(6, 0)) == (-2.0, True)
    assert reward.readings["score"].status == "unreadable" and reward.readings["score"].value == 6
    assert reward.readings["lives"].value == 0


def parse(reward) -> None:
    from mqttrl_plugins.screen.options import load_reward, parse_options

    load_reward(parse_options({"window": "g", "keys": [[]], "reward": reward}).reward)(catch(12))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"score": {"kind": "numbr", "region": [0, 0, 9, 9]}}, "kind='numbr': one of 'number'"),
        (
            {"score": {"kind": "number", "region": [0, 0, 9, 9], "glpyhs": "g/"}},
            "unknown key 'glpyhs' (did you mean 'glyphs'?)",
        ),
        ({"score": {"kind": "number", "region": [0, 0, 9]}}, "region=[0, 0, 9]: give [x, y, width, height]"),
        ({"score": {"kind": "number", "region": [0, 0, 9, 9]}}, 'give glyphs = "folder/"'),
        (
            {"over": {"kind": "match", "region": [0, 0, 9, 9], "reference": "nowhere/over.png"}},
            "nowhere/over.png does not exist",
        ),
        ({"score": {"kind": "number", "region": [0, 0, 9, 9], "glyphs": "EMPTY"}}, "holds no glyph with ink"),
        (
            {"score": {"kind": "number", "region": [120, 0, 80, 16], "font": "default", "font_size": 20}},
            "region [120, 0, 80, 16] is outside the captured 160x160 frame",
        ),
        (
            {"score": {"kind": "number", "region": [0, 60, 80, 16], "font": "default", "font_size": 20}},
            "read no number in region [0, 60, 80, 16] on the first frame",
        ),
        (
            {"lives": {"kind": "lives", "region": [0, 60, 80, 16], "icon": "catch.png", "icon_region": [126, 4, 8, 8]}},
            "no icon in region",
        ),
        (
            {"hp": {"kind": "bar", "region": [0, 60, 80, 16], "color": [0, 255, 0]}},
            "the bar reads empty on the first frame",
        ),
        ({"clip": -1, "score": {}}, "reward.clip=-1"),
        ({"over": {"kind": "still", "region": [0, 0, 9, 9], "frames": 0}}, "reward.over: frames=0: an int >= 1"),
        (
            {"over": {"kind": "still", "region": [0, 0, 9, 9], "frame": 5}},
            "unknown key 'frame' (did you mean 'frames'?)",
        ),
        (
            {"over": {"kind": "still", "region": [0, 0, 9, 9], "tolerance": -2.0}},
            "reward.over: tolerance=-2.0: a number >= 0",
        ),
    ],
)
def test_a_wrong_table_region_glyph_set_or_file_is_one_line(change, says, tmp_path, monkeypatch):
    (tmp_path / "EMPTY").mkdir()
    write_png(tmp_path / "catch.png", catch())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScreenEnvError) as e:
        parse(change)
    assert says in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("screen env: ")


def test_the_first_frame_check_waits_for_a_frame_not_done(tmp_path):
    """A reset may see the last game's end first: the readers are held to what they read at the first
    frame that is not done (Catch's game over shows no score), not at that one."""
    table = catch_table(tmp_path) | {
        "over": {"kind": "match", "region": [0, 60, 160, 40], "reference": str(tmp_path / "over.png"), "done": True}
    }
    over = Catch(160, 3, 100, 100, 0, hud="digits")
    over.lives = 0
    write_png(tmp_path / "over.png", render(over))
    table["lives"].pop("done_at")
    reward = ScreenReward(table)
    assert reward(render(over))[1] is True  # no score shown, done: no complaint yet
    reward.reset(catch(0))
    assert reward(catch(1)) == (1.0, False)


def test_the_docs_table_is_a_table_the_kit_takes():
    """docs/real-games.md's TOML, as written, passes the table's checks (its files are the page's)."""
    import re
    import tomllib

    text = (ROOT / "docs" / "real-games.md").read_text()
    block = next(b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[env.kwargs.reward]" in b)
    table = tomllib.loads(block)["env"]["kwargs"]["reward"]
    from mqttrl_plugins.screen.reward_config import check_table

    assert set(check_table(table)) == {"score", "lives", "over", "health", "frozen"}


# ---- real games in real windows ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def display(tmp_path_factory):
    x = Xvfb(tmp_path_factory.mktemp("xvfb"), size="1024x768")
    yield x.display
    x.stop()


def shown_at(log: list[tuple[float, int]], t: float, lag_s: float) -> set[int]:
    """The scores the game logged as in force at some moment of ``[t - lag_s, t]``."""
    before = [s for at, s in log if at <= t - lag_s]
    return set(before[-1:]) | {s for at, s in log if t - lag_s < at <= t}


def test_catch_s_digits_are_read_through_the_kit_as_the_game_logs_them(display, tmp_path):
    """Catch with its score drawn as digits, played through the screen env with a reward table: each
    step's reading equals the score the game had on the screen (its log, within 0.1 s of the frame),
    and the rewards add up to the score it reached."""
    log_path = tmp_path / "score.log"
    game = Game(
        display,
        tmp_path,
        "catch-digits",
        "--hud",
        "digits",
        "--score-log",
        str(log_path),
        "--lives",
        "9",
        "--ball-speed",
        "250",
        "--paddle-speed",
        "400",
        "--seed",
        "5",
    )
    game.wait_window()
    env = make_screen_env(
        window="catch-digits",
        display=display,
        keys=[[], ["Left"], ["Right"]],
        reward=catch_table(tmp_path),
        reset_keys=["Return"],
        size=32,
        step_s=0.02,
    )
    try:
        env.reset()
        lives_at_start = env.reward_fn.readings["lives"].value  # the icons the region holds (6 of 9)
        readings, total = [], 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            frame = env.grab()
            ball = np.nonzero(frame[20:-10].min(axis=2) > 200)[1]
            paddle = np.nonzero((frame[-8:, :, 1] > 150) & (frame[-8:, :, 0] < 120))[1]
            action = (
                0
                if not len(ball)
                else (1 if ball.mean() < paddle.mean() - 6 else 2 if ball.mean() > paddle.mean() + 6 else 0)
            )
            _, reward, done, _, _ = env.step(action)
            total += reward
            readings.append((env.last_frame_at, env.reward_fn.readings["score"]))
            assert not done
    finally:
        env.close()
        game.stop()
    log = [(float(t), int(s)) for t, s, _, _ in (line.split() for line in log_path.read_text().splitlines())]
    ok = [(t, r) for t, r in readings if r.ok]
    wrong = [(t, r.value, shown_at(log, t, 0.1)) for t, r in ok if r.value not in shown_at(log, t, 0.1)]
    assert not wrong, wrong[:5]
    assert len(ok) >= 0.95 * len(readings) and len(readings) > 100
    assert max(s for _, s in log) >= 5 and ok[-1][1].value >= 5  # the ball was caught: the score rose
    # the rewards: the score from the new game's 0, less a life for each icon gone
    assert total == pytest.approx(ok[-1][1].value - (lives_at_start - env.reward_fn.readings["lives"].value))


@pytest.mark.slow
def test_freegames_pacman_s_score_is_read_as_the_game_keeps_it(display, tmp_path):
    """Pacman of Free Python Games, unchanged: its own ``state['score']`` logged by the launcher
    (tests/helpers/pacman_score.py), Pacman steered by xdotool arrow keys to the nearest pellet
    (tests/helpers/pacman_play.py), the window read through the kit with the shipped glyphs. Every
    reading equals a score the game had within the last 0.3 s (the game writes its score at the
    start of each 100 ms tick, before that tick's pellet: one tick late, and a capture's own
    delay); unreadable frames are counted and few."""
    pytest.importorskip("freegames", reason="pip install freegames (the test extra has it)")
    if not shutil.which("xdotool"):
        pytest.fail("xdotool is not on PATH: apt-get install xdotool (scripts/test.sh does this)")
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.pacman_play import next_key

    log_path = tmp_path / "score.log"
    env_vars = dict(os.environ, DISPLAY=display)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/helpers/pacman_score.py"), str(log_path), "1"],
        env=env_vars,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # the window is made at Tk's size, then set to the game's 420 x 420
            try:
                env = make_screen_env(
                    window="Python Turtle Graphics",
                    window_exact=True,
                    display=display,
                    keys=[[]],
                    focus=False,
                    reward=pacman_table(),
                    size=32,
                    step_s=0.0,
                )
                # and drawn: Tk's canvas is white until the game paints its board
                if env.region.width == 420 and env.grab()[36:52, 366:414].mean() < 100:
                    break
                env.close()
            except ScreenEnvError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "pacman's window did not come"
            time.sleep(0.05)
        try:
            readings = play_pacman(env, env_vars, next_key)
        finally:
            env.close()
    finally:
        proc.kill()
        proc.wait()
    log = [(float(t), int(s)) for t, s in (line.split() for line in log_path.read_text().splitlines())]
    ok = [(t, r) for t, r in readings if r.ok]
    wrong = [(t, r.value, shown_at(log, t, 0.3)) for t, r in ok if r.value not in shown_at(log, t, 0.3)]
    assert not wrong, wrong[:5]
    assert len(ok) >= 0.9 * len(readings), [r for _, r in readings if not r.ok][:5]
    assert max(s for _, s in log) >= 12 and ok[-1][1].value >= 10, log[-3:]  # two digits read


def pacman_table() -> dict:
    return {"score": {"kind": "number", "region": [366, 36, 48, 16], "glyphs": str(PACMAN_GLYPHS)}}


def play_pacman(env, env_vars: dict, next_key, seconds: float = 20.0) -> list:
    env.reset()
    subprocess.run(["xdotool", "windowfocus", str(env.window.handle)], env=env_vars, timeout=10)
    readings = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        env.step(0)
        readings.append((env.last_frame_at, env.reward_fn.readings["score"]))
        key = next_key(env.grab())
        if key:
            subprocess.run(["xdotool", "key", key], env=env_vars, timeout=10)
        time.sleep(0.02)
    return readings


# ---- mqttrl screen glyphs / probe -------------------------------------------------------------------
def test_mqttrl_screen_glyphs_cuts_a_labelled_frame(tmp_path, capsys):
    from mqttrl import cli

    write_png(tmp_path / "frame.png", catch(17))
    cli.main(
        [
            "screen",
            "glyphs",
            str(tmp_path / "frame.png"),
            "--region",
            "0,0,80,16",
            "--label",
            "17",
            "-o",
            str(tmp_path / "glyphs"),
        ]
    )
    assert "wrote 2 glyphs" in capsys.readouterr().out
    assert sorted(g.char for g in load_glyphs(tmp_path / "glyphs")) == ["1", "7"]
    with pytest.raises(SystemExit) as e:  # one line, exit 2 (a config error)
        cli.main(["screen", "glyphs", str(tmp_path / "frame.png"), "--region", "0,0,80,16", "--label", "123"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "label '123' has 3" in err and "\n" not in err


def test_mqttrl_screen_probe_draws_and_writes_what_the_readers_read(display, tmp_path, capsys):
    from mqttrl import cli

    text = (ROOT / "configs" / "screen_catch_readers.toml").read_text()
    text = text.replace('"mqttrl catch"', '"catch-probe"').replace('"configs/', f'"{ROOT}/configs/')
    (tmp_path / "catch.toml").write_text(text)
    game = Game(display, tmp_path, "catch-probe", "--hud", "digits", "--seed", "2")
    game.wait_window()
    try:
        cli.main(
            [
                "screen",
                "probe",
                str(tmp_path / "catch.toml"),
                "--set",
                f'env.kwargs.display="{display}"',
                "--seconds",
                "2",
                "--keys",
                "random",
                "-o",
                str(tmp_path / "out"),
            ]
        )
    finally:
        game.stop()
    assert "frames in 2 s; last: score=" in capsys.readouterr().out
    import csv

    rows = list(csv.DictReader((tmp_path / "out" / "probe.csv").open()))
    assert (
        len(rows) > 20 and {r["score_status"] for r in rows} == {"ok"} and {r["lives"] for r in rows} <= {"1", "2", "3"}
    )
    picture = load_png(tmp_path / "out" / "probe.png")
    assert picture.shape[1] == 640 and (tmp_path / "out" / "frame.png").exists()


def load_png(path):
    from mqttrl_plugins.screen.readers import read_png

    return read_png(path, "test")
