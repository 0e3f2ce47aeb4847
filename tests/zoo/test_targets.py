"""Target selection (src/zoo/targets.py): definition precedence, filters and the measured rows' keys."""

from __future__ import annotations

import pandas as pd

from src.zoo.targets import select_targets


def _meas() -> pd.DataFrame:
    return pd.DataFrame({
        "model": ["resnet50", "resnet50", "resnet50.a1_in1k", "vit_base", "inception-bn", "resnet50"],
        "model_key": ["resnet50", "resnet50", "resnet50", "vit_base", "inception_bn", "resnet50"],
        "model_source": ["tf_cnn_benchmarks", "torchvision", "timm", "timm", "dlinfbench", "timm"],
        "img_size": [224, 224, 224, 224, 224, 288],
        "batch_size": [64, 32, 256, 256, 1, 256],
        "gpu": ["A", "B", "C", "C", "A", "cpu:x"],
        "is_cpu": [False, False, False, False, False, True],
        "is_cnn": [True, True, True, False, True, True],
        "gmacs": [4.1, 4.1, 4.1, 17.0, 2.0, 6.8],
    })


def _gpus() -> pd.DataFrame:
    return pd.DataFrame({"gpu": ["A", "B", "C"], "compute_capability": [7.0, 8.6, 12.0]})


def test_select_targets_precedence_and_filters():
    targets, keys = select_targets(_meas(), _gpus())
    by_key = {(t.model_key, t.img_size): t for t in targets}
    assert set(by_key) == {("resnet50", 224), ("inception_bn", 224)}  # no ViT, no CPU row
    assert by_key[("resnet50", 224)].spec.source == "torchvision"  # torchvision wins over timm / TF
    assert by_key[("resnet50", 224)].n_gpus == 3
    assert by_key[("inception_bn", 224)].spec.name == "googlenet"
    assert len(keys) == 4
