"""Bytes and encode/decode time of one sample batch per compression (none, lz4, zstd-1, zstd-3).

Batches of 256 transitions as DQN sends them without frame pooling (``obs`` and ``next_obs``
whole, plus ``action``, ``reward``, ``discount``):

- MinAtar Breakout: bool (10, 10, 4) observations, from random play (``minatar/Breakout``);
- Atari Pong: uint8 (4, 84, 84) frame stacks, from random play (``atari/Pong``);
- uniform random uint8 (4, 84, 84) stacks: the worst case, nothing to compress.

A missing env (extra not installed) is skipped. Times are medians of ``--reps`` runs, single
thread. Run: ``python -m benchmarks.bench_compression [--reps 30]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from mqttrl.wire import decode_batch, encode_batch

CODECS = [("none", None), ("lz4", None), ("zstd", 1), ("zstd", 3)]
N = 256


def rollout(env_id: str, n: int = N, seed: int = 0) -> dict[str, np.ndarray] | None:
    """``n`` consecutive transitions of random play, as a DQN batch's arrays."""
    from mqttrl.envs.make import make_env
    from mqttrl.plugin.manager import get_registry

    try:
        env = make_env(env_id, {}, get_registry())
    except Exception as e:  # the env's extra is not installed
        print(f"skipping {env_id}: {e}")
        return None
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows = {"obs": [], "next_obs": [], "action": [], "reward": [], "discount": []}
    while len(rows["obs"]) < n:
        action = env.action_space.sample()
        nxt, reward, term, trunc, _ = env.step(action)
        for k, v in (("obs", obs), ("next_obs", nxt), ("action", action), ("reward", reward)):
            rows[k].append(v)
        rows["discount"].append(0.0 if term else 0.99)
        obs = env.reset()[0] if term or trunc else nxt
    env.close()
    out = {k: np.stack(v) for k, v in rows.items() if k in ("obs", "next_obs")}
    out["action"] = np.asarray(rows["action"], np.int64)
    out["reward"] = np.asarray(rows["reward"], np.float32)
    out["discount"] = np.asarray(rows["discount"], np.float32)
    return out


def noise(n: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8),
        "next_obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8),
        "action": rng.integers(0, 6, n),
        "reward": np.zeros(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def measure(name: str, arrays: dict[str, np.ndarray], reps: int) -> None:
    raw = sum(a.nbytes for a in arrays.values())
    print(f"\n{name}: {', '.join(f'{k} {a.dtype}{list(a.shape)}' for k, a in arrays.items())}; arrays {raw:,} B")
    print(f"  {'compression':<12}{'bytes':>12}{'ratio':>8}{'encode ms':>11}{'decode ms':>11}  header codec")
    for codec, level in CODECS:
        label = codec if level is None else f"{codec}-{level}"

        def enc(codec=codec, level=level):
            return encode_batch("bench", "w0", 1, 1, arrays, compression=codec, level=level)

        payload = enc()
        batch = decode_batch(payload)
        assert all(np.array_equal(batch.arrays[k], v) for k, v in arrays.items())
        codec_used = "none" if b'"codec"' not in payload[:4096] else codec
        enc_ms = median_ms(enc, reps)
        dec_ms = median_ms(lambda p=payload: decode_batch(p), reps)
        print(f"  {label:<12}{len(payload):>12,}{raw / len(payload):>8.1f}{enc_ms:>11.3f}{dec_ms:>11.3f}  {codec_used}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    for name, arrays in (
        ("MinAtar Breakout, 256 transitions, bool (10,10,4)", rollout("minatar/Breakout")),
        ("Atari Pong, 256 transitions, uint8 (4,84,84) stacks", rollout("atari/Pong")),
        ("uniform random uint8 (4,84,84) stacks, 256 transitions", noise()),
    ):
        if arrays is not None:
            measure(name, arrays, args.reps)


if __name__ == "__main__":
    main()
