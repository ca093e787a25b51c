"""A trained policy outside the framework: :func:`load_policy` and :class:`Policy`.

``load_policy(path)`` reads what a run left behind and gives a :class:`Policy` that acts on
observations in numpy: no broker, no learner, no torch (a game PC's plain install is enough)::

    import mqttrl

    policy = mqttrl.load_policy("runs/cartpole-dqn")
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    action = policy.predict(obs)  # one observation -> one action; a batch -> a batch
    action, _state = policy.predict(obs, deterministic=True)  # Stable-Baselines3's call shape

``path`` is one of

* a run directory (``mqttrl train``'s or ``mqttrl-learner --run-dir``'s), its ``checkpoints/``
  folder or its ``checkpoints/latest`` marker: with ``which="auto"``, its best model when a greedy
  evaluation judged it (``best/score.json``), else its newest checkpoint, since training returns
  are noisy and include exploration; ``which="best"`` or ``"latest"`` choose (:mod:`mqttrl.policy.source`);
* a checkpoint directory (``meta.json`` + ``state.safetensors``; ``checkpoints/best/`` gives the
  exact weights of the judged version, its ``weights.safetensors``): the run config is in its
  ``meta.json``; the policy's tensors are taken out of the learner state in numpy (the
  algorithm's ``weights_from_checkpoint``), so no learner is built;
* a weights file (``weights.safetensors``, the learner's weights message: tensors plus the
  algorithm, run, model version and the network's description in its metadata). The run config
  is looked for beside it and up to two folders above (a checkpoint's ``meta.json``, else the
  run's ``config.json``): copy the run's ``config.json`` next to a weights file you move. A bare
  weights file without one loads when ``observation_space`` and ``action_space`` are given:
  the network follows the file's metadata, the other parameters are the algorithm's defaults.

The spaces come from the run's env, made once (``make_env(config.env.id, config.env.kwargs)``)
and closed, unless both are given. Acting goes through the algorithm's own actor over its numpy
forward (:mod:`mqttrl.plugin.algorithm`), so every registered algorithm works the same way: greedy
actions with ``deterministic=True``; with ``deterministic=False`` the actor's own exploration at
the end of its schedules (DQN: epsilon-greedy with the first rung of its ladder, ``epsilon_base``,
or the ``epsilon`` given to :func:`load_policy`; a noisy head samples its noise instead; PPO:
actions sampled from the policy).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin.algorithm import FLEET_PROGRESS_KEY, ActorContext, NoisyForward, Tensors
from mqttrl.policy.source import (
    EXPECTED,
    WEIGHTS_FILE,
    Choice,
    ModelSource,
    PolicyLoadError,
    is_checkpoint,
    locate,
)

__all__ = ["WEIGHTS_FILE", "ModelSource", "Policy", "PolicyLoadError", "load_policy"]

log = logging.getLogger(__name__)

#: env steps past any schedule: a loaded policy acts as at the end of its run (DQN's epsilon decay is over)
_END_OF_SCHEDULES = 2**53
#: stochastic rows act as the first envs of a run this large: all of them on the first rung of a ladder
_LADDER_ENVS = 2**40
#: predict()'s keywords when not given: any given makes it answer as Stable-Baselines3, (actions, None)
_UNSET: Any = object()
#: stochastic actors kept, one per batch size
_MAX_ACTORS = 8


# ---- reading the model (which one: mqttrl.policy.source) -----------------------------------
class _LazyTensors(Mapping):
    """The tensors of a checkpoint's ``state.safetensors`` under ``prefix`` (the prefix removed),
    each read from the file when asked for: a policy never reads a checkpoint's replay buffer."""

    def __init__(self, file: Path, prefix: str):
        from safetensors import safe_open

        self._file = safe_open(str(file), framework="numpy")
        self._prefix = prefix
        self._names = [k[len(prefix) :] for k in self._file.keys() if k.startswith(prefix)]  # noqa: SIM118

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._file.get_tensor(self._prefix + name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


@attrs.frozen
class _Model:
    """What was read: the policy's weights as ``export_weights`` gives them, and where they came from."""

    tensors: Mapping[str, np.ndarray]
    info: dict
    algorithm: str
    model_version: int
    #: the run config as saved (JSON data), None for a bare weights file
    config: dict | None
    config_path: Path | None
    path: Path
    #: a checkpoint's learner state (``state_dict`` output, lazily read), for ``weights_from_checkpoint``
    state: tuple[Mapping[str, np.ndarray], dict] | None = None


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise PolicyLoadError(f"cannot read {file}: {e}") from None


def _read_checkpoint(d: Path) -> _Model:
    from safetensors import SafetensorError

    meta = _read_json(d / "meta.json")
    if not (isinstance(meta, dict) and isinstance(meta.get("algo"), dict) and isinstance(meta.get("config"), dict)):
        raise PolicyLoadError(
            f"{d / 'meta.json'} is not an mqttrl checkpoint's (it has no algo and config); expected {EXPECTED}"
        )
    try:
        tensors = _LazyTensors(d / "state.safetensors", "algo/")
    except (OSError, SafetensorError) as e:
        raise PolicyLoadError(f"cannot read {d / 'state.safetensors'}: {e}") from None
    algorithm, node = meta["config"].get("algorithm"), meta.get("node", {})
    name = (algorithm.get("name") if isinstance(algorithm, dict) else None) or meta["algo"].get("algorithm")
    version = node.get("version", 0) if isinstance(node, dict) else None
    if not isinstance(name, str) or not isinstance(version, int):
        raise PolicyLoadError(
            f"{d / 'meta.json'} names no algorithm or model version (algorithm {name!r}, version {version!r}); "
            f"expected an mqttrl checkpoint's meta.json"
        )
    return _Model({}, {}, name, version, meta["config"], d / "meta.json", d, (tensors, meta["algo"]))


def _config_near(file: Path) -> tuple[dict, Path] | None:
    """The run config beside a weights file or up to two folders above: a checkpoint's meta.json, else config.json."""
    for d in (file.parent, file.parent.parent, file.parent.parent.parent):
        meta = d / "meta.json"
        if is_checkpoint(d):
            data = _read_json(meta)
            if isinstance(data, dict) and isinstance(data.get("config"), dict):
                return data["config"], meta
        if (d / "config.json").is_file():
            data = _read_json(d / "config.json")
            if isinstance(data, dict):
                return data, d / "config.json"
    return None


def _read_weights(file: Path) -> _Model:
    from mqttrl.wire import Rejected, decode_weights

    try:
        payload = file.read_bytes()
    except OSError as e:
        raise PolicyLoadError(f"cannot read {file}: {e}") from None
    try:
        w = decode_weights(payload)
    except Rejected as r:
        raise PolicyLoadError(f"{file} is not an mqttrl weights file ({r}); expected {EXPECTED}") from None
    found = _config_near(file)
    config, config_path = found if found else (None, None)
    if config is not None:
        algo = config.get("algorithm", {}).get("name") if isinstance(config.get("algorithm"), dict) else None
        if algo != w.algorithm or config.get("run") != w.run:
            raise PolicyLoadError(
                f"{file} holds weights of run {w.run!r} ({w.algorithm}), but the config found at {config_path} is "
                f"run {config.get('run')!r} ({algo}); put the run's own config.json next to the weights file"
            )
    return _Model(w.tensors, dict(w.info), w.algorithm, w.version, config, config_path, file)


def _weights_of_checkpoint(model: _Model, algo_info, params, obs_space, act_space) -> tuple[Tensors, dict]:
    """The policy's weights out of a checkpoint's learner state: the algorithm's numpy hook, or its learner."""
    from safetensors import SafetensorError

    tensors, meta = model.state
    try:
        if algo_info.weights_from_checkpoint is not None:
            return algo_info.weights_from_checkpoint(tensors, meta)
        try:  # no hook: the learner itself reads its state (needs torch, for the built-ins' learners)
            learner = algo_info.make_learner(params, obs_space, act_space, "cpu", 0)
        except ImportError as e:
            raise PolicyLoadError(
                f"algorithm {model.algorithm!r} has no weights_from_checkpoint: reading its checkpoint {model.path} "
                f"builds its learner, which needs {e.name or 'torch'} (pip install 'mqttrl[learner]'); "
                f"or load a {WEIGHTS_FILE} of the run instead"
            ) from None
        learner.load_state_dict({k: tensors[k] for k in tensors}, meta)
        return learner.export_weights()
    except PolicyLoadError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise PolicyLoadError(
            f"{model.path}: the checkpoint does not hold a {model.algorithm} policy ({e!r})"
        ) from None
    except (SafetensorError, OSError) as e:  # a state file damaged past its header
        raise PolicyLoadError(f"cannot read {model.path / 'state.safetensors'}: {e}") from None


# ---- the policy ----------------------------------------------------------------------------------
class Policy:
    """A trained policy: ``predict(obs)`` acts, in numpy, through the algorithm's own actor.

    Made by :func:`load_policy`, or directly from exported weights (``tensors`` and ``info`` as a
    learner's ``export_weights`` gives them) and the spaces they are for.
    """

    def __init__(
        self,
        algorithm: str,
        params: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        tensors: Mapping[str, np.ndarray],
        info: Mapping[str, Any],
        model_version: int = 0,
        config: Any = None,
        source: ModelSource | Path | None = None,
        seed: int = 0,
    ):
        from mqttrl.envs.rollout import obs_dtype
        from mqttrl.plugin.manager import get_registry

        #: the algorithm's name (``algorithm.name`` of the run)
        self.algorithm = algorithm
        #: the algorithm's parameters the actor uses (the run's, or its defaults for a bare weights file)
        self.params = params
        self.observation_space = observation_space
        self.action_space = action_space
        #: the run's :class:`~mqttrl.config.RunConfig`; None for a bare weights file
        self.config = config
        #: the model version the weights are (a checkpoint: the learner's version when it was saved)
        self.model_version = int(model_version)
        #: what was read (``.path``: a weights file or a checkpoint directory), its ``.model_version`` and the
        #: ``.reason`` it was chosen; ``str(policy.source)`` is the path
        self.source = (
            source
            if source is None or isinstance(source, ModelSource)
            else ModelSource(Path(source), self.model_version, "the path given")
        )
        #: the weights in the exported layout (what ``mqttrl export`` builds the torch network from)
        self.weights: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in tensors.items()}
        self.weights_info: dict[str, Any] = dict(info)
        self.seed = seed
        self._algo = get_registry().algorithm(algorithm)
        backend = "numpy" if "numpy" in self._algo.backends else self._algo.backends[0]
        self._forward = self._algo.make_forward(params, observation_space, action_space, backend, seed)
        self._obs_dtype = obs_dtype(observation_space)
        #: what the actors load: the run is over, so schedules counted in env steps are at their end
        self._load_info = {**self.weights_info, FLEET_PROGRESS_KEY: _END_OF_SCHEDULES}
        self._greedy = self._actor(1)  # loads the weights: a mismatch raises here
        self._stochastic: OrderedDict[int, Any] = OrderedDict()

    def _actor(self, n: int):
        seed = int(np.random.SeedSequence([self.seed, n]).generate_state(1)[0])
        ctx = ActorContext(num_envs=n, first_env_index=0, total_envs=_LADDER_ENVS, seed=seed)
        actor = self._algo.make_actor(self.params, self.observation_space, self.action_space, ctx, self._forward)
        try:
            actor.load_weights(self.weights, self._load_info)
        except (ValueError, KeyError, TypeError) as e:
            raise PolicyLoadError(
                f"the weights do not fit a {self.algorithm} network for observations {self.observation_space} "
                f"and actions {self.action_space}: {e}"
            ) from None
        return actor

    def _batch(self, obs: Any) -> tuple[np.ndarray, bool]:
        x = np.asarray(obs)
        shape = tuple(self.observation_space.shape)
        if x.shape == shape:
            return x.reshape(1, *shape).astype(self._obs_dtype, copy=False), True
        if x.ndim == len(shape) + 1 and x.shape[1:] == shape:
            return x.astype(self._obs_dtype, copy=False), False
        raise ValueError(
            f"observation of shape {x.shape}: this policy takes one observation of shape {shape} "
            f"or a batch of shape (N, {', '.join(map(str, shape))})"
        )

    def predict(
        self, obs: Any, *, deterministic: Any = _UNSET, state: Any = _UNSET, episode_start: Any = _UNSET
    ) -> Any:
        """Actions for one observation (gives one action) or a batch (gives a batch of actions).

        ``predict(obs)`` gives the greedy action(s). Called as Stable-Baselines3 calls it, with any of
        ``deterministic=``, ``state=`` or ``episode_start=``, it gives SB3's pair ``(actions, None)``:
        ``action, _state = policy.predict(obs, deterministic=True)``. The policy keeps no recurrent
        state: ``state`` must be None, ``episode_start`` is ignored.

        ``deterministic=True``: the greedy action (DQN: argmax Q with a noisy head's mean weights;
        PPO: the most likely action, the Gaussian mean clipped to the bounds). ``False``: as the
        actors explore at the end of their schedules (DQN: epsilon-greedy, see :func:`load_policy`;
        PPO: sampled), each row independently.
        """
        sb3_call = deterministic is not _UNSET or state is not _UNSET or episode_start is not _UNSET
        if state is not _UNSET and state is not None:
            raise ValueError(
                f"predict(state=...): this {self.algorithm} policy keeps no recurrent state; pass state=None or leave it out"
            )
        if deterministic is _UNSET:
            deterministic = True
        if not isinstance(deterministic, bool | np.bool_):
            raise ValueError(f"predict(deterministic={deterministic!r}): expected True (greedy) or False (exploring)")
        actions = self._act(obs, bool(deterministic))
        return (actions, None) if sb3_call else actions

    def _act(self, obs: Any, deterministic: bool) -> Any:
        x, single = self._batch(obs)
        if deterministic:
            actions, _ = self._greedy.act(x, greedy=True)
        else:
            actor = self._stochastic.pop(len(x), None) or self._actor(len(x))
            self._stochastic[len(x)] = actor  # most recently used last
            while len(self._stochastic) > _MAX_ACTORS:
                self._stochastic.popitem(last=False)
            actions, _ = actor.act(x, greedy=False)
        return actions[0] if single else actions

    def outputs(self, obs: Any) -> dict[str, np.ndarray]:
        """The network's raw outputs (DQN: ``q``; PPO: ``logits`` or ``mean``/``log_std``, and ``value``) for one
        observation or a batch: what the exported ONNX/TorchScript model computes (a noisy head: its mean weights)."""
        x, single = self._batch(obs)
        forward = self._forward.noiseless if isinstance(self._forward, NoisyForward) else self._forward
        out = forward(x)
        return {k: np.asarray(v)[0] for k, v in out.items()} if single else dict(out)

    def make_env(self, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
        """The run's env, made as the run makes it (``config.env.id``, ``config.env.kwargs``, plus ``kwargs``);
        with ``[env] launch`` the game is started, started again after each game over, and stopped
        when the env is closed."""
        if self.config is None:
            raise ValueError(f"{self.source}: no run config was found, so the run's env is not known")
        from mqttrl.envs.run_env import make_played_env

        extra = dict(kwargs)
        if render_mode is not None:
            extra["render_mode"] = render_mode
        return make_played_env(self.config.env, extra_kwargs=extra)  # [env] launch: the game started

    def play(
        self,
        env: gym.Env,
        episodes: int,
        seed: int | None = 0,
        deterministic: bool = True,
        max_steps: int | None = None,
    ) -> Iterator[tuple[float, int]]:
        """Play ``episodes`` episodes in ``env`` one after the other (what ``mqttrl enjoy`` does), yielding
        each one's ``(return, steps)`` as it ends. Episode ``i`` resets with ``seed + i`` (None: unseeded);
        ``max_steps`` ends an episode early (None: when the env says it is over). ``env`` is left open."""
        for i in range(episodes):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            total, steps, done = 0.0, 0, False
            while not done and (max_steps is None or steps < max_steps):
                action = np.asarray(self._act(obs, deterministic))
                obs, reward, terminated, truncated, _ = env.step(action.item() if action.ndim == 0 else action)
                total += float(reward)
                steps += 1
                done = terminated or truncated
            yield total, steps

    def export(self, path: str | Path, format: str = "onnx") -> Path:
        """Write the network as ONNX or TorchScript (needs torch): see :func:`mqttrl.export.export_policy`."""
        from mqttrl.export import export_policy

        return export_policy(self, path, format)

    def __repr__(self) -> str:
        return (
            f"Policy({self.algorithm}, model version {self.model_version}, observations {self.observation_space}, "
            f"actions {self.action_space}, from {self.source})"
        )


def _with_epsilon(params: Any, algo_info: Any, epsilon: float) -> Any:
    """``params`` acting at exploration rate ``epsilon``: the algorithm's own ``with_epsilon``
    (DQN's); an algorithm without one does not explore epsilon-greedily (one line)."""
    with_epsilon = algo_info.with_epsilon
    if with_epsilon is None:
        raise PolicyLoadError(
            f"epsilon= is for algorithms that explore epsilon-greedily (dqn); {algo_info.name} does not"
        )
    return with_epsilon(params, float(epsilon))


def load_policy(
    path: str | Path,
    *,
    which: str = "auto",
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    epsilon: float | None = None,
    seed: int = 0,
) -> Policy:
    """The trained policy ``path`` names (a run directory, its checkpoints folder or ``checkpoints/latest``,
    a checkpoint directory or a weights file); ``policy.source`` says which model and why (also logged).

    ``which``: for a run directory, ``"auto"`` (its best model when a greedy evaluation judged it, else
    its newest checkpoint), ``"best"`` or ``"latest"`` (see :mod:`mqttrl.policy.source`).
    ``observation_space`` and ``action_space``: the spaces to act in (both, or the run's env is
    made once to read them; a bare weights file without a run config needs them). ``epsilon``:
    DQN's exploration rate for ``predict(..., deterministic=False)`` (default: the run's
    ``epsilon_base``, the first rung of its ladder). ``seed``: the stochastic actors' random streams.

    Raises FileNotFoundError when ``path`` does not exist and :class:`PolicyLoadError` (a ValueError),
    with one line naming the path and what was expected, when it holds no mqttrl model or one that
    does not load. Needs no torch.
    """
    from mqttrl.plugin.manager import get_registry

    choice, model = _read_chosen(Path(path), which)
    registry = get_registry()
    algo_info = _algorithm_of(model, registry)
    have_spaces = observation_space is not None and action_space is not None
    config, params = _config_and_params(model, registry, algo_info, have_spaces)
    if not have_spaces:
        observation_space, action_space = _spaces_of_env(config, registry, observation_space, action_space)
    if epsilon is not None:
        params = _with_epsilon(params, algo_info, epsilon)
    tensors, info = model.tensors, model.info
    if model.state is not None:
        tensors, info = _weights_of_checkpoint(model, algo_info, params, observation_space, action_space)
    source = ModelSource(model.path, model.model_version, choice.reason)
    log.info("loading %s (model version %d, %s)", source.path, source.model_version, source.reason)
    return Policy(
        model.algorithm,
        params,
        observation_space,
        action_space,
        tensors,
        info,
        model_version=model.model_version,
        config=config,
        source=source,
        seed=seed,
    )


def _read_model(choice: Choice) -> _Model:
    return _read_weights(choice.path) if choice.kind == "weights" else _read_checkpoint(choice.path)


def _read_chosen(path: Path, which: str) -> tuple[Choice, _Model]:
    """The model ``locate`` chooses, read. A run's best model that does not read (a damaged file)
    falls back, with ``which="auto"``, to the run's newest checkpoint, and the reason says so; with
    ``which="best"`` the error names ``which="latest"``."""
    choice = locate(path, which)
    try:
        return choice, _read_model(choice)
    except PolicyLoadError as damaged:
        named = path.exists() and path.resolve() in (choice.path.resolve(), choice.path.parent.resolve())
        if which == "latest" or named or not choice.reason.startswith("the best model"):
            raise  # the user named this model itself: its own error is the answer
        why = str(damaged).split("; expected ")[0]  # the user named a run, not this file: no "expected" list
        try:
            newest = locate(path, "latest")
        except PolicyLoadError:
            raise PolicyLoadError(f"the run's best model does not read: {why}; the run has no checkpoint") from None
        if which == "best":
            raise PolicyLoadError(
                f"the run's best model does not read: {why}; which='latest' (--which latest) takes its newest checkpoint"
            ) from None
        model = _read_model(newest)
        return attrs.evolve(newest, reason=f"the newest checkpoint: the best model does not read ({why})"), model


def _algorithm_of(model: _Model, registry: Any) -> Any:
    """The installed AlgorithmInfo of the model's algorithm; ValueError naming the installed ones if none is."""
    from mqttrl.plugin.manager import UnknownPluginError

    try:
        return registry.algorithm(model.algorithm)
    except UnknownPluginError:
        known = ", ".join(sorted(registry.algorithms)) or "none"
        raise PolicyLoadError(
            f"{model.path}: the policy is of algorithm {model.algorithm!r}, which no installed plugin registers "
            f"(installed: {known})"
        ) from None


def _config_and_params(model: _Model, registry: Any, algo_info: Any, have_spaces: bool) -> tuple[Any, Any]:
    """(run config or None, algorithm params): the run's when its config was found, else the
    algorithm's defaults, which a bare weights file may only use with both spaces given."""
    from mqttrl.config import ConfigError, from_dict
    from mqttrl.plugin.manager import UnknownPluginError

    if model.config is not None:
        try:
            config = from_dict(model.config, lambda name: registry.algorithm(name).params)
        except (ConfigError, UnknownPluginError) as e:
            raise PolicyLoadError(f"{model.config_path}: the run config does not load ({e})") from None
        return config, config.algorithm.params
    if not have_spaces:
        raise PolicyLoadError(
            f"{model.path}: no run config beside it or up to two folders above (a checkpoint's meta.json or the run's "
            f"config.json); copy the run's config.json next to it, or pass observation_space= and action_space="
        )
    return None, algo_info.params()


def _spaces_of_env(
    config: Any, registry: Any, observation_space: gym.Space | None, action_space: gym.Space | None
) -> tuple[gym.Space, gym.Space]:
    """The spaces not given: the run's env spec (``env.spec``: no env is made, no game or display
    needed), else read from the run's env (made once and closed); one line if it cannot be made."""
    from mqttrl.envs.fit import spaces_of_run
    from mqttrl.envs.spec import SpecError

    try:
        obs_space, act_space = spaces_of_run(config, registry)
    except SpecError as e:
        raise PolicyLoadError(f"the run's config holds a damaged env spec ({e})") from None
    except Exception as e:
        raise PolicyLoadError(
            f"cannot make the run's env {config.env.id!r} to read its spaces ({type(e).__name__}: {e}); "
            f"install what it needs, or pass observation_space= and action_space="
        ) from None
    return observation_space or obs_space, action_space or act_space
