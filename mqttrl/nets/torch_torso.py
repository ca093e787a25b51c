"""A torso as a torch ``nn.Module``: what learners train and torch forwards run.

The module takes observations in their native dtype and converts inside ``forward``
(``x.float() * obs_scale``, HWC permuted to CHW), so a uint8 batch crosses to a GPU as uint8,
a quarter of float32's bytes. Tensor names and layouts are those of
:func:`.spec.weight_shapes`, which the numpy forward loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .spec import conv_shapes, flat_size, validate


class Torso(nn.Sequential):
    """(layer, ReLU) pairs, convolutions first, then the dense layers; the flatten between them and
    the input conversion happen in ``forward`` (so layer ``i`` is ``self[2i]`` for every torso).

    ``linear``: what makes each dense layer from (in, out), ``nn.Linear`` unless given (an algorithm's
    noisy layer, for one: its tensors are then named as that module names them). A layer with a true
    ``noisy`` attribute gets ``forward``'s ``noise`` flag (False: its mean weights)."""

    def __init__(self, torso: Mapping[str, Any], linear: Callable[[int, int], nn.Module] | None = None):
        t = validate(torso)
        layers: list[nn.Module] = []
        for (cin, _, _), (out, k, s) in zip(conv_shapes(t), t["convs"]):
            layers += [nn.Conv2d(cin, out, k, s), nn.ReLU()]
        width = flat_size(t)
        for h in t["dense"]:
            layers += [(linear or nn.Linear)(width, h), nn.ReLU()]
            width = h
        super().__init__(*layers)
        self.torso = t
        self.n_convs = len(t["convs"])
        self.obs_scale = float(t["obs_scale"])
        self.out_size = width

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        x = x.float()
        if self.obs_scale != 1.0:
            x = x * self.obs_scale
        layout = self.torso["layout"]
        if layout == "flat":
            x = x.flatten(1)
        elif x.dim() == 3:  # a 2-D image: one channel
            x = x.unsqueeze(1)
        elif layout == "hwc":
            x = x.permute(0, 3, 1, 2)
        for i, layer in enumerate(self):
            if i == 2 * self.n_convs and self.n_convs:
                x = x.flatten(1)
            x = layer(x, noise) if getattr(layer, "noisy", False) else layer(x)
        if len(self) == 2 * self.n_convs and self.n_convs:  # convolutions only
            x = x.flatten(1)
        return x


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero biases for every conv and linear layer in ``module``
    (CleanRL's ``layer_init``); returns ``module``."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.constant_(m.bias, 0.0)
    return module
