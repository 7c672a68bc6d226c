"""torch.softmax over the last dimension of a 64x512 matrix."""

import torch
from torch import nn


class Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def model() -> nn.Module:
    torch.manual_seed(0)
    return Softmax().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(64, 512, generator=generator),)
