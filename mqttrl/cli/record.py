"""``mqttrl record OUT``: play an env and write its episodes to a demonstration dataset (mqttrl.demos).

Exit status: 0 after the episodes, 2 when the player, the env id or OUT cannot be used (one line),
1 when the env fails while playing (one line; the episodes finished so far are kept).
"""

from __future__ import annotations

import argparse
import json
import sys

from mqttrl.cli.common import Command
from mqttrl.cli.enjoy import positive_int

EPILOG = """examples:
  mqttrl record demos/lunar --env LunarLander-v3 --episodes 10 \\
      --policy gymnasium.envs.box2d.lunar_lander:heuristic          (a scripted expert)
  mqttrl record demos/cartpole --from runs/cartpole-dqn --episodes 20  (a trained agent; its env)
  mqttrl record demos/lunar-me --env LunarLander-v3 --keys configs/keys/lunarlander.toml --played-by me
                                                                     (you, at the keyboard)
  mqttrl train configs/lunarlander_dqn.toml --demos demos/lunar      (learn from them)
  mqttrl record demos/lunar --to-minari mqttrl/lunarlander/heuristic-v0  (export to Minari)
  mqttrl record demos/lunar-copy --minari mqttrl/lunarlander/heuristic-v0    (import a Minari dataset)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="OUT", help="dataset directory to write (made if missing)")
    p.add_argument("--env", help="gymnasium id, module:Env-v0 or an env plugin's name (default: --from's run env)")
    p.add_argument(
        "--config",
        metavar="TOML",
        help="take the env (id, kwargs) and, for --keys, its real-time rate (env.control_hz) from a run config",
    )
    p.add_argument("--env-kwargs", default="{}", metavar="JSON", help="the env's keyword arguments, a JSON object")
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--policy",
        metavar="MODULE:FUNCTION",
        help="a scripted expert: a function of (obs) or (env, obs) returning the action",
    )
    who.add_argument(
        "--from",
        dest="run",
        metavar="RUN",
        help="a trained agent: a run directory, checkpoint or weights file (greedy; mqttrl.load_policy)",
    )
    who.add_argument(
        "--keys",
        metavar="TOML",
        help="a person: a window shows the game, keys map to actions as the TOML file says (docs/demonstrations.md)",
    )
    who.add_argument(
        "--minari",
        metavar="DATASET",
        help="import a Minari dataset (its id in Minari's data folder, or its path) instead of playing "
        "(pip install -e '.[minari]')",
    )
    p.add_argument(
        "--to-minari",
        metavar="ID",
        help="then export OUT as the Minari dataset ID (e.g. mqttrl/lunarlander/heuristic-v0) into Minari's data "
        "folder ($MINARI_DATASETS_PATH, default ~/.minari/datasets); alone: export the dataset OUT as it is",
    )
    p.add_argument("--episodes", type=positive_int, default=10, metavar="N", help="episodes to record")
    p.add_argument("--seed", type=int, default=0, help="episode i resets the env with seed SEED + i")
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="cut an episode after N steps (truncated)")
    p.add_argument(
        "--played-by",
        metavar="NAME",
        help="who played, stored with each episode (default: the policy or run, 'person')",
    )
    p.add_argument("--append", action="store_true", help="add to an existing dataset of the same env")
    p.add_argument(
        "--fps",
        type=float,
        metavar="HZ",
        help="--keys: steps per second (default: --config's env.control_hz, else the env's render_fps, else 30)",
    )
    p.add_argument("--which", choices=("auto", "best", "latest"), default="auto", help="--from: which model of the run")


def _fail(message: str, code: int) -> None:
    print(f"mqttrl record: {message}", file=sys.stderr)
    raise SystemExit(code)


def _env_kwargs(text: str) -> dict:
    try:
        kwargs = json.loads(text)
    except ValueError as e:
        _fail(f"--env-kwargs {text!r} is not JSON ({e})", 2)
    if not isinstance(kwargs, dict):
        _fail(f"--env-kwargs {text!r}: expected a JSON object", 2)
    return kwargs


def run(args: argparse.Namespace) -> None:
    from mqttrl.demos import DatasetError
    from mqttrl.demos.sources import SourceError

    if not (args.policy or args.run or args.keys or args.minari):
        if not args.to_minari:
            _fail("who plays? one of --policy, --from, --keys, --minari (or --to-minari to export OUT)", 2)
        return _export(args)
    if args.minari:
        return _import(args)
    try:
        _record(args, _env_kwargs(args.env_kwargs))
    except (DatasetError, SourceError) as e:
        _fail(str(e), 2)
    if args.to_minari:
        _export(args)


def _record(args: argparse.Namespace, kwargs: dict) -> None:
    """Make the env (from --env, --config or --from's run), the player, and record."""
    from mqttrl.demos import DatasetWriter
    from mqttrl.envs.make import make_env

    act = None
    if args.config:
        from mqttrl.cli.common import load

        cfg = load(args.config, [])
        args.env = args.env or cfg.env.id
        kwargs = {**cfg.env.kwargs, **kwargs}
        hz = float(cfg.env.control_hz)
        args.fps = args.fps or hz or None
    if args.run:
        from mqttrl.demos.sources import run_policy

        policy, act = run_policy(args.run, args.which)
        if args.env is None and policy.config is not None:
            args.env, kwargs = policy.config.env.id, {**policy.config.env.kwargs, **kwargs}
    if args.env is None:
        _fail("--env is needed (or --from a run whose config names its env)", 2)
    if args.keys:
        kwargs.setdefault("render_mode", "rgb_array")
    env = make_env(args.env, kwargs)
    try:
        stored = {k: v for k, v in kwargs.items() if k != "render_mode"}  # how it was shown is not the game
        writer = DatasetWriter(args.out, args.env, env.observation_space, env.action_space, stored, args.append)
        played, played_by = _player(args, env, act)
        print(f"recording {args.episodes} episodes of {args.env} played by {played_by} into {args.out}", flush=True)
        _write(writer, played, args.out)
    finally:
        env.close()


def _player(args: argparse.Namespace, env, act):
    """The episodes the chosen player plays (a generator) and who that is."""
    from mqttrl.demos.sources import function_policy, play_episodes

    if args.keys:
        from mqttrl.demos.keyboard import KeyboardPlayer

        played_by = args.played_by or "person"
        player = KeyboardPlayer.from_toml(args.keys, env, fps=args.fps)
        return player.play(args.episodes, played_by, args.seed, args.max_steps), played_by
    if args.policy:
        act = function_policy(args.policy, env)
    played_by = args.played_by or (f"policy:{args.policy}" if args.policy else f"run:{args.run}")
    return play_episodes(env, act, args.episodes, played_by, args.seed, args.max_steps), played_by


def _write(writer, played, out: str) -> None:
    """Each episode into the dataset as it ends; a failing env or player keeps what was written."""
    from mqttrl.demos import DatasetError
    from mqttrl.demos.sources import SourceError, record

    try:
        returns = record(writer, played)
    except (DatasetError, SourceError):
        raise
    except KeyboardInterrupt:
        print("interrupted: the episodes finished so far are kept", file=sys.stderr)
        return
    except Exception as e:
        _fail(f"the env or player failed: {type(e).__name__}: {e} ({writer.episodes} episodes kept)", 1)
    if returns:
        mean = sum(returns) / len(returns)
        print(f"{len(returns)} episodes, mean return {mean:.2f}; dataset {out} holds {writer.episodes}")


def _export(args: argparse.Namespace) -> None:
    from mqttrl.demos import DatasetError, read_dataset
    from mqttrl.demos.minari_io import to_minari

    try:
        where = to_minari(read_dataset(args.out), args.to_minari, author=args.played_by)
    except DatasetError as e:
        _fail(str(e), 2)
    print(f"exported {args.out} as the Minari dataset {args.to_minari} ({where})")


def _import(args: argparse.Namespace) -> None:
    from mqttrl.demos import DatasetError
    from mqttrl.demos.minari_io import from_minari

    try:
        dataset = from_minari(args.minari, args.out, env_id=args.env, append=args.append)
    except DatasetError as e:
        _fail(str(e), 2)
    print(f"imported the Minari dataset {args.minari}: {dataset.describe()}")
    if args.to_minari:
        _export(args)


COMMAND = Command(
    help="play an env (a scripted expert, a trained agent or you) and record its episodes as demonstrations",
    description="Play an env and write its episodes to a demonstration dataset (safetensors + a JSON\n"
    "manifest), for `mqttrl train --demos`. Exit 2 if the player, env or OUT cannot be used, 1 if\n"
    "the env fails (episodes finished so far are kept).",
    epilog=EPILOG,
    raw=True,
    add_arguments=add_arguments,
    run=run,
)
