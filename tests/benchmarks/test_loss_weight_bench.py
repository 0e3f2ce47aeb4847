"""benchmarks/loss_weight_bench.py: the weights and loss overrides it compares are the ones it says."""

import sys

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from loss_weight_bench import group_weights, row_groups, variant_overrides  # noqa: E402


def test_group_weights_even_out_groups_and_keep_mean_one():
    groups = np.array(["timm"] * 6 + ["lambda"] * 2)
    assert np.allclose(group_weights(groups, 0.0), 1.0)
    w = group_weights(groups, 1.0)
    assert w.mean() == pytest.approx(1.0)
    assert w[groups == "timm"].sum() == pytest.approx(w[groups == "lambda"].sum())  # alpha 1: equal group totals
    half = group_weights(groups, 0.5)
    assert half[groups == "timm"].sum() / half[groups == "lambda"].sum() == pytest.approx(np.sqrt(6 / 2))


def test_row_groups_join_columns_and_name_bad_variants():
    df = pd.DataFrame({"source": ["timm", "timm", "own"], "gpu": ["A", "B", "A"]})
    labels, alpha = row_groups(df, "weights@source+gpu@0.5")
    assert labels.tolist() == ["timm|A", "timm|B", "own|A"] and alpha == 0.5
    assert row_groups(df, "squared") is None
    with pytest.raises(ValueError, match=r"no column\(s\) \['harness'\]"):
        row_groups(df, "weights@harness@1")
    with pytest.raises(ValueError, match="weights@COLS@ALPHA"):
        row_groups(df, "weights@source")


def test_loss_variants_are_xgboost_objectives():
    assert variant_overrides("squared") == [] and variant_overrides("weights@source@0.5") == []
    assert variant_overrides("absolute@800") == ["+model.fixed.objective=reg:absoluteerror",
                                                 "model.warm_start.n_estimators=800"]
    assert "+model.fixed.huber_slope=0.1" in variant_overrides("huber@0.1")
    with pytest.raises(ValueError, match="unknown variant 'quantile'"):
        variant_overrides("quantile")
