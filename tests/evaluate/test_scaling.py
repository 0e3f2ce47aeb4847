"""GPU-to-GPU scaling of an estimate, by hand on small tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.evaluate.scaling import CONFIG_COLUMNS, pair_groups, scaling_summary


def configs(n: int, gpu: str, measured: float, estimated: float, **fixed) -> pd.DataFrame:
    """n identical-but-for-CNN configurations on one GPU, every one `measured` / `estimated` ms."""
    base = {"source": "timm", "img_size": 224, "batch_size": 256, "precision": "amp_fp16", "mode": "inference",
            "memory_layout": "nchw", "compile_mode": "eager", "framework": "pytorch", "framework_version": "2.4",
            **fixed}
    return pd.DataFrame([{**base, "model_key": f"cnn{i}", "gpu": gpu, "target": measured, "t_physics_ms": estimated}
                         for i in range(n)])


def test_a_pair_names_the_slower_gpu_first_and_signs_the_error():
    # H100 measures 1.10x the H200's time; the estimate says 1.40x: it over-estimates the H200's gain
    df = pd.concat([configs(25, "H200", 10.0, 5.0), configs(25, "H100", 11.0, 7.0)])
    g = pair_groups(df, min_rows=20)
    assert len(g) == 1
    row = g.iloc[0]
    assert (row["gpu_a"], row["gpu_b"], row["rows"]) == ("H100", "H200", 25)
    assert row["measured_ratio"] == pytest.approx(1.1) and row["estimated_ratio"] == pytest.approx(1.4)
    assert row["log_error"] == pytest.approx(np.log(1.4 / 1.1)) and row["log_error"] > 0


def test_only_identical_configurations_pair_and_small_groups_are_dropped():
    df = pd.concat([configs(25, "A", 2.0, 1.0), configs(25, "B", 1.0, 1.0, framework_version="2.5"),
                    configs(10, "C", 4.0, 1.0)])
    # A and B never ran the same release; C has too few rows
    assert pair_groups(df, min_rows=20).empty
    assert len(pair_groups(df, min_rows=10)) == 1  # A and C (B's release differs from both)


def test_groups_split_by_source_precision_and_runtime():
    df = pd.concat([configs(20, "A", 2.0, 2.0), configs(20, "B", 1.0, 1.0),
                    configs(20, "A", 2.0, 2.0, compile_mode="torch_compile"),
                    configs(20, "B", 1.0, 2.0, compile_mode="torch_compile")])
    g = pair_groups(df, min_rows=20).set_index("compile_mode")
    assert g.loc["eager", "log_error"] == pytest.approx(0.0)
    assert g.loc["torch_compile", "log_error"] == pytest.approx(np.log(1.0 / 2.0))
    s = scaling_summary(g.reset_index())
    assert s["groups"] == 2 and s["within_10pct_share"] == 0.5 and s["underestimated_gain_share"] == 0.5


def test_missing_columns_and_empty_summaries_are_errors():
    with pytest.raises(KeyError, match="framework_version"):
        pair_groups(configs(20, "A", 1.0, 1.0).drop(columns="framework_version"))
    with pytest.raises(ValueError, match="no GPU pair"):
        scaling_summary(pair_groups(configs(20, "A", 1.0, 1.0)))
    assert "model_key" in CONFIG_COLUMNS
