"""One gradient step of DQN from a sampled batch, whatever its loss.

Acme's SGD learner (``acme/agents/jax/dqn/learning_lib.py``) is parameterised by its loss; so is
:class:`Update`: it holds the online and target nets and Adam, runs the loss of :mod:`.losses`
(under ``autocast``, through ``torch.compile`` when asked), then backward, clipping, the step at
the scheduled learning rate, and the target net's sync. It knows no replay and no pacing: the
learner (:mod:`.learner`) hands it batches and reads its :class:`~.losses.LossOutput`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from torch import nn

from .common import DQNParams
from .losses import LossOutput, TDLoss
from .pipeline import draw_noise

if TYPE_CHECKING:
    from .learner import QNetwork

#: torch's fused Adam runs on a CPU from torch 2.4 on
CPU_FUSED_ADAM = torch.torch_version.TorchVersion(torch.__version__) >= "2.4"


def make_adam(net: nn.Module, params: DQNParams, device: torch.device) -> torch.optim.Adam:
    """Adam over ``net``, fused where torch has it for ``device`` (CUDA, and the CPU since torch 2.4):
    one kernel per tensor instead of about ten (on a CPU 3-5x faster a step: the optimizer was a
    third of a small MLP's update)."""
    fused = device.type == "cuda" or (device.type == "cpu" and CPU_FUSED_ADAM)
    return torch.optim.Adam(net.parameters(), lr=params.lr, eps=params.adam_eps, fused=fused)


def scheduled_lr(params: DQNParams, samples_added: int) -> float | None:
    """``lr`` annealed linearly to ``lr * lr_final_frac`` over ``lr_anneal_env_steps``; None when
    that is not set (the optimizer keeps the rate it has, a checkpoint's too)."""
    if not params.lr_anneal_env_steps:
        return None
    done = min(1.0, samples_added / params.lr_anneal_env_steps)
    return params.lr * (1.0 - done * (1.0 - params.lr_final_frac))


def _grad(p: nn.Parameter) -> torch.Tensor:
    """``p``'s gradient after the backward (every parameter of the online net has one)."""
    assert p.grad is not None
    return p.grad


class Update:
    """The online and target nets, their optimizer and the loss, and one step over a batch."""

    def __init__(
        self, online: QNetwork, target: QNetwork, loss: TDLoss, params: DQNParams, device: torch.device, seed: int
    ):
        self.online, self.target, self.loss, self.params, self.device = online, target, loss, params, device
        self.target.load_state_dict(online.state_dict())
        self.target.requires_grad_(False)
        #: Adam, or what the learner's ``optimizer`` setter puts in its place (a checkpoint's)
        self.optimizer: torch.optim.Optimizer = make_adam(online, params, device)
        #: noisy nets' noise: this generator's (on the CPU, in checkpoints), so that neither another
        #: user of torch's global RNG nor the device changes the draws; on a GPU drawn there instead,
        #: from ``device_noise`` (no host-to-device copy per update)
        self.noise_rng = torch.Generator().manual_seed(seed)
        self.device_noise = torch.Generator(device=device).manual_seed(seed) if device.type == "cuda" else None
        #: the forwards and the loss, as ``compile`` asks (what a benchmark times alone)
        self.compute = self._compute if params.compile == "off" else torch.compile(self._compute, mode=params.compile)

    def _compute(self, obs, action, reward, next_obs, discount, weights) -> LossOutput:
        """The batch's loss, under ``autocast`` (bf16) when asked."""
        with self._autocast():
            return self.loss(self.online, self.target, obs, action, reward, next_obs, discount, weights)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.params.autocast == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def begin(self) -> None:
        """Before each update: new noise for both nets (Rainbow's noisy layers, when there are any), and
        under CUDA graphs (``compile = "reduce-overhead"``) the mark that a new step begins."""
        if self.online.spec.noisy:
            for net in (self.online, self.target):
                if self.device_noise is not None:
                    draw_noise(net, self.device_noise)
                else:
                    net.reset_noise(generator=self.noise_rng)
        if self.params.compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    def optimize(self, loss: torch.Tensor, lr: float | None = None) -> torch.Tensor:
        """Backward, clip (``grad_clip`` > 0) and step, at ``lr`` when given (:func:`scheduled_lr`);
        the gradient norm before clipping (a device scalar)."""
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.params.grad_clip > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.online.parameters(), self.params.grad_clip)
        else:
            grad_norm = torch.linalg.vector_norm(torch.stack([_grad(g).norm() for g in self.online.parameters()]))
        self.optimizer.step()
        return grad_norm.float()

    def stepped(self, updates: int) -> None:
        """After update number ``updates``: the target net's sync, every ``target_update_every``."""
        if updates % self.params.target_update_every == 0:
            self.sync_target()

    def sync_target(self) -> None:
        """The target net follows the online one: copied (``tau`` 1) or moved by ``tau`` (Polyak)."""
        tau = self.params.tau
        with torch.no_grad():
            if tau >= 1.0:
                self.target.load_state_dict(self.online.state_dict())
            else:
                for t, o in zip(self.target.parameters(), self.online.parameters()):
                    t.lerp_(o, tau)

    def own_adam_kind(self) -> None:
        """After loading a checkpoint (maybe saved on another device): the optimizer's own fused choice
        (as it was built), and Adam's step counts where that kind needs them (fused: on the
        parameters' device, float32; else the CPU)."""
        fused = bool(self.optimizer.defaults.get("fused"))
        for group in self.optimizer.param_groups:
            group["fused"] = fused
            if fused:
                group["foreach"] = None
            for param in group["params"]:
                st = self.optimizer.state.get(param)
                if st and torch.is_tensor(st.get("step")):
                    st["step"] = st["step"].to(param.device, torch.float32) if fused else st["step"].cpu()
