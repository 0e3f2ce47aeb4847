"""Roofline features against hand-computed values (ResNet-50, 4.11 GMACs, 25.56 M params, 11.11 M acts)."""

import numpy as np
import pandas as pd
import pytest

from src.features.engineer import ENGINEERED, PerfFeatures, engineer, make_preprocessor
from tests.train.tiny import GPUS

RTX4090 = GPUS.set_index("gpu").loc["GeForce RTX 4090"]


def row(precision: str, mode: str = "inference", batch: int = 32) -> dict:
    return {"param_count_m": 25.56, "gmacs": 4.11, "activations_m": 11.11, "batch_size": batch, "img_size": 224,
            "precision": precision, "mode": mode, "memory_layout": "nchw", "compile_mode": "eager",
            **RTX4090.to_dict()}


def test_roofline_fp32_by_hand():
    e = engineer(pd.DataFrame([row("fp32")])).iloc[0]
    # FLOPs = 2 * 4.11e9 * 32 = 263.04e9 on 82.58 TFLOPS -> 3.18528 ms
    assert e["t_compute_ms"] == pytest.approx(263.04e9 / 82.58e12 * 1e3)
    # bytes = 25.56e6 * 4 + 2 * 11.11e6 * 32 * 4 = 2946.4e6 on 1008 GB/s -> 2.92302 ms
    assert e["bytes_step"] == pytest.approx(2946.4e6)
    assert e["t_memory_ms"] == pytest.approx(2946.4e6 / 1008e9 * 1e3)
    assert e["t_roofline_ms"] == pytest.approx(max(263.04e9 / 82.58e12, 2946.4e6 / 1008e9) * 1e3)
    assert e["arithmetic_intensity"] == pytest.approx(263.04e9 / 2946.4e6)


def test_half_precision_uses_tensor_core_peak():
    e = engineer(pd.DataFrame([row("amp_fp16")])).iloc[0]
    assert e["peak_tflops"] == pytest.approx(165.2)
    assert e["t_compute_ms"] == pytest.approx(263.04e9 / 165.2e12 * 1e3)
    assert e["bytes_step"] == pytest.approx(2946.4e6 / 2)


def test_training_triples_flops_and_fp64_peak():
    e = engineer(pd.DataFrame([row("fp64", "training")])).iloc[0]
    assert e["flops_step"] == pytest.approx(3 * 263.04e9)
    assert e["peak_tflops"] == pytest.approx(1.29)


def test_perf_features_names_match_columns_and_logs():
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training", 128)])
    pf = PerfFeatures(["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
                      ["precision", "mode"], ["memory_bandwidth_gbs", "tensor_cores", "compute_capability"])
    out = pf.fit_transform(X)
    assert list(out.columns) == list(pf.get_feature_names_out())
    assert out["log_batch_size"].tolist() == pytest.approx([np.log(32), np.log(128)])
    assert out["log1p_tensor_cores"].iloc[0] == pytest.approx(np.log1p(512))
    assert out["compute_capability"].iloc[0] == pytest.approx(8.9)
    assert {f"log_{c}" for c in ENGINEERED} <= set(out.columns)


def test_preprocessor_one_hot_and_unknown_category():
    feat = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
            "categorical_inputs": ["precision", "mode"], "gpu_features": ["memory_bandwidth_gbs", "fp32_tflops",
            "tensor_fp16_tflops", "fp64_tflops", "sm_count"], "engineered": True}
    pre = make_preprocessor(feat, [], scale=True)
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training")])
    Z = pre.fit_transform(X)
    names = list(pre.get_feature_names_out())
    assert "precision_fp32" in names and "mode_training" in names
    assert Z.shape == (2, len(names))


@pytest.mark.parametrize(
    ("gpu", "datasheet_tops"),
    [("Tesla T4", 130.0), ("A100 PCIe 40 GB", 624.0), ("GeForce RTX 4090", 660.6), ("GeForce GTX 1080", 35.5),
     ("Tesla V100 PCIe 16 GB", 56.0)],
)
def test_int8_peak_matches_datasheets(gpu, datasheet_tops):
    """Dense int8 TOP/s: Turing+ tensor cores at 2x fp16, dp4a (4x fp32) on Pascal cc 6.1 and on Volta."""
    from src.features.engineer import BYTES_PER_ELEMENT, peak_tflops
    from src.ingest.gpus import gpu_features

    specs = gpu_features([gpu])
    peak = float(peak_tflops(pd.Series(["int8"], index=specs.index), specs).iloc[0])
    assert peak == pytest.approx(datasheet_tops, rel=0.05)
    assert BYTES_PER_ELEMENT["int8"] == 1.0
