"""Static analyzer on models whose figures are known by hand or from the architecture's paper."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="static analysis of torch models needs torch (zoo extra)")

from src.zoo.names import ModelSpec  # noqa: E402
from src.zoo.resolve import Built  # noqa: E402
from src.zoo.static import count_ops, static_features, torch_layer_counts  # noqa: E402

HAS_KERAS = importlib.util.find_spec("keras") is not None


class Tiny(torch.nn.Module):
    """conv3x3(3->8) + BN + ReLU, depthwise 3x3, pointwise 1x1 (8->16), global pool, linear 16->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.act = torch.nn.ReLU()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = torch.nn.Conv2d(8, 16, 1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.act(self.bn(self.conv(x)))
        x = self.pw(self.dw(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def tiny_built(size: int = 32) -> Built:
    return Built(ModelSpec("torch", "tiny", size), size, "torch", (1, 3, size, size), module=Tiny().eval())


def test_tiny_model_by_hand():
    f = static_features(tiny_built(32))
    hw = 32 * 32
    assert f["trainable_params"] == 3 * 8 * 9 + 2 * 8 + (8 * 9 + 8) + (8 * 16 + 16) + (16 * 10 + 10)
    assert f["total_params"] == f["trainable_params"] + 2 * 8  # BN running mean and var
    assert f["macs"] == hw * 8 * 27 + hw * 8 * 9 + hw * 16 * 8 + 16 * 10
    assert f["activations"] == hw * 8 + hw * 8 + hw * 16 + 10
    assert f["depth"] == 4  # conv -> dw -> pw -> fc
    assert (f["n_conv"], f["n_depthwise_conv"], f["n_dense"], f["n_norm"], f["n_pool"], f["n_activation"]) == (
        2, 1, 1, 1, 1, 1)


def test_macs_scale_with_input_area():
    small = count_ops(Tiny().eval(), (1, 3, 32, 32))["macs"]
    big = count_ops(Tiny().eval(), (1, 3, 64, 64))["macs"]
    assert big - 160 == 4 * (small - 160)  # the dense layer does not grow with the image


def test_layer_counts_group_kinds():
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, groups=2), torch.nn.MultiheadAttention(8, 2))
    c = torch_layer_counts(m)
    assert c["grouped_conv"] == 1 and c["attention"] == 1


@pytest.mark.skipif(not HAS_KERAS, reason="Keras not installed (zoo extra)")
def test_keras_mobilenet_matches_its_paper():
    """MobileNet 1.0-224: 4.2 M parameters and 569 M mult-adds (Howard et al. 2017, Table 8)."""
    from src.zoo.resolve import build

    f = static_features(build("keras", "MobileNet"))
    assert f["trainable_params"] == 4_231_976
    assert 565e6 < f["macs"] < 575e6
    assert f["n_depthwise_conv"] == 13 and f["n_conv"] == 15  # Keras MobileNet classifies with a 1x1 conv


@pytest.mark.skipif(not HAS_KERAS, reason="Keras not installed (zoo extra)")
def test_cli_static_json_keys():
    proc = subprocess.run([sys.executable, "-m", "src.zoo", "static", "--source", "keras", "--model",
                           "MobileNetV2", "--input-size", "96", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    obj = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("trainable_params", "total_params", "macs", "activations"):
        assert key in obj
    assert obj["trainable_params"] == 3_504_872  # parameters do not depend on the input size
    assert obj["img_size"] == 96
