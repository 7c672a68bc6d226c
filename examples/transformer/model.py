"""torch.nn.TransformerEncoderLayer(d_model=128, nhead=4), batch_first, batch 2, sequence 16."""

import torch
from torch import nn


def model() -> nn.Module:
    torch.manual_seed(0)
    # dim_feedforward is kept small (default 2048) so the inlined weights stay small.
    layer = nn.TransformerEncoderLayer(
        d_model=128, nhead=4, dim_feedforward=256, dropout=0.0, batch_first=True
    )
    return layer.eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(2, 16, 128, generator=generator),)
