"""Single-process PPO check through exactly the Actor/Learner API and the sync protocol.

Not a pytest test (no ``test_`` prefix): a script for picking and checking
the defaults of :class:`mqttrl_plugins.ppo.common.PPOParams`. It mimics the
distributed sync loop in one process:

* ``--workers`` actors, each with its own :class:`mqttrl.envs.rollout.EnvSet` of
  ``--envs`` envs (seeded like the worker node does), all holding model
  version v;
* each actor steps its envs until ``pending()`` says its share of the round
  is collected; its ``take()`` goes through ``encode_batch`` /
  ``decode_batch`` and is validated against the sample spec;
* ``learner.train_round(batches)``; ``export_weights`` goes through
  ``encode_weights`` / ``decode_weights`` to every actor (version v+1);
* every ``--eval-every`` env steps a separate greedy actor plays 20 episodes
  with :func:`mqttrl.envs.rollout.evaluate`; the run stops at a mean >= the target.

The workers step one after the other here; in a real run they step in
parallel, so the wall time below is an upper bound of a 2-worker run's
compute (evaluation time is reported separately and excluded from "train").

Usage::

    python tests/ppo_offline_check.py --seeds 0 1 2 [--config configs/cartpole_ppo.toml] [--set epochs=10] [--forward numpy|torch]

``--forward`` picks the actors' forward (default numpy, as on a worker without
torch); the greedy evaluator uses the same kind.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib

import attrs
import gymnasium as gym
import numpy as np
import torch

from mqttrl.config import build
from mqttrl.envs.rollout import EnvSet, evaluate
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.ppo import make_forward
from mqttrl_plugins.ppo.actor import PPOActor
from mqttrl_plugins.ppo.common import PPOParams, sample_spec
from mqttrl_plugins.ppo.learner import PPOLearner


def run(
    params: PPOParams,
    env_id: str,
    seed: int,
    workers: int,
    num_envs: int,
    eval_every: int,
    eval_episodes: int,
    max_steps: int,
    target: float,
    quiet: bool,
    forward: str = "numpy",
) -> dict:
    torch.manual_seed(seed)
    make = lambda: gym.make(env_id)  # noqa: E731
    probe = make()
    obs_space, act_space = probe.observation_space, probe.action_space
    probe.close()
    spec = sample_spec(params, obs_space, act_space)
    learner = PPOLearner(params, obs_space, act_space, "cpu", seed)
    envsets, actors = [], []
    for w in range(workers):
        wseed = seed * 1000 + w * 97  # as the worker node seeds its envs
        envsets.append(EnvSet(make, num_envs, wseed))
        ctx = ActorContext(num_envs=num_envs, first_env_index=w * num_envs, total_envs=workers * num_envs, seed=wseed)
        actors.append(
            PPOActor(
                params, obs_space, act_space, ctx, forward=make_forward(params, obs_space, act_space, forward, wseed)
            )
        )
    evaluator = PPOActor(
        params,
        obs_space,
        act_space,
        ActorContext(num_envs=eval_episodes, seed=10**6),
        forward=make_forward(params, obs_space, act_space, forward),
    )

    version = 0

    def publish():
        tensors, info = learner.export_weights()
        msg = decode_weights(encode_weights(version, "ppo", "check", tensors, info))
        for a in actors:
            a.load_weights(msg.tensors, msg.info)
        return msg

    weights = publish()
    steps, next_eval, seqs = 0, eval_every, [0] * workers
    ep_returns: list[float] = []
    t0 = time.perf_counter()
    eval_time = 0.0
    result = {"seed": seed, "solved": False}
    metrics: dict = {}
    best = -np.inf
    while steps < max_steps:
        batches = []
        for w, (envs, actor) in enumerate(zip(envsets, actors)):
            while not actor.pending():
                actions, extras = actor.act(envs.obs)
                obs, rewards, next_obs, term, trunc, ended = envs.step(actions)
                actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
                ep_returns.extend(e.episode_return for e in ended)
                steps += num_envs
            batch = decode_batch(encode_batch("check", f"w{w}", seqs[w], version, actor.take()))
            seqs[w] += 1
            spec.validate(batch.arrays, batch.count)
            batches.append(batch)
        metrics = learner.train_round(batches)
        version += 1
        weights = publish()
        if steps >= next_eval:
            next_eval += eval_every
            te = time.perf_counter()
            evaluator.load_weights(weights.tensors, weights.info)
            score = float(np.mean(evaluate(evaluator, make, eval_episodes, seed=10**6 + version)))
            best = max(best, score)
            eval_time += time.perf_counter() - te
            wall = time.perf_counter() - t0
            if not quiet:
                recent = np.mean(ep_returns[-20:]) if ep_returns else float("nan")
                print(
                    f"  seed {seed} steps {steps:7d} rounds {learner.rounds:4d} wall {wall:6.1f}s "
                    f"(train {wall - eval_time:5.1f}s) eval {score:7.1f} train_ret {recent:7.1f} "
                    f"pl {metrics['policy_loss']:+.4f} vl {metrics['value_loss']:.3f} ent {metrics['entropy']:.3f} "
                    f"kl {metrics['approx_kl']:.4f} cf {metrics['clipfrac']:.3f} ev {metrics['explained_variance']:+.2f} "
                    f"lr {metrics['lr']:.2e}",
                    flush=True,
                )
            if score >= target:
                result.update(
                    solved=True, steps=steps, rounds=learner.rounds, seconds=wall, train_seconds=wall - eval_time
                )
                break
    else:
        wall = time.perf_counter() - t0
        result.update(steps=steps, rounds=learner.rounds, seconds=wall, train_seconds=wall - eval_time, best=best)
    for envs in envsets:
        envs.close()
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", help="a run config: [env] id/num_envs, [algorithm] params, [train] workers/target_return"
    )
    ap.add_argument("--env", default=None, help="gymnasium id (default: the config's, else CartPole-v1)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--envs", type=int, default=None, help="envs per worker")
    ap.add_argument("--eval-every", type=int, default=2048, help="env steps between greedy evaluations")
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=200_000)
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a PPOParams field (TOML value)"
    )
    ap.add_argument(
        "--forward", choices=["numpy", "torch"], default="numpy", help="the actors' forward (default numpy)"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg: dict = {}
    if args.config:
        with open(args.config, "rb") as f:
            cfg = tomllib.load(f)
    algo = {k: v for k, v in cfg.get("algorithm", {}).items() if k != "name"}
    for item in args.set:
        key, _, raw = item.partition("=")
        algo[key.strip()] = tomllib.loads(f"v = {raw}")["v"]
    params = build(PPOParams, algo, "algorithm")
    env_id = args.env or cfg.get("env", {}).get("id", "CartPole-v1")
    workers = args.workers or cfg.get("train", {}).get("workers", 2)
    num_envs = args.envs or cfg.get("env", {}).get("num_envs", 4)
    target = args.target if args.target is not None else cfg.get("train", {}).get("target_return", 475.0)
    print(f"env {env_id}, {workers} workers x {num_envs} envs, target {target}, {args.forward} forward", flush=True)
    print("params:", attrs.asdict(params), flush=True)
    results = []
    for seed in args.seeds:
        r = run(
            params,
            env_id,
            seed,
            workers,
            num_envs,
            args.eval_every,
            args.eval_episodes,
            args.max_steps,
            target,
            args.quiet,
            args.forward,
        )
        results.append(r)
        print(
            f"seed {seed}: {'SOLVED' if r['solved'] else 'NOT SOLVED'} env_steps {r['steps']} rounds {r['rounds']} "
            f"wall {r['seconds']:.1f}s (without evals {r['train_seconds']:.1f}s)"
            + ("" if r["solved"] else f" best eval {r['best']:.1f}"),
            flush=True,
        )
    ok = all(r["solved"] for r in results)
    print("ALL SOLVED" if ok else "SOME SEEDS FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
