"""A node's torch device (``learner.device``, ``inference.device``): checked once at start, with a one-line error.

``"auto"`` is CUDA when torch sees a GPU, else the CPU. ``"cuda"``, ``"cuda:N"`` and ``"mps"`` must be
there: asking for a GPU that torch cannot use is a config error at start, not a traceback from deep
inside torch at the first tensor moved.
"""

from __future__ import annotations

from typing import Any

from mqttrl.config import TORCH_DEVICE, ConfigError


def resolve_device(name: str, torch: Any = None, key: str = "learner.device") -> str:
    """The torch device string a node uses for ``key = name`` (``learner.device``, ``inference.device``).

    ``torch`` is the torch module (tests pass a stand-in); imported when not given. Raises
    :class:`~mqttrl.config.ConfigError` (one line: what was asked, why it cannot be, what to use).
    """
    if not isinstance(name, str) or not TORCH_DEVICE.fullmatch(name):
        raise ConfigError(f"{key}={name!r}: must be 'auto', 'cpu', 'cuda', 'cuda:N' (N = 0, 1 ...) or 'mps'")
    if torch is None:
        import torch
    if name == "cpu":
        return "cpu"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError(
                f"{key}='mps' but torch.backends.mps.is_available() is False "
                "(not an Apple-silicon Mac, or a torch built without MPS); use 'auto' or 'cpu'"
            )
        return "mps"
    # "cuda" or "cuda:N"
    if not torch.cuda.is_available():
        cpu_only = getattr(torch.version, "cuda", None) is None
        why = "CPU-only torch" if cpu_only else "no GPU or driver visible to this torch"
        raise ConfigError(f"{key}={name!r} but torch.cuda.is_available() is False ({why}); use 'auto' or 'cpu'")
    if ":" in name:
        index, count = int(name.partition(":")[2]), torch.cuda.device_count()
        if index >= count:
            seen = "1 CUDA device (cuda:0)" if count == 1 else f"{count} CUDA devices (cuda:0 to cuda:{count - 1})"
            raise ConfigError(f"{key}={name!r} but torch sees {seen}; use one of them, 'cuda' or 'auto'")
    return name


def describe_device(device: str, torch: Any = None) -> str:
    """``"cuda:0 (NVIDIA H100 80GB HBM3)"``, ``"cpu"``: for a node's start-up log line."""
    if not device.startswith("cuda"):
        return device
    if torch is None:
        import torch
    index = int(device.partition(":")[2] or torch.cuda.current_device())
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
