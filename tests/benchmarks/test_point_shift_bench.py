"""benchmarks/point_shift_bench.py: each rule reads the shift it says, and `none` scores the learner's own answers."""

import sys

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT
from src.train.point import blended_shift, mape_optimal_shift
from tests.train import tiny

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from physics_bench import config  # noqa: E402
from point_shift_bench import pooled_mape, rule_shift, score  # noqa: E402


def test_rules_read_the_shift_they_name():
    rng = np.random.default_rng(3)
    oof, in_sample = rng.normal(0.05, 0.3, 500), rng.normal(0.0, 0.1, 500)
    assert rule_shift("none", oof, in_sample) == 0.0
    assert rule_shift("oof", oof, in_sample) == mape_optimal_shift(oof)
    assert rule_shift("median", oof, in_sample) == pytest.approx(-np.median(oof))
    assert rule_shift("632", oof, in_sample) == pytest.approx(
        blended_shift(mape_optimal_shift(in_sample), mape_optimal_shift(oof)))
    with pytest.raises(ValueError, match="unknown rule 'mean'"):
        rule_shift("mean", oof, in_sample)
    assert pooled_mape(np.log(np.array([1.5, 0.5]))) == pytest.approx(50.0)


def test_score_on_the_tiny_table(tmp_path):
    c = config("dt", "physics_ptx/efficiency", [*tiny.overrides(tmp_path), "model.distill=null"])
    df = pd.read_parquet(c["data"]["dataset"])
    out = score(c, df, "leave_gpu_out", ["none", "632"], 2, None, int(c["seed"]))
    assert set(out) == {"none", "632"}
    assert all(v == 0.0 for v in out["none"]["fold_shifts"].values())
    assert len(out["632"]["fold_shifts"]) == df["gpu"].nunique()  # one fold per GPU by default
    assert out["none"]["mape"] > 0 and np.isfinite(out["632"]["mape"])
