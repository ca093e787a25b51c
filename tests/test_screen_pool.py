"""The screen kit's one-env-per-window rule, on real X displays: an env claims the window it plays
(an X property on the window), another env (in this process or another) does not take it, and
with ``display = [...]`` (one copy of the game per display) each env finds a free one. This is what
lets a greedy evaluator play games of its own beside the worker's (benchmarks/bench_screen.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from benchmarks.harness.xvfb import Game, Xvfb
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.window import CLAIM_PROPERTY, claim_owner, find_window

REWARD = "mqttrl_plugins.screen.demo_game:CatchScore"
KEYS = [[], ["Left"], ["Right"]]
TITLE = "catch-pool"


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    """Two X displays, a Catch window on each."""
    work = tmp_path_factory.mktemp("pool")
    xs = [Xvfb(work, "320x240") for _ in range(2)]
    gs = [
        Game(x.display, work, TITLE, "--lives", "1", "--ball-speed", "150", "--seed", str(i)) for i, x in enumerate(xs)
    ]
    try:
        for g in gs:
            g.wait_window()
        yield [x.display for x in xs]
    finally:
        for g in gs:
            g.stop()
        for x in xs:
            x.stop()


def env_on(displays, **kwargs):
    opts = {"window": TITLE, "display": displays, "keys": KEYS, "reward": REWARD, "reset_keys": ["Return"]}
    return make_screen_env(**(opts | {"step_s": 0.02, "size": 16} | kwargs))


def holder(display: str) -> str:
    """The claim property's value on the game window of ``display`` ('' when none)."""
    from Xlib import X
    from Xlib import display as xdisplay

    d = xdisplay.Display(display)
    try:
        win = d.create_resource_object("window", find_window(TITLE, display).handle)
        prop = win.get_full_property(d.intern_atom(CLAIM_PROPERTY), X.AnyPropertyType)
        value = prop.value if prop is not None else b""
        return value.decode() if isinstance(value, bytes) else str(value)
    finally:
        d.close()


def test_each_env_plays_its_own_window_and_a_third_is_told_why_not(games):
    a, b = env_on(games), env_on(games)
    try:
        a.reset()
        b.reset()
        assert {a.display, b.display} == set(games)  # one game each
        assert a.region == b.region  # the same place on two screens
        for env in (a, b):
            assert holder(env.display) == env.token
            assert env.step(2)[0].shape == (4, 16, 16)
        c = env_on(games, reset_timeout_s=0.3)
        with pytest.raises(ScreenEnvError) as e:
            c.reset()
        msg = str(e.value)
        assert "no free window titled 'catch-pool'" in msg and "\n" not in msg, msg
        assert f"pid {os.getpid()}" in msg and "display = [" in msg
        a.close()  # its window is free again: c takes it
        assert holder(a.display) == ""
        c.reset()
        assert c.display == a.display and holder(c.display) == c.token
        b.reset()  # a later episode keeps the window it had
        assert holder(b.display) == b.token
        c.close()
    finally:
        a.close()
        b.close()


def test_one_window_is_one_env_across_processes(games):
    """A window played by another live process is not taken; once that process is gone, it is."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from mqttrl_plugins.screen import make_screen_env
        env = make_screen_env(window={TITLE!r}, display={games[0]!r}, keys={KEYS!r}, reward={REWARD!r},
                              reset_keys=["Return"], size=16)
        env.reset()
        print("claimed", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "claimed"
        env = env_on(games[0], reset_timeout_s=0.3)
        with pytest.raises(ScreenEnvError, match=f"pid {proc.pid}"):
            env.reset()
        proc.kill()  # never closed: its claim stays on the window, and is seen as stale
        proc.wait()
        assert holder(games[0]).split()[1] == str(proc.pid)
        env.reset()
        assert holder(games[0]) == env.token
        env.close()
    finally:
        proc.kill()
        proc.wait()


def test_a_claim_is_free_when_its_env_is_gone():
    def alive(pid, serial):
        return pid == 7

    assert claim_owner("", "h", alive) is None
    assert claim_owner("h 8 0", "h", alive) is None  # a process that ended
    assert claim_owner("h 7 0", "h", alive) == "pid 7"
    assert claim_owner("other 8 0", "h", alive) == "pid 8 on other"  # another host: cannot tell, held
