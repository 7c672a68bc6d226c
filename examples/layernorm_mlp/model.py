"""Residual add, LayerNorm, Linear, GELU: batch 4, sequence 128, hidden 256."""

import torch
from torch import nn


class LayerNormMLP(nn.Module):
    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.linear(self.norm(x + residual)))


def model() -> nn.Module:
    torch.manual_seed(0)
    return LayerNormMLP().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (
        torch.randn(4, 128, 256, generator=generator),
        torch.randn(4, 128, 256, generator=generator),
    )
