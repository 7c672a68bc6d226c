"""RMSNorm x * rsqrt(mean(x^2) + eps) * w, written out, over 256x1024."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden: int = 1024, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def model() -> nn.Module:
    torch.manual_seed(0)
    return RMSNorm().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(256, 1024, generator=generator),)
