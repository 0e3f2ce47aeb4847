"""Born-again tree: synthetic rows recombine whole blocks of training rows; the served model is one tree."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from sklearn.tree import DecisionTreeRegressor

from src.config import compose
from src.features.distill import (
    DONOR_RULES,
    DistilledBaselineRegressor,
    distill_blocks,
    distinct_rows,
    swap_blocks,
)
from src.features.engineer import input_columns
from src.features.mape_point import mape_optimal_shift
from src.train.estimators import inner_pipeline, swap_block_columns
from src.train.fit import fit_model, make_model, ptx_columns
from src.train.metrics import mape
from tests.train import tiny


def _table() -> pd.DataFrame:
    return pd.DataFrame({"model_key": ["a", "b", "c", "d"], "img_size": [224, 299, 224, 320],
                         "gpu": ["g1", "g2", "g3", "g4"], "bw": [1.0, 2.0, 3.0, 4.0], "batch_size": [1, 2, 4, 8]})


def test_swapped_blocks_come_whole_from_training_rows():
    X = _table()
    out = swap_blocks(X, [("model_key", "img_size"), ("gpu", "bw")], copies=50, seed=0)
    assert len(out) == 400 and list(out.columns) == list(X.columns)
    cnn_pairs = set(map(tuple, X[["model_key", "img_size"]].to_numpy().tolist()))
    gpu_pairs = set(map(tuple, X[["gpu", "bw"]].to_numpy().tolist()))
    assert set(map(tuple, out[["model_key", "img_size"]].to_numpy().tolist())) <= cnn_pairs
    assert set(map(tuple, out[["gpu", "bw"]].to_numpy().tolist())) <= gpu_pairs
    # each synthetic row swaps one block: the first 200 keep the GPU of their row (and its batch), the next 200
    # keep the CNN; both halves recombine (CNN, GPU) pairs that no training row has
    batch_of_gpu = dict(zip(X["gpu"], X["batch_size"], strict=True))
    batch_of_cnn = dict(zip(X["model_key"], X["batch_size"], strict=True))
    assert (out["batch_size"][:200] == out["gpu"][:200].map(batch_of_gpu)).all()
    assert (out["batch_size"][200:] == out["model_key"][200:].map(batch_of_cnn)).all()
    for half in (out[:200], out[200:]):
        combos = set(zip(half["model_key"], half["gpu"], strict=True))
        assert len(combos - set(zip(X["model_key"], X["gpu"], strict=True))) > 0
    # seeded, and X untouched
    pd.testing.assert_frame_equal(out, swap_blocks(X, [("model_key", "img_size"), ("gpu", "bw")], 50, 0))
    pd.testing.assert_frame_equal(X, _table())


def _skewed() -> pd.DataFrame:
    """Eight rows on GPU a, one each on b and c (like the RTX 3090's share of the measurements)."""
    return pd.DataFrame({"gpu": ["a"] * 8 + ["b", "c"], "bw": [1.0] * 8 + [2.0, 3.0], "row": list("pqrstuvwxy")})


def _self_swaps(out: pd.DataFrame, X: pd.DataFrame) -> float:
    return float((out["row"].map(dict(zip(X["row"], X["gpu"], strict=True))) == out["gpu"]).mean())


def test_donor_rules_draw_other_blocks():
    X = _skewed()
    by_rule = {rule: swap_blocks(X, [("gpu", "bw")], 400, 3, rule) for rule in DONOR_RULES}
    # `rows`: frequency-weighted donors, so most of a skewed table's synthetic rows are copies of themselves
    assert _self_swaps(by_rule["rows"], X) > 0.5
    for rule in ("other", "distinct"):
        out = by_rule[rule]
        assert len(out) == 4000 and _self_swaps(out, X) == 0.0
        # the block still comes whole from a training row
        assert set(map(tuple, out[["gpu", "bw"]].to_numpy().tolist())) <= {("a", 1.0), ("b", 2.0), ("c", 3.0)}
    # `other` keeps the donors' frequencies among the other values (a row on b draws a 8:1 over c), `distinct`
    # draws each other value equally (a row on b draws a and c alike)
    on_b = {rule: by_rule[rule].loc[by_rule[rule]["row"] == "x", "gpu"].value_counts(normalize=True)
            for rule in ("other", "distinct")}
    assert on_b["other"]["a"] > 0.8 and abs(on_b["distinct"]["a"] - 0.5) < 0.1
    # `rows` is the default
    pd.testing.assert_frame_equal(by_rule["rows"], swap_blocks(X, [("gpu", "bw")], 400, 3))


def test_a_block_with_one_value_has_no_other_donor():
    X = _skewed().assign(gpu="a", bw=1.0)
    assert swap_blocks(X, [("gpu", "bw")], 5, 0, "distinct").empty
    assert swap_blocks(X, [("gpu", "bw")], 5, 0, "other").empty
    assert len(swap_blocks(X, [("gpu", "bw")], 5, 0, "rows")) == 50


def test_distinct_rows_keep_each_row_once_with_its_count():
    X = pd.DataFrame({"gpu": ["a", "b", "a", "a", None, None], "bw": [1.0, 2.0, 1.0, 1.0, np.nan, np.nan],
                      "batch_size": [1, 1, 1, 2, 4, 4]})
    rows, counts = distinct_rows(X)
    # first-occurrence order; a missing value matches a missing value
    assert rows.to_dict("records")[:3] == [{"gpu": "a", "bw": 1.0, "batch_size": 1},
                                           {"gpu": "b", "bw": 2.0, "batch_size": 1},
                                           {"gpu": "a", "bw": 1.0, "batch_size": 2}]
    assert len(rows) == 4 and rows["gpu"].isna().tolist() == [False, False, False, True]
    assert counts.tolist() == [2.0, 1.0, 1.0, 2.0] and counts.sum() == len(X)


def test_swap_blocks_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"lacks: \['nope'\]"):
        swap_blocks(_table(), [("model_key", "nope")], 1, 0)
    with pytest.raises(ValueError, match="copies must be >= 0"):
        swap_blocks(_table(), [("gpu",)], -1, 0)
    with pytest.raises(ValueError, match=r"distill.donors: unknown rule 'nearest'"):
        swap_blocks(_table(), [("gpu",)], 1, 0, "nearest")
    assert swap_blocks(_table(), [("gpu",)], 0, 0).empty
    with pytest.raises(ValueError, match=r"unknown block\(s\) \['cpu'\]"):
        distill_blocks(["gpu", "cpu"], {"gpu": ("gpu",), "cnn": ("model_key",)})


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    ov = tiny.overrides(tmp_path_factory.mktemp("distill"))
    c = OmegaConf.to_container(compose(ov + ["model=dt"]), resolve=True)
    return c, pd.read_parquet(c["data"]["dataset"])


def test_the_decision_tree_is_grown_on_its_teachers_answers(tiny_config):
    c, df = tiny_config
    assert c["model"]["distill"]["teacher"] == "xgb"
    model = fit_model(c, df)
    assert isinstance(model, DistilledBaselineRegressor)
    # the served model is one tree; the teacher is not kept
    assert type(inner_pipeline(model).named_steps["model"]) is DecisionTreeRegressor
    assert not hasattr(model, "teacher_")
    assert model.n_training_rows_ == len(df)
    assert model.n_synthetic_rows_ == c["model"]["distill"]["copies"] * len(c["model"]["distill"]["swap"]) * len(df)
    blocks = swap_block_columns(c["features"], ptx_columns(c, df))
    assert "model_key" in blocks["cnn"] and "memory_bandwidth_gbs" in blocks["gpu"] and "gpu" in blocks["gpu"]
    X = df[input_columns(c["features"], ptx_columns(c, df))]
    y = df["target"].to_numpy(float)
    # identical rows are grown on once (weighted by their count)
    assert len(X.drop_duplicates()) <= model.n_grown_rows_ < model.n_training_rows_ + model.n_synthetic_rows_
    # it reproduces the teacher on its training rows far closer than the measurements
    teacher = make_model(c, None, ptx_columns(c, df), "xgb").fit(X, y)
    assert mape(teacher.predict(X), model.predict(X)) < mape(y, model.predict(X)) + 1e-9
    # its unseen-runtime fallback reads the measured rows' efficiencies, not the teacher's labels, as the plain
    # tree's: their median, and the point that minimises their MAPE (target.point=mape)
    log_eff = np.log(y / model.baseline_ms(X))
    assert model.median_log_efficiency_ == pytest.approx(float(np.median(log_eff)))
    assert model.fallback_log_efficiency_ == pytest.approx(
        model.median_log_efficiency_ + mape_optimal_shift(model.median_log_efficiency_ - log_eff))
    # the plain CART tree stays one override away
    plain = fit_model({**c, "model": {**c["model"], "distill": None}}, df)
    assert type(plain).__name__ == "PhysicsBaselineRegressor"
    assert not np.allclose(plain.predict(X), model.predict(X))


def test_distilling_needs_the_efficiency_target_and_a_teacher(tiny_config):
    c, df = tiny_config
    latency = {**c, "target": {**c["target"], "baseline": None, "name": "latency"}}
    with pytest.raises(ValueError, match="distill needs the efficiency target"):
        make_model(latency, None, ptx_columns(c, df))
    with pytest.raises(ValueError, match="must name another model"):
        make_model({**c, "model": {**c["model"], "distill": {**c["model"]["distill"], "teacher": "dt"}}}, None,
                   ptx_columns(c, df))
    with pytest.raises(ValueError, match="needs a teacher"):
        DistilledBaselineRegressor(regressor=None).fit(df, df["target"])
