"""torch state <-> numpy arrays + JSON, for weights and checkpoints (no pickle, no torch.load).

Shared by the torch halves of the built-in algorithms; imports torch, so only modules
that need torch import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

Tensors = dict[str, np.ndarray]


def load_module(
    net: nn.Module, tensors: Mapping[str, np.ndarray], prefix: str = "", ignore: Iterable[str] = ()
) -> None:
    """Copy numpy arrays into ``net``; names and shapes must match exactly (keys under ``ignore`` prefixes aside)."""
    own = net.state_dict()
    skip = tuple(prefix + i for i in ignore)
    names = {k[len(prefix) :] for k in tensors if k.startswith(prefix) and not (skip and k.startswith(skip))}
    if names != set(own):
        raise ValueError(
            f"weights do not fit the network: missing {sorted(set(own) - names)}, unexpected {sorted(names - set(own))}"
        )
    new = {}
    for name, ref in own.items():
        arr = np.asarray(tensors[prefix + name])
        if tuple(arr.shape) != tuple(ref.shape):
            raise ValueError(f"weight {prefix + name} has shape {arr.shape}, the network needs {tuple(ref.shape)}")
        new[name] = torch.as_tensor(np.array(arr, dtype=np.float32))  # a copy: the source may be read-only
    net.load_state_dict(new, strict=True)


def export_module(net: nn.Module, prefix: str = "") -> Tensors:
    return {prefix + k: v.detach().cpu().numpy().astype(np.float32, copy=True) for k, v in net.state_dict().items()}


def optimizer_state(optimizer: torch.optim.Optimizer, tensors: Tensors) -> dict[str, Any]:
    """Optimizer tensors (moments, step counts) go into ``tensors`` by flat name; the rest is returned as JSON."""
    opt = optimizer.state_dict()
    meta: dict[str, Any] = {"state": {}, "param_groups": []}
    for pid, st in opt["state"].items():
        entry = {}
        for key, val in st.items():
            if torch.is_tensor(val):
                tensors[f"optim.state.{pid}.{key}"] = val.detach().cpu().numpy().copy()
                entry[key] = {"tensor": f"optim.state.{pid}.{key}"}
            else:
                entry[key] = {"value": val}
        meta["state"][str(pid)] = entry
    for group in opt["param_groups"]:
        meta["param_groups"].append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()})
    return meta


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], device
) -> None:
    state = {}
    for pid, entry in meta["state"].items():
        st = {}
        for key, val in entry.items():
            if "tensor" in val:
                st[key] = torch.from_numpy(np.array(tensors[val["tensor"]])).to(device)
            else:
                st[key] = val["value"]
        state[int(pid)] = st
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    # step counts must stay on the CPU for Adam; moments follow the parameters
    for st in optimizer.state.values():
        if "step" in st and torch.is_tensor(st["step"]):
            st["step"] = st["step"].cpu()


def adam_moments(opt: torch.optim.Optimizer, prefix: str) -> tuple[Tensors, list[float]]:
    """Adam's moments by parameter index (``{prefix}{i}.exp_avg`` / ``.exp_avg_sq``) and its step
    counts (-1: a parameter never stepped): a checkpoint form without the optimizer's JSON layout
    (SAC's: one per network). :func:`load_adam_moments` is its inverse."""
    tensors, steps = {}, []
    params = [p for group in opt.param_groups for p in group["params"]]
    for i, p in enumerate(params):
        state = opt.state.get(p, {})
        if "step" in state:
            tensors[f"{prefix}{i}.exp_avg"] = state["exp_avg"].detach().cpu().numpy().copy()
            tensors[f"{prefix}{i}.exp_avg_sq"] = state["exp_avg_sq"].detach().cpu().numpy().copy()
        steps.append(float(state["step"]) if "step" in state else -1.0)
    return tensors, steps


def load_adam_moments(
    opt: torch.optim.Optimizer, tensors: Mapping[str, np.ndarray], prefix: str, steps: list[float]
) -> None:
    """Put :func:`adam_moments`'s arrays back into ``opt`` (a ValueError when the parameter count differs)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    if len(steps) != len(params):
        raise ValueError(f"checkpoint optimizer {prefix!r} has {len(steps)} parameters, this one {len(params)}")
    fused = bool(opt.defaults.get("fused"))  # fused Adam keeps its step on the parameter's device
    for i, (p, step) in enumerate(zip(params, steps)):
        if step < 0:
            continue
        opt.state[p] = {
            "step": torch.tensor(float(step), device=p.device if fused else "cpu"),
            "exp_avg": torch.as_tensor(np.array(tensors[f"{prefix}{i}.exp_avg"]), device=p.device),
            "exp_avg_sq": torch.as_tensor(np.array(tensors[f"{prefix}{i}.exp_avg_sq"]), device=p.device),
        }
