"""src.evaluate.ranking against a plain per-configuration loop with scipy.stats.spearmanr."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from src.evaluate.ranking import RANK_GROUP, per_config, ranking_agreement


def table(seed: int = 0, n_cfg: int = 60) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_cfg):
        gpus = rng.choice([f"g{i}" for i in range(8)], size=rng.integers(1, 8), replace=False)
        for g in gpus:
            for _ in range(rng.integers(1, 3)):  # twins: the same configuration on one GPU twice
                rows.append({"source": "s", "model_key": f"m{c % 7}", "mode": "inference", "precision": "fp32",
                             "memory_layout": None if c % 3 else "nchw", "compile_mode": "eager",
                             "batch_size": c, "img_size": 224, "gpu": g})
    df = pd.DataFrame(rows)
    measured = rng.uniform(1, 10, len(df)).round(1)  # rounding makes ties
    predicted = np.where(rng.random(len(df)) < 0.2, measured, measured * rng.lognormal(0, 0.4, len(df))).round(1)
    return df, measured, predicted


def loop(df, measured, predicted, min_gpus=3):
    d = df.assign(m=measured, p=predicted).fillna({"memory_layout": "<na>"})
    out = []
    for _, g in d.groupby(RANK_GROUP):
        g = g.groupby("gpu", as_index=False)[["m", "p"]].mean()
        if len(g) < min_gpus:
            continue
        rho = spearmanr(g["m"], g["p"]).statistic
        pick = g["m"].iloc[int(g["p"].to_numpy().argmin())]
        out.append((len(g), rho, pick / g["m"].min()))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_scipy_per_configuration(seed):
    df, m, p = table(seed)
    got = per_config(df, m, p).sort_values(RANK_GROUP)  # the loop's groupby order
    want = loop(df, m, p)
    assert len(got) == len(want) > 10
    np.testing.assert_array_equal(got["gpus"], [w[0] for w in want])
    np.testing.assert_allclose(got["spearman"], [w[1] for w in want], rtol=1e-12, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(got["top1_measured_ratio"], [w[2] for w in want], rtol=1e-12)
    assert (got["top1"] == (got["top1_measured_ratio"] <= 1)).all()


def test_summary_perfect_and_reversed():
    df, m, _ = table(3)
    perfect = ranking_agreement(df, m, m)
    assert perfect["spearman_median"] == 1.0 and perfect["top1_share"] == 1.0
    assert perfect["top1_slowdown_worst"] == 1.0 and np.isnan(perfect["top1_miss_slowdown_median"])
    rev = ranking_agreement(df, m, -m)
    assert rev["spearman_median"] == -1.0 and rev["top1_share"] < 0.2 and rev["top1_miss_slowdown_median"] > 1.5
    assert rev["configs"] == perfect["configs"] == len(per_config(df, m, m))


def test_min_gpus_and_missing_columns():
    df, m, p = table(4)
    assert len(per_config(df, m, p, min_gpus=8)) == 0
    assert np.isnan(ranking_agreement(df, m, p, min_gpus=8)["spearman_median"])
    with pytest.raises(ValueError, match="no configuration column"):
        per_config(df[["gpu"]], m, p)
