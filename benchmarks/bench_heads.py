"""Per-update CPU cost of DQN's heads: dqn, c51, qr, noisy and rainbow side by side, one process.

Not a test: it prints figures measured in one run. For each variant (the rainbow_ablation scenario's
VARIANTS: the config with one ingredient on) the learner gets the same number of real transitions (the config's
env played by the variant's own actor, encoded and decoded as a worker sends them), then
gradient updates are timed in rounds, the variants interleaved round by round so that a change in
the machine's load spreads over all of them; the median round per variant is reported, in ms per
update and as a multiple of dqn's. ``--old-projection`` adds "c51-hat" and "rainbow-hat": the same
variants with the (B, K, K) C51 projection that ``c51_project`` replaced (the O(B K) fix's gain).
``--noisy-head`` adds "noisy-head" and "rainbow-head": noisy heads only (``noisy_layers = "head"``),
where "noisy" and "rainbow" have the default, every dense layer noisy. ``--configs`` times several
configs one after the other and prints one table with a column each; ``--threads`` sets torch's
threads (mqttrl's processes use 1).

    python -m benchmarks.bench_heads --config configs/minatar_breakout_dqn.toml --old-projection
    python -m benchmarks.bench_heads --configs configs/minatar_breakout_dqn.toml configs/cartpole_rainbow.toml \
        configs/lunarlander_dqn.toml --noisy-head --transitions 3000 --rounds 7 --updates 20
    python -m benchmarks.bench_heads --config configs/cartpole_rainbow.toml --rounds 15 --updates 40
    python -m benchmarks.bench_heads --projection 32 128 512    # the C51 projection alone, old and new
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import mqttrl  # noqa: F401  (first: one BLAS thread per process)
from benchmarks.scenarios.rainbow_ablation import VARIANTS
from mqttrl.config import load_config
from mqttrl.envs.make import make_env
from mqttrl.envs.rollout import EnvSet
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry
from mqttrl.wire import decode_batch, encode_batch

#: the variants timed (the rainbow_ablation scenario's names)
TIMED = ("dqn", "c51", "qr", "noisy", "rainbow")
#: --noisy-head: the noisy variants with noisy heads only (before noisy_layers existed, the only kind)
HEAD_ONLY = {f"{name}-head": [*VARIANTS[name], 'algorithm.noisy_layers="head"'] for name in ("noisy", "rainbow")}


def hat_projection(next_probs, reward, discount, support, ends=None):
    """The C51 projection as it was before the O(B K) fix: a (B, K, K) tensor of hat weights."""
    v_min, v_max = ends if ends is not None else (float(support[0]), float(support[-1]))
    dz = (v_max - v_min) / (support.numel() - 1)
    tz = (reward.unsqueeze(1) + discount.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    weight = (1.0 - (tz.unsqueeze(1) - support.view(1, -1, 1)).abs() / dz).clamp(min=0.0)
    return (weight * next_probs.unsqueeze(1)).sum(dim=2)


def record(cfg, info, n_transitions: int, seed: int = 0) -> list[bytes]:
    """Payloads as one worker sends them: the config's actor (its own exploration, and its priorities
    when the variant has actor priorities) playing the config's env."""
    params = cfg.algorithm.params
    envs = EnvSet(lambda: make_env(cfg.env.id, cfg.env.kwargs), cfg.env.num_envs, seed=seed)
    space, acts = envs.envs[0].observation_space, envs.envs[0].action_space
    forward = info.make_forward(params, space, acts, "numpy", seed)
    actor = info.make_actor(params, space, acts, ActorContext(num_envs=cfg.env.num_envs, seed=seed), forward)
    payloads, made = [], 0
    while made < n_transitions:
        while actor.pending() < cfg.worker.batch_size:
            actions, extras = actor.act(envs.obs)
            obs, rewards, next_obs, term, trunc, _ = envs.step(actions)
            actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
        count = actor.pending()
        payloads.append(encode_batch(cfg.run, "w0", len(payloads), 1, actor.take(), incarnation="i0", count=count))
        made += count
    envs.close()
    return payloads


def make_learners(config: str, names: list[str], transitions: int, extra: list[str]) -> dict:
    registry = get_registry()
    out = {}
    for name in names:
        base = name.removesuffix("-hat")
        sets = HEAD_ONLY[name] if name in HEAD_ONLY else VARIANTS[base]
        cfg = load_config(config, [*sets, *extra], lambda n: registry.algorithm(n).params)
        info = registry.algorithm(cfg.algorithm.name)
        env = make_env(cfg.env.id, cfg.env.kwargs, registry)
        space, acts = env.observation_space, env.action_space
        env.close()
        learner = info.make_learner(cfg.algorithm.params, space, acts, "cpu", 0)
        for payload in record(cfg, info, transitions):
            learner.add(decode_batch(payload))
        out[name] = learner
    return out


def time_round(learner, updates: int, old_projection: bool) -> float:
    """Seconds per update over ``updates`` updates (the projection swapped in for the '-hat' variants)."""
    from mqttrl_plugins.dqn import heads

    saved = heads.c51_project
    if old_projection:
        heads.c51_project = hat_projection
    try:
        t0 = time.perf_counter()
        for _ in range(updates):
            learner.train_step()
        return (time.perf_counter() - t0) / updates
    finally:
        heads.c51_project = saved


def time_projections(batches: list[int], atoms: int = 51) -> None:
    """The C51 projection alone, the (B, K, K) form against c51_project, on the same inputs."""
    import timeit

    import torch

    from mqttrl_plugins.dqn.heads import c51_project

    print("| batch | (B, K, K) form | c51_project | speed-up |")
    print("|---|---|---|---|")
    for b in batches:
        z = torch.linspace(-10.0, 10.0, atoms)
        probs, reward = torch.softmax(torch.randn(b, atoms), 1), torch.randn(b) * 5
        discount = torch.full((b,), 0.97)
        assert (c51_project(probs, reward, discount, z) - hat_projection(probs, reward, discount, z)).abs().max() < 1e-6
        times = [
            min(timeit.repeat(lambda f=f: f(probs, reward, discount, z), number=200, repeat=7)) / 200
            for f in (hat_projection, c51_project)
        ]
        print(f"| {b} | {times[0] * 1e3:.3f} ms | {times[1] * 1e3:.3f} ms | {times[0] / times[1]:.1f}x |")


def measure(config: str, names: list[str], args) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Median seconds per update of each variant on ``config`` (rounds interleaved across variants)."""
    learners = make_learners(config, names, args.transitions, args.extra)
    for name, learner in learners.items():  # warm-up (allocations, first noise draws)
        time_round(learner, 5, name.endswith("-hat"))
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            rounds[name].append(time_round(learner, args.updates, name.endswith("-hat")))
    median = {name: statistics.median(v) for name, v in rounds.items()}
    batch = learners["dqn"].params.batch_size
    print(f"{config}: batch {batch}, {args.rounds} rounds of {args.updates} updates, median", flush=True)
    return median, rounds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/minatar_breakout_dqn.toml")
    p.add_argument("--configs", nargs="+", help="several configs, one column each (instead of --config)")
    p.add_argument("--transitions", type=int, default=6000, help="real transitions in each learner's replay")
    p.add_argument("--rounds", type=int, default=11, help="timed rounds per variant (median reported)")
    p.add_argument("--updates", type=int, default=30, help="updates per round")
    p.add_argument("--old-projection", action="store_true", help="also time c51 and rainbow with the (B,K,K) form")
    p.add_argument("--noisy-head", action="store_true", help='also time noisy and rainbow with noisy_layers = "head"')
    p.add_argument("--threads", type=int, default=1, help="torch threads (mqttrl's learner: 1)")
    p.add_argument("--set", dest="extra", action="append", default=[], help="extra overrides for every variant")
    p.add_argument("--json", help="write the figures here")
    p.add_argument(
        "--projection", type=int, nargs="+", metavar="B", help="only time the C51 projection at these batches"
    )
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.projection:
        time_projections(args.projection)
        return

    names = list(TIMED) + (["c51-hat", "rainbow-hat"] if args.old_projection else [])
    names += list(HEAD_ONLY) if args.noisy_head else []
    configs = args.configs or [args.config]
    results = {config: measure(config, names, args) for config in configs}
    print(
        f"{os.cpu_count()} cores, torch {torch.__version__} threads {torch.get_num_threads()}, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print("| variant | " + " | ".join(Path(c).stem for c in configs) + " |")
    print("|---|" + "---|" * len(configs))
    for name in names:
        cells = []
        for config in configs:
            median = results[config][0]
            cells.append(f"{median[name] * 1e3:.2f} ms ({median[name] / median['dqn']:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        out = {c: {"median_s": m, "rounds": r} for c, (m, r) in results.items()}
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
