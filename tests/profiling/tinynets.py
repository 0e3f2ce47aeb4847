"""Small real CNNs for the CPU tests (conv/BN/ReLU stacks), resolvable as `py:tests.profiling.tinynets:<name>`."""

from __future__ import annotations

import torch
from torch import nn


def tiny_cnn() -> nn.Module:
    """Two conv blocks and a classifier: about 3k parameters, milliseconds per step on a CPU."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


tiny_cnn.img_size = 32  # type: ignore[attr-defined]


class TwoHeads(nn.Module):
    """Returns (logits, aux) in training like torchvision's inception_v3, logits alone in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head, self.aux = nn.Linear(4, 5), nn.Linear(4, 5)

    def forward(self, x: torch.Tensor):
        h = self.body(x)
        return (self.head(h), self.aux(h)) if self.training else self.head(h)


def two_heads() -> nn.Module:
    return TwoHeads()


two_heads.img_size = 16  # type: ignore[attr-defined]


def broken() -> nn.Module:
    """A model whose forward fails: channel mismatch (3-channel input, 5-channel conv)."""
    return nn.Sequential(nn.Conv2d(5, 4, 3))


broken.img_size = 8  # type: ignore[attr-defined]
