"""gelu(x * 2 + 1) * 3 over 1M float32 elements."""

import torch
from torch import nn


class Elementwise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x * 2 + 1) * 3


def model() -> nn.Module:
    torch.manual_seed(0)
    return Elementwise().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1 << 20, generator=generator),)
