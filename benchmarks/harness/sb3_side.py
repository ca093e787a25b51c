"""The baseline side of a comparison: a Stable-Baselines3 or sb3-contrib algorithm in this process,
one torch thread, on the env made as mqttrl makes it. Its clock is training time: it stops while the
model is evaluated (greedily, :func:`benchmarks.harness.greedy.greedy_mean`, every so many env steps
or training seconds), which favours the baseline, since mqttrl evaluates on the same cores as it trains."""

from __future__ import annotations

import copy
import importlib
import time

import numpy as np

from .figures import run_figures, training_figures
from .greedy import greedy_mean
from .scenario import Baseline, Scenario

#: SB3 needs a total for its schedules; a run stops at its budget long before
TOTAL_STEPS = 100_000_000


def run(side: Baseline, scenario: Scenario, seed: int) -> dict:
    """One seed of ``side`` within the scenario's budget: its curve of (env_steps, training seconds,
    greedy mean) and figures."""
    import torch

    torch.set_num_threads(1)
    model = _model(side, seed)
    clock = _Clock(side, scenario, seed)
    model.learn(total_timesteps=TOTAL_STEPS, callback=clock.callback())
    if not clock.curve or clock.curve[-1][0] != model.num_timesteps:
        clock.evaluate(model)  # the last model
    figures = run_figures(clock.curve, scenario.target)
    figures.update(
        # its clock is training time: the counterpart of mqttrl's learner-side time to the target
        training_seconds_to_target=figures["seconds_to_target"],
        env_steps=int(model.num_timesteps),
        wall_s=round(clock.training_s() + clock.eval_s, 1),
    )
    figures.update(training_figures(clock.episodes, figures["env_steps"], figures["wall_s"]))
    return {"seed": seed, "curve": clock.curve, "figures": figures, "eval_excluded_s": round(clock.eval_s, 1)}


class _Clock:
    """Training time with evaluations excluded; evaluates on the scenario's cadence and stops the run
    at its budget (seconds, env steps) or, when the scenario says so, at the target."""

    def __init__(self, side: Baseline, scenario: Scenario, seed: int):
        self.side, self.scenario, self.seed = side, scenario, seed
        self.curve: list[list] = []
        #: (env steps, return) of every training episode, as Monitor reports them
        self.episodes: list[tuple[int, float]] = []
        self.eval_s = 0.0
        self.next = scenario.eval_every_steps or scenario.eval_every_s
        self.t0 = time.monotonic()

    def training_s(self) -> float:
        return time.monotonic() - self.t0 - self.eval_s

    def evaluate(self, model) -> float:
        t, steps = time.monotonic(), int(model.num_timesteps)
        training = self.training_s()
        act = lambda o: model.predict(_cast(np.asarray(o)), deterministic=True)[0]  # noqa: E731
        first = 2 * 10**6 + self.scenario.episodes * len(self.curve)  # start states of its own each time
        mean = greedy_mean(act, self.side.env, self.scenario.episodes, first)
        self.curve.append([steps, round(training, 2), mean])
        self.eval_s += time.monotonic() - t
        print(
            f"  {self.side.name} seed {self.seed}: {training:7.1f} s {steps:9d} env steps greedy {mean:.2f}", flush=True
        )
        return mean

    def callback(self):
        from stable_baselines3.common.callbacks import BaseCallback

        clock, sc = self, self.scenario

        class Budget(BaseCallback):
            def _on_step(self) -> bool:
                done = (info["episode"]["r"] for info in self.locals.get("infos", ()) if "episode" in info)
                clock.episodes.extend((self.num_timesteps, float(r)) for r in done)
                now = self.num_timesteps if sc.eval_every_steps else clock.training_s()
                if now >= clock.next:
                    clock.next += sc.eval_every_steps or sc.eval_every_s
                    if clock.evaluate(self.model) >= sc.target and sc.stop_at_target:
                        return False
                steps_left = not sc.env_steps or self.num_timesteps < sc.env_steps
                return (not sc.seconds or clock.training_s() < sc.seconds) and steps_left

        return Budget()


def _model(side: Baseline, seed: int):
    """The baseline's model on ``side.n_envs`` envs, its hyperparameters as the scenario gives them."""
    from stable_baselines3.common.env_util import make_vec_env

    module = importlib.import_module("stable_baselines3" if side.library == "sb3" else "sb3_contrib")
    hp = copy.deepcopy(side.hyperparameters)
    for key in side.linear:
        hp[key] = (lambda v: lambda progress: progress * v)(hp[key])
    if side.exploration_steps:
        hp["exploration_fraction"] = side.exploration_steps / TOTAL_STEPS
    if side.torso:
        kw = hp.setdefault("policy_kwargs", {})
        kw.update(features_extractor_class=TORSOS[side.torso](), net_arch=[], normalize_images=False)
    env = make_vec_env(lambda: _Float32(side.env), n_envs=side.n_envs, seed=seed)
    return getattr(module, side.algo)(side.policy, env, seed=seed, device="cpu", verbose=0, **hp)


def _cast(obs: np.ndarray) -> np.ndarray:
    """Bool observations (MinAtar's) as float32: SB3 takes no bool arrays."""
    return obs.astype(np.float32) if obs.dtype == bool else obs


def _Float32(env_id: str):
    """The env as mqttrl makes it, bool observations cast to float32."""
    import gymnasium as gym

    from mqttrl.envs.make import make_env

    env = make_env(env_id)
    space = env.observation_space
    if space.dtype != bool:
        return env
    box = gym.spaces.Box(0.0, 1.0, space.shape, np.float32)
    return gym.wrappers.TransformObservation(env, _cast, box)


def _minatar_torso():
    """The MinAtar paper's torso (Young & Tian 2019) as an SB3 features extractor: conv 3x3 of 16
    channels, ReLU, flatten, linear 128, ReLU (SB3's NatureCNN does not fit 10x10 inputs)."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 128, channels: int = 16):
            super().__init__(observation_space, features_dim)
            h, w, c = observation_space.shape  # channels last
            self.conv = torch.nn.Sequential(torch.nn.Conv2d(c, channels, 3), torch.nn.ReLU())
            flat = channels * (h - 2) * (w - 2)
            self.linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(flat, features_dim), torch.nn.ReLU())

        def forward(self, obs):
            return self.linear(self.conv(obs.permute(0, 3, 1, 2)))

    return MinAtarCNN


#: features extractors a scenario names (``Baseline.torso``)
TORSOS = {"minatar": _minatar_torso}
