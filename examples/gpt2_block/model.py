"""A GPT-2 block: LayerNorm, QKV projection, causal attention through
F.scaled_dot_product_attention(is_causal=True), output projection, LayerNorm, GELU-tanh MLP,
with both residuals. B1 T64 d128, 4 heads."""

import torch
from torch import nn
from torch.nn import functional as F


class GPT2Block(nn.Module):
    def __init__(self, d_model: int = 128, n_head: int = 4) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d_model)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.mlp_proj = nn.Linear(4 * d_model, d_model)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.c_attn(x).split(d_model, dim=2)
        heads = (batch, seq, self.n_head, d_model // self.n_head)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, seq, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        hidden = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(hidden)


def model() -> nn.Module:
    torch.manual_seed(0)
    return GPT2Block().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1, 64, 128, generator=generator),)
