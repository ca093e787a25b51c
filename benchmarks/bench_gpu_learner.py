"""GPU learner benchmark: DQN and Rainbow updates/s on Pong-sized pixels, against the network's own limit.

Not a test: it prints figures measured in one run. For each algorithm (the Nature-CNN DQN of
configs/atari_pong_dqn.toml; Rainbow: C51 on [-10, 10], noisy nets, prioritized replay with the
actors' priorities, dueling, double, 3-step) and each batch size, the learner's replay is filled
with ``--fill`` synthetic Pong transitions (random 84x84 uint8 frames in stacks of 4, sent as a
worker sends frames: each frame once, consecutive batches sharing frames) through
``DQNLearner.add``, then ``train_step`` is timed in these modes:

- ``before``: the learner as it was before the device replay (``--before DIR``: a copy of that
  commit's ``plugins/dqn`` as package ``dqn_before`` under DIR; skipped without it);
- ``host``: the host replay with the next batch made during the update (``prefetch``);
- ``device``: the replay on the device (``replay_device = "device"``);
- ``device_bf16``: the same under bf16 autocast; ``device_compile`` / ``device_graphs``:
  ``compile = "default"`` / ``"reduce-overhead"`` (only at the batch sizes of ``--compile-batches``);
- ``bare``: the same update's forwards, loss, backward and Adam step on one batch already on the
  device (no sampling, no noise, no priorities, no metrics): the GPU's own limit for the update;
- ``fwd_bwd``: the online net's forward and backward alone on that batch.

Each figure: updates/s over at least ``--min-updates`` updates and ``--seconds`` seconds after
``--warmup`` updates, the device synchronised before and after.

    python -m benchmarks.bench_gpu_learner --device cuda --before .devwheels/before --json out.json
    python -m benchmarks.bench_gpu_learner --device cpu --fill 4000 --batches 32 256 --seconds 2
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import mqttrl  # noqa: F401  (first: one BLAS thread per process)
from mqttrl.wire import SampleBatch

OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACT = gym.spaces.Discrete(6)
#: configs/atari_pong_dqn.toml's network and targets
DQN = dict(
    network="nature_cnn", lr=1e-4, adam_eps=1.5e-4, double=True, dueling=True, n_step=3, target_update_every=2000
)
RAINBOW = dict(
    DQN,
    lr=6.25e-5,
    distributional="c51",
    v_min=-10.0,
    v_max=10.0,
    noisy=True,
    prioritized=True,
    initial_priority="actor",
)
ALGOS = {"dqn": DQN, "rainbow": RAINBOW}


_POOLS: dict = {}


def _pool(n: int, seed: int) -> np.ndarray:
    """Random frames, made once per run (every learner is filled with the same)."""
    if (n, seed) not in _POOLS:
        _POOLS.clear()
        _POOLS[n, seed] = np.random.default_rng(seed + 1).integers(0, 256, (n, 84, 84), dtype=np.uint8)
    return _POOLS[n, seed]


def synthetic_batches(n: int, per_batch: int, prioritized: bool, seed: int = 0):
    """``n`` transitions of one stream of random frames, as a worker sends them: transition t
    stacks frames t..t+3, its 3-step next observation frames t+3..t+6; batches share frames."""
    rng = np.random.default_rng(seed)
    pool = _pool(n + 7, seed)
    window = np.arange(4)[None, :]
    for seq, start in enumerate(range(0, n, per_batch)):
        m = min(per_batch, n - start)
        obs_ref = (np.arange(m)[:, None] + window).astype(np.int32)
        arrays = {
            "frames": pool[start : start + m + 7],
            "frame_ids": np.arange(start, start + m + 7, dtype=np.int64),
            "obs_ref": obs_ref,
            "next_obs_ref": obs_ref + 3,
            "action": rng.integers(0, ACT.n, m),
            "reward": rng.choice(np.array([-1.0, 0.0, 0.0, 0.0, 1.0], np.float32), m),
            "discount": np.full(m, 0.99**3, np.float32),
        }
        if prioritized:
            arrays["priority"] = rng.uniform(0, 2, m).astype(np.float32)
        yield SampleBatch("bench", "w0", seq, 0, m, arrays, incarnation="i0")


def make_learner(mode: str, algo: str, batch: int, fill: int, device: str, before: str | None):
    kw = dict(ALGOS[algo], batch_size=batch, buffer_size=max(fill, 1024), learning_starts=batch, replay_ratio=1e9)
    if mode == "before":
        sys.path.insert(0, before)
        mod = importlib.import_module("dqn_before.learner")
        common = importlib.import_module("dqn_before.common")
        learner = mod.DQNLearner(common.DQNParams(**kw), OBS, ACT, device, 0)
    else:
        from mqttrl_plugins.dqn.common import DQNParams
        from mqttrl_plugins.dqn.learner import DQNLearner

        extra = dict(replay_device="host" if mode == "host" else "device")
        if mode == "device_bf16":
            extra["autocast"] = "bf16"
        if mode == "device_compile":
            extra["compile"] = "default"
        if mode == "device_graphs":
            extra["compile"] = "reduce-overhead"
        learner = DQNLearner(DQNParams(**kw, **extra), OBS, ACT, device, 0)
    for b in synthetic_batches(fill, 1000, bool(kw.get("prioritized"))):
        learner.add(b)
    return learner


def check_device_replay(learner, figures: dict) -> None:
    """On the benchmark's device: the device replay's samples equal the host replay's, slot by slot."""
    import torch

    idx = np.random.default_rng(0).integers(0, learner.size, 512)
    got = learner.device_replay.gather(torch.from_numpy(idx).to(learner.device))
    want = learner.replay.sample(idx)
    same = all(np.array_equal(got[k].cpu().numpy(), want[k]) for k in want)
    figures.setdefault("device_replay_equals_host", []).append(same)
    print(f"device replay == host replay for 512 random slots on {learner.device}: {same}")


def gather_ms(replay, batch: int, repeats: int = 10) -> float:
    """Milliseconds the host replay takes to gather one batch (stacks rebuilt from the frame store)."""
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(repeats):
        replay.sample(rng.integers(0, replay.size, batch))
    return (time.perf_counter() - t0) / repeats * 1000


def timed(step, sync, warmup: int, min_updates: int, seconds: float) -> tuple[float, int]:
    """(updates/s, updates timed)."""
    for _ in range(warmup):
        step()
    sync()
    t0, n = time.perf_counter(), 0
    while n < min_updates or time.perf_counter() - t0 < seconds:
        step()
        n += 1
    sync()
    return n / (time.perf_counter() - t0), n


def bare_steps(learner):
    """The update's compute alone, and the online net's forward + backward alone, on one device batch."""
    _, weights, b = learner._make_batch()
    args = (b["obs"], b["action"], b["reward"], b["next_obs"], b["discount"], weights)

    def bare():
        loss = learner._compute(*args)[0]
        learner._optimize(loss)

    def fwd_bwd():
        learner.optimizer.zero_grad(set_to_none=True)
        learner.online.outputs(b["obs"]).float().mean().backward()

    return bare, fwd_bwd


def inference_figures(device: str, rows_list: list[int], seconds: float) -> dict:
    """An inference server's forward (Nature-CNN DQN, Pong stacks from numpy, Q-values back to numpy):
    rows/s per batch of requests' rows, on the CPU (one torch thread) and on ``device``."""
    from mqttrl_plugins.dqn import make_forward
    from mqttrl_plugins.dqn.common import DQNParams

    out = {}
    obs = {n: np.random.default_rng(n).integers(0, 256, (n, 4, 84, 84), dtype=np.uint8) for n in rows_list}
    for where in ["cpu", device] if device != "cpu" else ["cpu"]:
        fwd = make_forward(DQNParams(**DQN), OBS, ACT, "torch", 0)
        fwd.to_device(where)
        for n in rows_list:
            calls, _ = timed(lambda n=n: fwd(obs[n]), lambda: None, 3, 10, seconds)
            out[f"{where}/{n}"] = round(calls * n)
            print(
                f"inference forward on {where:6s} {n:5d} rows per call: {calls * n:11,.0f} rows/s ({1000 / calls:.2f} ms/call)"
            )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--algos", nargs="*", default=list(ALGOS))
    p.add_argument("--batches", type=int, nargs="*", default=[32, 256, 1024])
    p.add_argument(
        "--modes", nargs="*", default=["before", "host", "device", "device_bf16", "device_compile", "device_graphs"]
    )
    p.add_argument("--compile-batches", type=int, nargs="*", default=[32, 256])
    p.add_argument("--fill", type=int, default=100_000, help="transitions in replay (default: 100000, Pong's buffer)")
    p.add_argument("--before", help="folder holding the package dqn_before (the learner before the device replay)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--min-updates", type=int, default=50)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--inference", type=int, nargs="*", default=[], help="also time the inference forward at these rows")
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    figures = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "fill": args.fill,
        "results": {},
    }
    print(f"{args.device} ({figures['gpu'] or figures['cpu']}), torch {torch.__version__}, replay {args.fill:,}")
    if args.inference:
        figures["inference_rows_per_s"] = inference_figures(args.device, args.inference, args.seconds)
    modes = [m for m in args.modes if m != "before" or args.before]
    for algo in args.algos:
        for mode in modes:
            compiled = mode in ("device_compile", "device_graphs")
            batches = [b for b in args.batches if not compiled or b in args.compile_batches]
            if not batches:
                continue
            t0 = time.perf_counter()
            learner = make_learner(mode, algo, batches[0], args.fill, args.device, args.before)
            print(f"{algo} {mode}: replay filled with {learner.size:,} in {time.perf_counter() - t0:.1f} s")
            if mode == "device":
                check_device_replay(learner, figures)
            for batch in batches:
                row = figures["results"].setdefault(f"{algo}/{batch}", {})
                learner.params.batch_size = batch
                try:
                    t0 = time.perf_counter()
                    row[f"{mode}_loss0"] = float(learner.train_step()["loss"])
                    first_s = time.perf_counter() - t0
                    ups, n = timed(learner.train_step, sync, args.warmup, args.min_updates, args.seconds)
                    row[mode] = round(ups, 1)
                    print(
                        f"{algo:8s} batch {batch:5d} {mode:15s} {ups:9.1f} updates/s ({n} timed; first {first_s:.1f} s)"
                    )
                    if mode == "host":  # what the host replay costs the host per update: the stack gather
                        row["host_gather_ms"] = round(gather_ms(learner.replay, batch), 2)
                    if mode == "device":
                        bare, fwd_bwd = bare_steps(learner)
                        row["bare"] = round(timed(bare, sync, args.warmup, args.min_updates, args.seconds)[0], 1)
                        row["fwd_bwd"] = round(timed(fwd_bwd, sync, args.warmup, args.min_updates, args.seconds)[0], 1)
                        print(
                            f"{algo:8s} batch {batch:5d} {'bare':15s} {row['bare']:9.1f}   fwd_bwd {row['fwd_bwd']:9.1f}"
                        )
                except Exception as e:  # one failed mode (e.g. a compile error) must not lose the others' figures
                    row[mode] = f"failed: {type(e).__name__}: {str(e)[:300]}"
                    print(f"{algo:8s} batch {batch:5d} {mode:15s} FAILED {row[mode]}")
                if args.json:
                    Path(args.json).write_text(json.dumps(figures, indent=2))
            learner = None
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    cols = [
        "before",
        "host",
        "device",
        "device_bf16",
        "device_compile",
        "device_graphs",
        "bare",
        "fwd_bwd",
        "host_gather_ms",
    ]
    print("\n| algo / batch | " + " | ".join(cols) + " | device / bare |")
    print("|---" * (len(cols) + 2) + "|")
    for key, row in figures["results"].items():
        ratio = row["device"] / row["bare"] if isinstance(row.get("device"), float) and row.get("bare") else None
        cells = [str(row.get(c, "–")) for c in cols]
        print(
            f"| {key} | " + " | ".join(cells) + f" | {ratio:.2f} |"
            if ratio
            else f"| {key} | " + " | ".join(cells) + " | – |"
        )


if __name__ == "__main__":
    main()
