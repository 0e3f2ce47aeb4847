"""src.evaluate.runtime_pairs on hand-made held-out rows with known speed-ups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.evaluate.runtime_pairs import pairs, summary


def rows() -> pd.DataFrame:
    base = {"source": "torch2trt", "batch_size": 1, "img_size": 224, "mode": "inference", "precision": "fp16",
            "memory_layout": np.nan}
    spec = [("resnet18", "T4", "eager"), ("resnet18", "T4", "eager"),  # twins: averaged first
            ("resnet18", "T4", "tensorrt"), ("resnet50", "T4", "eager"), ("resnet50", "T4", "tensorrt"),
            ("resnet50", "A100", "tensorrt"),  # no eager twin held out: not a pair
            ("vgg16", "T4", "torch_compile"), ("vgg16", "T4", "eager")]
    return pd.DataFrame([{**base, "model_key": m, "gpu": g, "compile_mode": c} for m, g, c in spec])


def test_speedups_and_errors():
    r = rows()
    measured = np.array([4.0, 6.0, 1.0, 10.0, 2.0, 1.0, 5.0, 10.0])   # speed-ups 5, 5, 2
    predicted = np.array([5.0, 5.0, 2.0, 9.0, 3.0, 1.0, 5.0, 10.0])   # 2.5, 3, 2
    t = pairs(r, measured, predicted).set_index(["model_key", "runtime"])
    assert len(t) == 3
    assert t.loc[("resnet18", "tensorrt"), "measured_speedup"] == pytest.approx(5.0)
    assert t.loc[("resnet18", "tensorrt"), "predicted_speedup"] == pytest.approx(2.5)
    assert t.loc[("resnet18", "tensorrt"), "ratio_error"] == pytest.approx(0.5)
    assert t.loc[("resnet50", "tensorrt"), "ratio_error"] == pytest.approx(0.4)
    assert t.loc[("vgg16", "torch_compile"), "ratio_error"] == pytest.approx(0.0)
    s = summary(t.reset_index())
    assert s["tensorrt"]["pairs"] == 2 and s["tensorrt"]["cnns"] == 2 and s["tensorrt"]["gpus"] == 1
    assert s["tensorrt"]["ratio_error_median"] == pytest.approx(0.45) and s["tensorrt"]["within_25pct"] == 0.0
    assert s["torch_compile"]["within_25pct"] == 1.0 and s["torch_compile"]["measured_speedup_median"] == 2.0


def test_no_pairs():
    r = rows()
    only_eager = r[r["compile_mode"].eq("eager")]
    t = pairs(only_eager, np.ones(len(only_eager)), np.ones(len(only_eager)))
    assert t.empty and summary(t) == {}
