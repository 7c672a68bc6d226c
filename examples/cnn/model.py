"""Small CNN: conv, batchnorm, ReLU, max-pool, linear; input 2x3x16x16."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.norm(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


def model() -> nn.Module:
    torch.manual_seed(0)
    net = SmallCNN()
    # Non-trivial running statistics, so that batchnorm in eval mode is not the identity.
    with torch.no_grad():
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 1.5)
        net.norm.weight.uniform_(0.5, 1.5)
        net.norm.bias.uniform_(-0.5, 0.5)
    return net.eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(2, 3, 16, 16, generator=generator),)
