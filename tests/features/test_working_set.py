"""The step's estimated GPU memory (`fits_in_memory` of an answer)."""

import numpy as np
import pytest

from src.features.working_set import working_set_gb


def test_working_set_by_hand():
    """ResNet-50 (25.56 M parameters, 11.11 M activations per sample), batch 256."""
    cols = {"param_count_m": np.array([25.56, 25.56, 25.56]), "activations_m": np.array([11.11] * 3),
            "batch_size": np.array([256.0] * 3), "precision": np.array(["fp32", "amp_fp16", "fp32"], dtype=object),
            "mode": np.array(["training", "training", "inference"], dtype=object)}
    got = working_set_gb(cols) * 2**30
    p, a = 25.56e6, 11.11e6 * 256
    assert got[0] == pytest.approx(p * 4 + p * (4 + 8) + a * 4)  # weights, gradients, Adam state, activations
    assert got[1] == pytest.approx(p * 2 + p * (2 + 8 + 4) + a * 2)  # + fp32 master weights under AMP
    assert got[2] == pytest.approx(p * 4 + 0.05 * a * 4)  # inference: the live layers only


def test_no_measured_row_is_flagged_out_of_memory(tmp_path):
    """The estimate is a lower bound: every configuration somebody measured fits (the whole real table: the
    pipeline's if built, else rebuilt from the raw data as the `features` stage builds it)."""
    from tests.serve.realdata import whole_table

    df, _ = whole_table(str(tmp_path))
    cols = {c: df[c].to_numpy() for c in ["param_count_m", "activations_m", "batch_size"]}
    cols.update({c: df[c].to_numpy(dtype=object) for c in ["precision", "mode"]})
    share = working_set_gb(cols) / df["memory_size_gb"].to_numpy()
    assert share.max() <= 1.0
    assert share.max() > 0.5  # and not vacuous: the largest measured configurations use most of their GPU
