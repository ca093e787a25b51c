"""A trained policy's network as a file other programs run: ONNX or TorchScript (``mqttrl export``).

The algorithm's plugin builds its torch network from the policy's weights (``AlgorithmInfo.export_module``)
and this module writes it with one input and the forward's outputs:

* input ``obs``: a batch of observations in their native dtype (uint8 images stay uint8: the network
  converts and scales inside; float observations are float32), the batch axis dynamic;
* outputs, named as the algorithm's forward names them: DQN ``q`` (expected Q-values, batch x actions);
  PPO ``logits`` and ``value`` (Discrete actions) or ``mean``, ``log_std`` and ``value`` (Box actions).

Greedy actions are ``argmax(q)`` / ``argmax(logits)`` / ``clip(mean, low, high)``. The ONNX file's
metadata (``metadata_props``) and the TorchScript file's extra file ``mqttrl.json`` say what the
model is: algorithm, run, model version, observation shape and dtype, outputs, action space.
Needs torch; ONNX also onnx and onnxscript, and the check against the numpy policy onnxruntime
(all in ``pip install 'mqttrl[export]'``). docs/export.md shows the
ONNX model run from Python, C# and C++.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("onnx", "torchscript")
#: the ONNX opset written when none is asked for
DEFAULT_OPSET = 18


class MissingDependency(ImportError):
    """A package the export needs is not installed; the message says which extra installs it."""


def _torch():
    try:
        import torch
    except ImportError as e:
        raise MissingDependency(f"exporting a policy needs torch ({e}): pip install 'mqttrl[export]'") from None
    return torch


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress prints, warnings and log lines (e.g. "torchvision is not installed");
    errors still raise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def describe(policy, outputs: tuple[str, ...]) -> dict[str, Any]:
    """What the exported file's metadata holds: enough to feed it and read its outputs."""
    from mqttrl.envs.rollout import obs_dtype

    act = policy.action_space
    action: dict[str, Any] = {"type": type(act).__name__}
    if hasattr(act, "n"):
        action["n"] = int(act.n)
    if hasattr(act, "low"):
        action.update(shape=list(act.shape), low=np.asarray(act.low).tolist(), high=np.asarray(act.high).tolist())
    run = policy.config.run if policy.config is not None else None
    return {
        "producer": "mqttrl",
        "algorithm": policy.algorithm,
        "run": run,
        "model_version": policy.model_version,
        "obs_shape": list(policy.observation_space.shape),
        "obs_dtype": obs_dtype(policy.observation_space).name,
        "outputs": list(outputs),
        "action_space": action,
    }


def torch_module(policy):
    """The algorithm's torch network loaded with the policy's weights (observations -> tuple of outputs)."""
    build = policy._algo.export_module
    if build is None:
        raise ValueError(f"algorithm {policy.algorithm!r} cannot be exported: its plugin gives no export_module")
    _torch()
    module = build(policy.params, policy.observation_space, policy.action_space, policy.weights, policy.weights_info)
    names = tuple(getattr(module, "output_names", ()))
    if not names:
        raise ValueError(f"algorithm {policy.algorithm!r}: its export_module gave a module without output_names")
    return module.eval()


def example_obs(policy, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations drawn from the policy's observation space, in the dtype the network takes."""
    from mqttrl.envs.rollout import obs_dtype

    space = copy.deepcopy(policy.observation_space)  # seeding it leaves the policy's own alone
    space.seed(seed)
    return np.stack([space.sample() for _ in range(n)]).astype(obs_dtype(space))


def export_policy(policy, path: str | Path, format: str = "onnx", opset: int | None = None) -> Path:
    """Write ``policy``'s network to ``path`` as ``format`` ("onnx" or "torchscript"); returns the path.

    Raises :class:`MissingDependency` (an ImportError) when torch or the ONNX exporter is missing, and
    ValueError for an unknown format or an algorithm that cannot be exported.
    """
    if format not in FORMATS:
        raise ValueError(f"format {format!r}: use one of {', '.join(FORMATS)}")
    torch = _torch()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    module = torch_module(policy)
    names = tuple(module.output_names)
    meta = describe(policy, names)
    example = torch.from_numpy(example_obs(policy, 2))  # batch 2: torch.export specialises a batch of 1
    if format == "torchscript":
        with torch.no_grad(), _quiet():  # torch 2.13 deprecates TorchScript and says so at every call
            traced = torch.jit.trace(module, (example,))
            torch.jit.save(traced, str(path), _extra_files={"mqttrl.json": json.dumps(meta)})
        return path
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise MissingDependency(f"ONNX export needs onnx and onnxscript ({e}): pip install 'mqttrl[export]'") from None
    big = sum(p.numel() * p.element_size() for p in module.parameters()) > 1.5 * 2**30  # ONNX's 2 GB protobuf limit
    with _quiet():  # the exporter prints its progress
        program = torch.onnx.export(
            module,
            (example,),
            input_names=["obs"],
            output_names=list(names),
            opset_version=opset or DEFAULT_OPSET,
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            dynamo=True,
            verbose=False,
        )
    program.model.metadata_props.update({f"mqttrl.{k}": json.dumps(v) for k, v in meta.items()})
    program.save(str(path), external_data=big)
    return path


def run_exported(path: str | Path, obs: np.ndarray, format: str = "onnx") -> dict[str, np.ndarray] | None:
    """The outputs of an exported file for ``obs`` (ONNX through onnxruntime, TorchScript through torch),
    by output name; None when onnxruntime is not installed."""
    path = Path(path)
    if format == "onnx":
        try:
            import onnxruntime as ort
        except ImportError:
            return None
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outs = session.run(None, {session.get_inputs()[0].name: obs})
        return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), outs)}
    torch = _torch()
    extra = {"mqttrl.json": ""}
    with _quiet():  # torch 2.13 deprecates TorchScript and says so at every load
        module = torch.jit.load(str(path), _extra_files=extra)
    names = json.loads(extra["mqttrl.json"])["outputs"]
    with torch.no_grad():
        outs = module(torch.from_numpy(np.ascontiguousarray(obs)))
    return {n: o.detach().numpy() for n, o in zip(names, outs)}


def check_export(policy, path: str | Path, format: str = "onnx", n: int = 5) -> float | None:
    """Largest absolute difference between the exported file and the numpy policy's outputs on ``n``
    observations from the observation space; None when the file cannot be run here (no onnxruntime)."""
    obs = example_obs(policy, n, seed=1)
    got = run_exported(path, obs, format)
    if got is None:
        return None
    want = policy.outputs(obs)
    if set(got) != set(want):
        raise ValueError(f"the exported model gives {sorted(got)}, the policy {sorted(want)}")
    return max(float(np.max(np.abs(got[k].astype(np.float64) - want[k]), initial=0.0)) for k in want)
