"""Naive attention softmax(Q K^T / sqrt(d)) V written out op by op: B2 H4 S64 D32."""

import math

import torch
from torch import nn


class NaiveAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def model() -> nn.Module:
    torch.manual_seed(0)
    return NaiveAttention().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(2, 4, 64, 32, generator=generator) for _ in range(3))
