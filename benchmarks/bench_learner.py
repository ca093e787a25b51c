"""Learner benchmark: what one DQN learner ingests and trains on pixel transitions, on CPU or GPU.

Not a test: it prints figures measured in one run. Real transitions first: ``--workers``
actors (the config's DQN actor over the numpy forward, random initial weights) play
the config's env and their batches are encoded as workers send them (frames, the
config's compression). Then the learner (the config's network and replay, on
``--device``) takes them as the learner node does (decode, validate, add) and trains:

- ingest: transitions/s and MB/s (wire bytes) through decode + validate + replay add;
- replay bytes per transition once full (``FrameReplay.nbytes()``: frames, references,
  the index of repeated frames);
- training: gradient updates/s at the config's batch size (and more with --batches),
  with sampling and the host-to-device copy included; the env steps/s that pace would
  sustain at the config's replay_ratio.

    python -m benchmarks.bench_learner --config configs/atari_pong_dqn.toml --device cpu
    python -m benchmarks.bench_learner --config configs/atari_pong_dqn.toml --device cuda --batches 32 128 512
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import attrs
import numpy as np

import mqttrl  # noqa: F401  (first: one BLAS thread per process)
from mqttrl.config import load_config
from mqttrl.envs.make import make_env
from mqttrl.envs.rollout import EnvSet
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry
from mqttrl.wire import decode_batch, encode_batch


def record_batches(cfg, info, n_transitions: int, workers: int, seed: int) -> list[bytes]:
    """Payloads as ``workers`` workers would send them, round-robin, with real env frames."""
    params = cfg.algorithm.params
    sources = []
    for w in range(workers):
        envs = EnvSet(lambda: make_env(cfg.env.id, cfg.env.kwargs), cfg.env.num_envs, seed=seed + 100 * w)
        space, acts = envs.envs[0].observation_space, envs.envs[0].action_space
        forward = info.make_forward(params, space, acts, "numpy", seed)
        ctx = ActorContext(num_envs=cfg.env.num_envs, seed=seed + w, first_env_index=w * cfg.env.num_envs)
        sources.append((envs, info.make_actor(params, space, acts, ctx, forward)))
    payloads, made, seq = [], 0, [0] * workers
    rng = np.random.default_rng(seed)
    compression = getattr(cfg.worker, "compression", "none")
    while made < n_transitions:
        for w, (envs, actor) in enumerate(sources):
            while actor.pending() < cfg.worker.batch_size:
                # the actor's extras (rainbow's actor priorities need its Q values) with random actions
                _, extras = actor.act(envs.obs)
                actions = rng.integers(0, envs.envs[0].action_space.n, envs.num_envs)
                obs, rewards, next_obs, term, trunc, _ = envs.step(actions)
                actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
            count = actor.pending()
            kwargs = {"compression": compression} if compression != "none" else {}
            payloads.append(
                encode_batch(cfg.run, f"w{w}", seq[w], 1, actor.take(), incarnation=f"i{w}", count=count, **kwargs)
            )
            seq[w] += 1
            made += count
    for envs, _ in sources:
        envs.close()
    return payloads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/atari_pong_dqn.toml")
    p.add_argument("--device", default="cpu", help="torch device for the learner (default: cpu)")
    p.add_argument("--transitions", type=int, default=20_000, help="real transitions to record (default: 20000)")
    p.add_argument("--workers", type=int, default=2, help="workers whose batches interleave (default: 2)")
    p.add_argument(
        "--fill",
        type=int,
        default=0,
        help="fill the replay to this many transitions by replaying "
        "the recorded batches again (default: the config's buffer_size)",
    )
    p.add_argument("--updates", type=int, default=200, help="timed gradient updates per batch size (default: 200)")
    p.add_argument("--batches", type=int, nargs="*", default=[], help="batch sizes to time besides the config's")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    registry = get_registry()
    cfg = load_config(args.config, [], lambda n: registry.algorithm(n).params)
    info = registry.algorithm(cfg.algorithm.name)
    env = make_env(cfg.env.id, cfg.env.kwargs)
    space, acts = env.observation_space, env.action_space
    env.close()
    params = cfg.algorithm.params
    figures: dict = {
        "config": args.config,
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
    }

    t0 = time.perf_counter()
    payloads = record_batches(cfg, info, args.transitions, args.workers, cfg.train.seed)
    figures["record_s"] = round(time.perf_counter() - t0, 1)
    wire = sum(len(x) for x in payloads)

    learner = info.make_learner(params, space, acts, args.device, 0)
    fill = args.fill or params.buffer_size
    t0 = time.perf_counter()
    added = 0
    for payload in payloads:
        batch = decode_batch(payload)
        learner.add(batch)  # validates against the sample spec, then the replay stores it
        added += batch.count
    ingest_s = time.perf_counter() - t0
    figures["ingest_transitions_per_s"] = round(added / ingest_s)
    figures["ingest_MB_per_s"] = round(wire / ingest_s / 1e6, 1)
    figures["wire_bytes_per_transition"] = round(wire / added)
    # fill the replay (the same frames under new incarnations: stored anew, as from other workers)
    rounds = 0
    while learner.size < min(fill, params.buffer_size):
        rounds += 1
        for payload in payloads:
            b = decode_batch(payload)
            learner.add(attrs.evolve(b, incarnation=f"{b.incarnation}-{rounds}"))
            if learner.size >= fill:
                break
    replay = learner.replay
    figures["replay_transitions"] = learner.size
    figures["replay_bytes_per_transition"] = round(replay.nbytes() / learner.size)
    if hasattr(replay, "frames_stored"):
        figures["replay_frames_per_transition"] = round(replay.frames_stored() / learner.size, 3)

    sizes = [params.batch_size, *args.batches]
    figures["train"] = {}
    for bs in sizes:
        learner.params.batch_size = bs
        for _ in range(10):  # warm-up (cuDNN autotuning, allocator)
            learner.train_step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.updates):
            learner.train_step()  # on CUDA it reads the previous update's metrics back, as the learner node does
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()  # the last update is done too
        dt = time.perf_counter() - t0
        ups = args.updates / dt
        figures["train"][bs] = {
            "updates_per_s": round(ups, 1),
            "samples_per_s": round(ups * bs),
            "env_steps_per_s_at_replay_ratio": round(ups * bs / params.replay_ratio),
        }
    print(
        f"{args.config} on {args.device} ({figures['gpu'] or platform.processor() or 'cpu'}), torch {torch.__version__}"
    )
    print(f"recorded {added:,} transitions from {args.workers} workers in {figures['record_s']} s")
    print(
        f"ingest (decode + validate + replay add): {figures['ingest_transitions_per_s']:,} transitions/s, "
        f"{figures['ingest_MB_per_s']} MB/s of wire bytes; {figures['wire_bytes_per_transition']} B/transition on the wire"
    )
    print(
        f"replay at {learner.size:,} transitions: {figures['replay_bytes_per_transition']:,} B/transition"
        + (
            f", {figures['replay_frames_per_transition']} frames/transition"
            if "replay_frames_per_transition" in figures
            else ""
        )
    )
    print("| batch | updates/s | samples/s | env steps/s at replay_ratio |")
    print("|---|---|---|---|")
    for bs, t in figures["train"].items():
        print(f"| {bs} | {t['updates_per_s']} | {t['samples_per_s']:,} | {t['env_steps_per_s_at_replay_ratio']:,} |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
