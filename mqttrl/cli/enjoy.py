"""``mqttrl enjoy PATH``: play a trained policy in its env, no broker, no torch (:func:`mqttrl.load_policy`).

Exit status: 0 after the episodes, 2 when PATH holds no policy that loads (one line saying why) or
its env is set wrong (a config error), 5 when a package the env or ``--video`` needs is missing
(the line names what to install), 1 when the env cannot be made or recorded otherwise (one line).
"""

from __future__ import annotations

import argparse
import sys

from mqttrl.cli.common import Command, model_args
from mqttrl.cli.errors import EXIT_FAILED, EXIT_MISSING, EXIT_USAGE
from mqttrl.policy.source import describe_choice


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a whole number of at least 1")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    model_args(p)
    p.add_argument("--episodes", type=positive_int, default=5, metavar="N", help="episodes to play")
    p.add_argument("--render", action="store_true", help="show the game in a window (render_mode human)")
    p.add_argument(
        "--video",
        metavar="DIR",
        help="record every episode as an mp4 file in DIR (gymnasium's RecordVideo; needs moviepy: "
        "pip install 'mqttrl[video]') (default: no video)",
    )
    p.add_argument("--seed", type=int, default=0, help="episode i resets the env with seed SEED + i")
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="act as the workers explore at the end of their schedules (DQN: epsilon-greedy or noisy; PPO: "
        "sampled) instead of greedily",
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        metavar="N",
        help="end an episode after N steps (default: when the env ends it, e.g. its time limit)",
    )


def _fail(message: str, code: int) -> None:
    print(f"mqttrl enjoy: {message}", file=sys.stderr)
    raise SystemExit(code)


def make_env(policy, render: bool, video: str | None):
    """The run's env for watching: a window (``render``) and/or every episode recorded to ``video``."""
    import gymnasium as gym

    mode = "rgb_array" if video else ("human" if render else None)
    env = policy.make_env(render_mode=mode)
    if video:
        try:
            import moviepy  # noqa: F401  (RecordVideo needs it only when the first episode ends)
        except ImportError:
            env.close()
            raise gym.error.DependencyNotInstalled(
                "--video needs moviepy to write mp4 files: pip install 'mqttrl[video]'"
            ) from None
        env = gym.wrappers.RecordVideo(
            env, video, episode_trigger=lambda _: True, name_prefix=policy.algorithm, disable_logger=True
        )
        if render:  # a window too: shows the frames RecordVideo records
            env = gym.wrappers.HumanRendering(env)
    return env


def _env_or_exit(policy, args: argparse.Namespace, env_id: str):
    """The env to play in, or one line and the table's code: 5 for a package that is missing
    (moviepy for --video, an env's extra), 2 for a config mistake, 1 for anything else."""
    import gymnasium as gym

    from mqttrl.config import ConfigError
    from mqttrl.plugin.manager import MissingDependency

    try:
        return make_env(policy, args.render, args.video)
    except (gym.error.DependencyNotInstalled, MissingDependency) as e:
        _fail(str(e), EXIT_MISSING)
    except ModuleNotFoundError as e:
        from mqttrl.cli.errors import missing_module_hint

        _fail(f"cannot make the env {env_id}: {missing_module_hint(e.name or str(e))}", EXIT_MISSING)
    except ConfigError as e:
        _fail(f"cannot make the env {env_id}: {e}", EXIT_USAGE)
    except Exception as e:
        _fail(f"cannot make the env {env_id}: {type(e).__name__}: {e}", EXIT_FAILED)


def run(args: argparse.Namespace) -> None:
    import numpy as np

    from mqttrl.policy import load_policy

    try:
        policy = load_policy(args.path, which=args.which)
    except (OSError, ValueError) as e:
        _fail(str(e), 2)
    env_id = policy.config.env.id if policy.config is not None else "(unknown: no run config)"
    env = _env_or_exit(policy, args, env_id)
    print(f"playing {describe_choice(policy.source)}")
    print(f"{policy.algorithm} policy in env {env_id}", flush=True)
    returns = []
    try:
        played = policy.play(
            env, args.episodes, seed=args.seed, deterministic=not args.stochastic, max_steps=args.max_steps
        )
        for i, (ret, steps) in enumerate(played, 1):
            returns.append(ret)
            print(f"episode {i}: return {ret:.2f}, {steps} steps", flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    except Exception as e:
        _fail(f"the env failed: {type(e).__name__}: {e}", 1)
    finally:
        env.close()
    if returns:
        r = np.asarray(returns)
        print(f"mean return {r.mean():.2f} over {len(r)} episodes (min {r.min():.2f}, max {r.max():.2f})")
    if args.video and returns:
        print(f"videos in {args.video}")


COMMAND = Command(
    help="play a trained policy in its env and print the returns (no broker needed)",
    description="Load a trained policy (mqttrl.load_policy: numpy only, no torch, no broker) and play it\n"
    "in the run's env, printing each episode's return and the mean. Exit 2 if PATH holds no\n"
    "policy, 5 if a package the env or --video needs is missing, 1 if the env cannot be made or fails.",
    epilog="examples:\n"
    "  mqttrl train configs/cartpole_dqn.toml --run-dir runs/cartpole-dqn\n"
    "  mqttrl enjoy runs/cartpole-dqn --episodes 10\n"
    "  mqttrl enjoy runs/cartpole-dqn --which latest --render\n"
    "  mqttrl enjoy runs/cartpole-dqn/checkpoints/ckpt-0000001000\n"
    "  mqttrl enjoy runs/cartpole-dqn/best/weights.safetensors --video videos",
    add_arguments=add_arguments,
    run=run,
    raw=True,
)
