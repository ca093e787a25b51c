"""Single-process DQN check on CartPole-v1 through exactly the Actor/Learner API.

Not a pytest test (no ``test_`` prefix): a script for picking and checking
the defaults of :class:`mqttrl_plugins.dqn.common.DQNParams`. It mimics the
distributed loop in one process:

* one actor with ``--envs`` envs steps them (``--workers N``: N actors
  stepped in turn, their envs on one epsilon ladder); every 128 ready
  transitions of an actor are encoded with ``encode_batch``, decoded with ``decode_batch``, validated
  against the sample spec and given to ``learner.add``;
* the actor pauses while ``learner.behind()``; the learner runs one
  ``train_step`` per loop turn while ``learner.train_due()``;
* every 50 updates the learner's weights go to the actors through
  ``encode_weights`` / ``decode_weights``;
* every ``--eval-every`` env steps a separate greedy actor (20 envs, the last
  published weights) plays 20 episodes; the run stops at a mean >= 475.

Usage::

    python tests/dqn_offline_check.py --seeds 0 1 2 [--set lr=0.001 --set hidden=[64,64]]
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
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.dqn import make_forward
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import DQNParams, sample_spec
from mqttrl_plugins.dqn.learner import DQNLearner

ENV_ID = "CartPole-v1"
SAMPLE_BATCH = 128
PUBLISH_EVERY = 50


def evaluate(weights, info, obs_space, act_space, params, episodes: int, seed: int) -> float:
    """Mean greedy return over ``episodes`` episodes (fresh start states per ``seed``), played side by side."""
    envs = [gym.make(ENV_ID) for _ in range(episodes)]
    forward = make_forward(params, obs_space, act_space, "numpy")
    actor = DQNActor(params, obs_space, act_space, ActorContext(num_envs=episodes), forward)
    actor.load_weights(weights, info)
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    returns = np.zeros(episodes)
    alive = np.ones(episodes, dtype=bool)
    while alive.any():
        ids = np.flatnonzero(alive)
        actions, _ = actor.act(obs[ids], greedy=True)
        for i, a in zip(ids, actions):
            o, r, term, trunc, _ = envs[i].step(int(a))
            returns[i] += r
            obs[i] = o
            if term or trunc:
                alive[i] = False
    return float(returns.mean())


class Worker:
    """One simulated worker: an actor and its envs, stepped together."""

    def __init__(self, params, k: int, num_envs: int, num_workers: int, seed: int):
        self.name = f"w{k}"
        self.envs = [gym.make(ENV_ID) for _ in range(num_envs)]
        obs_space, act_space = self.envs[0].observation_space, self.envs[0].action_space
        ctx = ActorContext(
            num_envs=num_envs, first_env_index=k * num_envs, total_envs=num_workers * num_envs, seed=seed * 100 + k + 1
        )
        self.actor = DQNActor(
            params, obs_space, act_space, ctx, make_forward(params, obs_space, act_space, "numpy", ctx.seed)
        )
        self.obs = np.stack([env.reset(seed=seed * 1000 + k * num_envs + i)[0] for i, env in enumerate(self.envs)])
        self.ep_ret = np.zeros(num_envs)
        self.seq = 0

    def step(self, returns: list) -> int:
        """One vector step; finished episodes' returns go to ``returns``."""
        n = len(self.envs)
        actions, extras = self.actor.act(self.obs)
        next_obs = np.empty_like(self.obs)
        final_obs = np.empty_like(self.obs)
        rewards = np.zeros(n, np.float32)
        term = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            o, rewards[i], term[i], trunc[i], _ = env.step(int(actions[i]))
            final_obs[i] = o
            self.ep_ret[i] += rewards[i]
            if term[i] or trunc[i]:
                returns.append(self.ep_ret[i])
                self.ep_ret[i] = 0.0
                o, _ = env.reset()
            next_obs[i] = o
        self.actor.record(self.obs, actions, extras, rewards, final_obs, term, trunc)
        self.obs = next_obs
        return n


def run(
    params: DQNParams,
    seed: int,
    num_envs: int,
    num_workers: int,
    eval_every: int,
    max_steps: int,
    target: float,
    quiet: bool,
) -> dict:
    torch.manual_seed(seed)
    workers = [Worker(params, k, num_envs, num_workers, seed) for k in range(num_workers)]
    obs_space, act_space = workers[0].envs[0].observation_space, workers[0].envs[0].action_space
    spec = sample_spec(params, obs_space, act_space)
    learner = DQNLearner(params, obs_space, act_space, "cpu", seed)

    def publish():
        tensors, info = learner.export_weights()
        msg = decode_weights(encode_weights(learner.updates // PUBLISH_EVERY, "dqn", "check", tensors, info))
        for w in workers:
            w.actor.load_weights(msg.tensors, msg.info)
        return msg.tensors, msg.info

    weights, info = publish()
    steps, next_eval, paused, turn, n_evals = 0, eval_every, 0, 0, 0
    ep_returns: list = []
    t0 = time.perf_counter()
    eval_time = 0.0
    result = {"seed": seed, "solved": False}
    metrics: dict = {}
    while steps < max_steps:
        if not learner.behind():
            w = workers[turn % num_workers]  # workers take turns, one vector step each
            turn += 1
            steps += w.step(ep_returns)
            if w.actor.pending() >= SAMPLE_BATCH:
                payload = encode_batch("check", w.name, w.seq, learner.updates // PUBLISH_EVERY, w.actor.take())
                w.seq += 1
                batch = decode_batch(payload)
                spec.validate(batch.arrays, batch.count)
                learner.add(batch)
        else:
            paused += 1
        if learner.train_due():
            metrics = learner.train_step()
            if learner.updates % PUBLISH_EVERY == 0:
                weights, info = publish()
        if steps >= next_eval:
            next_eval += eval_every
            te = time.perf_counter()
            n_evals += 1
            score = evaluate(weights, info, obs_space, act_space, params, 20, 10**6 * (seed + 1) + 100 * n_evals)
            eval_time += time.perf_counter() - te
            wall = time.perf_counter() - t0
            if not quiet:
                recent = np.mean(ep_returns[-20:]) if ep_returns else float("nan")
                print(
                    f"  seed {seed} steps {steps:6d} updates {learner.updates:6d} wall {wall:6.1f}s "
                    f"(train {wall - eval_time:5.1f}s) eval {score:6.1f} train_ret {recent:6.1f} "
                    f"eps {workers[0].actor.epsilons()[0]:.3f} loss {metrics.get('loss', float('nan')):.4f} "
                    f"q {metrics.get('q_mean', float('nan')):.1f} paused {paused}",
                    flush=True,
                )
            if score >= target:
                result.update(
                    solved=True, steps=steps, updates=learner.updates, seconds=wall, train_seconds=wall - eval_time
                )
                break
    else:
        result.update(steps=steps, updates=learner.updates, seconds=time.perf_counter() - t0)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--envs", type=int, default=4, help="envs per worker")
    ap.add_argument("--workers", type=int, default=1, help="simulated workers (actors), stepped in turn")
    ap.add_argument("--eval-every", type=int, default=5000)
    ap.add_argument("--max-steps", type=int, default=200_000)
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a DQNParams field (TOML value)"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    overrides = {}
    for item in args.set:
        key, _, raw = item.partition("=")
        overrides[key.strip()] = tomllib.loads(f"v = {raw}")["v"]
    params = build(DQNParams, overrides, "algorithm")
    print("params:", attrs.asdict(params), flush=True)
    results = []
    for seed in args.seeds:
        r = run(params, seed, args.envs, args.workers, args.eval_every, args.max_steps, args.target, args.quiet)
        results.append(r)
        print(
            f"seed {seed}: {'SOLVED' if r['solved'] else 'NOT SOLVED'} env_steps {r['steps']} updates {r['updates']} "
            f"wall {r['seconds']:.1f}s" + (f" (without evals {r['train_seconds']:.1f}s)" if r["solved"] else ""),
            flush=True,
        )
    ok = all(r["solved"] for r in results)
    print("ALL SOLVED" if ok else "SOME SEEDS FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
