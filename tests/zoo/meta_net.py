"""A small CNN with hand-computed MACs and parameters, built on the meta device: the shared subject of the
per-layer table tests (tests/zoo/test_layers.py, test_op_rules.py, test_layer_pricing.py).

Import it after `pytest.importorskip("torch")`: it defines a torch module."""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn

from src.zoo.layers import layer_table
from src.zoo.names import ModelSpec
from src.zoo.resolve import Built


class Net(nn.Module):
    """conv3x3 3->8 (no bias) + BN + ReLU; grouped conv3x3 8->16 g=2 stride 2 (+bias); depthwise 3x3 (16, bias)
    + ReLU with a residual add; maxpool 2; pointwise 1x1 16->32 (no bias); global avg pool; linear 32->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.gconv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pool = nn.MaxPool2d(2)
        self.pw = nn.Conv2d(16, 32, 1, bias=False)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.gconv(x)
        x = x + torch.relu(self.dw(x))
        x = self.pw(self.pool(x))
        return self.fc(torch.flatten(x.mean((2, 3)), 1))


H = 32  # input size
# hand-computed, per image: output elements x (C_in / groups) x kernel area
MACS = {
    "conv": 8 * H * H * 3 * 9,                       # 32x32x8 outputs, 3 inputs x 3x3
    "grouped_conv": 16 * 16 * 16 * (8 // 2) * 9,     # 16x16x16 outputs, 4 inputs per group x 3x3
    "depthwise_conv": 16 * 16 * 16 * 1 * 9,          # one input channel per output
    "pointwise": 32 * 8 * 8 * 16,                    # 1x1 after the 2x2 pool
    "fc": 32 * 10,
}
PARAMS = 3 * 8 * 9 + (8 + 8) + (16 * 4 * 9 + 16) + (16 * 9 + 16) + 16 * 32 + (32 * 10 + 10)


def net_built(size: int = H) -> Built:
    """`Net` in eval mode with its parameters on the meta device, as `build_meta` builds a zoo model."""
    with torch.device("meta"):
        module = Net().eval()
    return Built(ModelSpec("torch", "net", size), size, "torch", (1, 3, size, size), module=module)


def net_layer_table() -> pd.DataFrame:
    """Every pass of `Net` at input size H (what a test module's `net_table` fixture builds once)."""
    return layer_table("torch", "net", built=net_built())


def forward_rows(df: pd.DataFrame, kind: str | None = None) -> pd.DataFrame:
    """The forward pass's rows of a table, of one kind if given."""
    f = df.loc[df["pass"] == "forward"]
    return f if kind is None else f.loc[f["kind"] == kind]
