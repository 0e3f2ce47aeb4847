"""The CNN offset on other GPUs: relative to the row's condition, never from the row's own GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.features.cnn_offset import OFFSET_FEATURES, condition_residuals, fit_offset_tables, offset_arrays


def _rows(cnn: str, gpu: str, y: float, mode: str = "inference", precision: str = "fp32", batch: int = 1) -> dict:
    return {"model_key": cnn, "gpu": gpu, "framework": "pytorch", "framework_version": "2.4", "compile_mode": "eager",
            "precision": precision, "mode": mode, "memory_layout": "nchw", "batch_size": batch, "img_size": 224,
            "y": y}


@pytest.fixture
def table() -> pd.DataFrame:
    # Two GPUs (A, B), three CNNs; on each GPU "slow" runs 0.4 (log) above its peers, "fast" 0.2 below.
    rows = []
    for gpu, level in (("A", 0.0), ("B", 1.0)):
        rows += [_rows("slow", gpu, level + 0.4), _rows("fast", gpu, level - 0.2), _rows("mid", gpu, level - 0.2)]
    return pd.DataFrame(rows)


def test_residuals_are_relative_to_the_condition(table):
    r = condition_residuals(table, table["y"].to_numpy())
    # the GPU's level (0 or 1) is gone: the same residual on both GPUs
    assert np.allclose(r, [0.4, -0.2, -0.2, 0.4, -0.2, -0.2])


def test_offset_comes_from_other_gpus_only(table):
    tables = fit_offset_tables(table, table["y"].to_numpy())
    # a row of GPU A sees only B's residuals of the same CNN: change A's targets, A's rows do not move
    changed = table["y"].to_numpy().copy()
    changed[table["gpu"].eq("A").to_numpy() & table["model_key"].eq("slow").to_numpy()] += 5.0
    tables_changed = fit_offset_tables(table, changed)
    a_rows = table[table["gpu"].eq("A")]
    before = offset_arrays(a_rows, tables, shrink=0.0)
    after = offset_arrays(a_rows, tables_changed, shrink=0.0)
    for name in OFFSET_FEATURES:
        assert np.allclose(before[name], after[name]), name
    assert np.allclose(before["cnn_offset_any"], [0.4, -0.2, -0.2])
    # the rows of GPU B do see A's change
    b_rows = table[table["gpu"].eq("B")]
    assert offset_arrays(b_rows, tables_changed, shrink=0.0)["cnn_offset_any"][0] > 1.0


def test_unseen_gpu_gets_every_training_row_and_unknown_cnn_gets_zero(table):
    tables = fit_offset_tables(table, table["y"].to_numpy())
    new = pd.DataFrame([_rows("slow", "C", np.nan), _rows("never-measured", "A", np.nan)])
    out = offset_arrays(new, tables, shrink=2.0)
    # CNN "slow" on a new GPU: both GPUs' residuals (0.4 twice), shrunk by 2 pseudo-rows -> 0.8 / 4
    assert out["cnn_offset_any"][0] == pytest.approx(0.2)
    assert out["cnn_offset_rows"][0] == pytest.approx(np.log1p(2))
    assert out["cnn_offset_any"][1] == 0.0 and out["cnn_offset_rows"][1] == 0.0


def test_kind_offset_keeps_mode_and_precision_apart(table):
    extra = pd.DataFrame([_rows("slow", "B", 9.0, mode="training"), _rows("fast", "B", 0.0, mode="training")])
    both = pd.concat([table, extra], ignore_index=True)
    tables = fit_offset_tables(both, both["y"].to_numpy())
    row = pd.DataFrame([_rows("slow", "A", np.nan)])
    out = offset_arrays(row, tables, shrink=0.0)
    # inference rows of B only for the kind offset; the training rows (+4.5 residual) move only the any-offset
    assert out["cnn_offset_kind"][0] == pytest.approx(0.4)
    assert out["cnn_offset_any"][0] == pytest.approx((0.4 + 4.5) / 2)
    # fp16 and amp_bf16 share the 16-bit tensor-core class
    assert out["cnn_offset_kind"][0] != offset_arrays(
        pd.DataFrame([_rows("slow", "A", np.nan, precision="amp_bf16")]), tables, shrink=0.0)["cnn_offset_kind"][0]


def test_pipeline_learns_and_serves_the_offset(tmp_path):
    """features.cnn_offset on: the features are in the model, the served fast path gives the same answer, and a
    GPU no training row has (the offset's use) is answered."""
    from omegaconf import OmegaConf

    from src.config import compose
    from src.features.engineer import input_columns
    from src.features.fast_pipeline import FastPipeline
    from src.train.estimators import feature_names
    from src.train.fit import fit_model, ptx_columns
    from tests.train import tiny

    c = OmegaConf.to_container(compose(tiny.overrides(tmp_path) + ["model=dt"]), resolve=True)
    c["features"]["cnn_offset"] = 5.0
    df = pd.read_parquet(c["data"]["dataset"])
    cols = input_columns(c["features"], ptx_columns(c, df))
    gpus = df["gpu"].unique()
    held = df["gpu"].eq(gpus[0]).to_numpy()
    model = fit_model(c, df, np.flatnonzero(~held))
    assert set(OFFSET_FEATURES) <= set(feature_names(model))
    X = df.loc[held, cols]
    perf = model.regressor_.named_steps["features"].named_steps["perf"]
    offsets = np.column_stack(perf.offset_arrays(X))
    assert (offsets[:, -1] > 0).any(), "the held-out GPU's CNNs were measured on other GPUs of the tiny table"
    fast = FastPipeline(model).predict({col: X[col].to_numpy() for col in cols})
    np.testing.assert_allclose(fast, model.predict(X), rtol=1e-12)
    # without the target the offsets cannot be computed: a clear error, not zeros
    from src.features.engineer import PerfFeatures

    bare = PerfFeatures(cnn_offset=5.0).fit(X)
    with pytest.raises(ValueError, match="fitted with the target"):
        bare.offset_arrays(X)
