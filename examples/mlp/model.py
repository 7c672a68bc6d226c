"""Linear -> ReLU -> Linear, batch 8, 64 -> 128 -> 32."""

import torch
from torch import nn


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(8, 64, generator=generator),)
