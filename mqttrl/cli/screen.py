"""``mqttrl screen probe CONFIG`` and ``mqttrl screen glyphs FRAME.png``: see what the screen kit sees.

``probe`` plays the config's window for a few seconds (no keys, or random actions) and writes an
annotated picture (each reader's region and reading, done), the last frame as captured and a CSV
of the readings over time; ``glyphs`` cuts a number reader's glyphs from a frame you label
(docs/real-games.md).
"""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, DefaultsFormatter, load, overrides_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="screen_command", required=True, metavar="{probe,glyphs}")
    pr = sub.add_parser(
        "probe", help="capture the config's window, write what its readers read", formatter_class=DefaultsFormatter
    )
    pr.add_argument("config", help='run config (TOML) with env.id = "screen"')
    overrides_arg(pr, "override a config value (repeatable)")
    pr.add_argument("--seconds", type=float, default=5.0, help="how long to capture")
    pr.add_argument("--keys", choices=["none", "random"], default="none", help="no keys, or random actions")
    pr.add_argument("-o", "--out", default="probe", help="folder for probe.png, frame.png and probe.csv")
    gl = sub.add_parser(
        "glyphs", help="cut a number reader's glyphs from a frame you label", formatter_class=DefaultsFormatter
    )
    gl.add_argument("frame", help="a frame as captured (PNG: probe's frame.png)")
    gl.add_argument("--region", required=True, help="x,y,width,height of the text in the frame, px")
    gl.add_argument("--label", required=True, help='the text the region shows, e.g. "1234"')
    gl.add_argument("-o", "--out", default="glyphs", help="the glyph folder (its glyphs split characters that touch)")
    gl.add_argument("--threshold", type=float, default=128.0, help="text pixels: luminance at least this")
    gl.add_argument("--color", default="", help="or: the text's colour r,g,b (each channel within --tolerance)")
    gl.add_argument("--tolerance", type=float, default=60.0, help="with --color")


def run(args: argparse.Namespace) -> None:
    if args.screen_command == "glyphs":
        _glyphs(args)
        return
    from mqttrl.config import ConfigError
    from mqttrl_plugins.screen.probe import probe, save_probe

    cfg = load(args.config, args.overrides)
    if cfg.env.id != "screen":
        raise ConfigError(
            f'mqttrl screen probe: {args.config} plays env {cfg.env.id!r}, not the screen kit\'s "screen"'
        )
    result = probe(dict(cfg.env.kwargs), args.seconds, args.keys)
    paths = save_probe(result, args.out)
    last = result.rows[-1] if result.rows else {}
    readings = ", ".join(f"{n}={last.get(n)} ({last.get(n + '_status')})" for n in result.readers) or "no readers"
    seconds = last.get("t", 0.0) if result.stopped else args.seconds
    print(f"{len(result.rows)} frames in {seconds:g} s; last: {readings}; done: {bool(last.get('done'))}")
    if result.stopped:
        print(result.stopped)
    print("wrote " + ", ".join(str(p) for p in paths))


def _glyphs(args: argparse.Namespace) -> None:
    from mqttrl_plugins.screen.probe import cut, parse_region
    from mqttrl_plugins.screen.window import ScreenEnvError

    color = None
    if args.color:
        try:
            color = tuple(int(v) for v in args.color.split(","))
        except ValueError:
            color = ()
        if len(color) != 3:
            raise ScreenEnvError(f"--color {args.color!r}: give r,g,b, e.g. 255,255,255")
    written = cut(
        args.frame,
        parse_region(args.region),
        args.label,
        args.out,
        color=color,
        tolerance=args.tolerance,
        threshold=args.threshold,
    )
    print(f"wrote {len(written)} glyphs to {args.out}: " + (", ".join(p.name for p in written) or "none new"))


COMMAND = Command(
    help="see what the screen kit sees (probe) and cut glyphs from a frame (glyphs)",
    add_arguments=add_arguments,
    run=run,
    description=__doc__.split("\n\n")[0],
)
