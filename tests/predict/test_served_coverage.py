"""Coverage of the served intervals under a grouped protocol: the served rule (novelty raised by the arch / runtime
escalations) against the novelty alone, on the same held-out rows, predictions and calibration."""

from __future__ import annotations

import pytest


def test_held_out_runtimes_get_the_runtime_interval(holdout_model, real_overrides):
    from sklearn.base import clone

    from src.predict.data import load_split
    from src.predict.model import load
    from src.predict.served_coverage import served_rule_coverage

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    # the first held-out runtime; row and runtime calibrated (the other kinds answer the widest of those two)
    out = served_rule_coverage(clone(model.pipeline), data, "runtime", list(model.meta["gpu_features"]), (0.8, 0.9),
                               k=2, progress=False, kinds=("row", "runtime"), max_outer=1)
    assert out["n_folds"] == 1
    held = sum(f["n"] for f in out["per_fold"].values())
    # every held-out row's runtime is new to its model: the fallback answers it, and the served rule says so
    assert all(f["rows_runtime"] == f["n"] for f in out["per_fold"].values())
    assert sum(out["kinds_used"]["novelty"].values()) == sum(out["kinds_used"]["served"].values()) == held
    # coverage per held-out runtime: one fold holds out one runtime
    per = out["pooled"]["served"]["0.80"]["per_runtime"]
    assert per["groups"] == 1 and per["mean"] == pytest.approx(out["pooled"]["served"]["0.80"]["coverage"])
    # a runtime nobody measured is answered less surely than a random row: no held-out row keeps the row interval
    assert "row" not in out["kinds_used"]["served"] and out["kinds_used"]["served"].get("runtime", 0) > 0
    for lv in ("0.80", "0.90"):
        novelty, served = out["pooled"]["novelty"][lv], out["pooled"]["served"][lv]
        # raising a row to a wider kind never narrows it: wider or equal intervals, so coverage cannot drop
        assert served["median_width_factor"] >= novelty["median_width_factor"]
        assert served["coverage"] >= novelty["coverage"]
        assert 0.0 <= novelty["coverage"] <= 1.0


def test_held_out_setups_get_the_setup_interval(holdout_model, real_overrides):
    from sklearn.base import clone

    from src.predict.data import load_split
    from src.predict.model import load
    from src.predict.served_coverage import served_rule_coverage

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    rules = {"novelty": (), "no_setup": ("arch", "runtime"), "served": ("arch", "runtime", "setup")}
    # both outer folds: the second one calibrates the same kinds as the first (the held-out rows' novelty kinds
    # once shadowed them there, and the calibration fitted a model per held-out row)
    out = served_rule_coverage(clone(model.pipeline), data, "setup", list(model.meta["gpu_features"]), (0.8, 0.9),
                               k=2, progress=False, kinds=("row", "setup"), rules=rules)
    assert out["n_folds"] == 2 and sum(f["n"] for f in out["per_fold"].values()) == len(data.df)
    # whole setups are held out, so every held-out row's setup is new to its model, and the rule sees it
    assert all(f["rows_setup"] == f["n"] > 0 for f in out["per_fold"].values())
    assert "setup" in out["kinds_used"]["served"] and "setup" not in out["kinds_used"]["no_setup"]
    for lv in ("0.80", "0.90"):
        widths = [out["pooled"][r][lv]["median_width_factor"] for r in rules]
        covers = [out["pooled"][r][lv]["coverage"] for r in rules]
        # each rule adds escalations to the one before: never narrower, never less coverage
        assert widths == sorted(widths) and covers == sorted(covers)
    with pytest.raises(ValueError, match=r"unknown escalation\(s\) \['batch'\]"):
        served_rule_coverage(model.pipeline, data, "setup", [], (0.9,), rules={"x": ("batch",)})


def test_unknown_protocol_is_refused(holdout_model, real_overrides):
    from src.predict.data import load_split
    from src.predict.model import load
    from src.predict.served_coverage import served_rule_coverage

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    with pytest.raises(ValueError, match="unknown protocol 'family'"):
        served_rule_coverage(model.pipeline, data, "family", [], (0.9,))


def test_loading_a_model_leaves_sys_path_as_it_was(holdout_model):
    """load() must not leave the model's carried (older) `src` first on sys.path: calibration workers inherit it."""
    import sys

    from src.predict.model import load

    before = list(sys.path)
    load(holdout_model["registered"])
    assert sys.path == before


def test_balanced_and_pooled_runtime_quantiles_on_the_same_scores(holdout_model, real_overrides):
    """Each rule answers with its own calibration of the same out-of-fold scores: the runtime kind's quantile weighed
    by fold (each held-out runtime counts once) or pooled by rows, as `conformal` computes them directly."""
    import numpy as np
    from sklearn.base import clone

    from src.predict import conformal
    from src.predict.calibrate import kind_labels
    from src.predict.data import load_split
    from src.predict.model import load
    from src.predict.served_coverage import Rule, outer_folds, served_rule_coverage
    from src.train import family_labels

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    rules = {"by_rows": Rule(("runtime",), ()), "served": Rule(("runtime",))}
    out = served_rule_coverage(clone(model.pipeline), data, "runtime", list(model.meta["gpu_features"]), (0.8,),
                               k=2, progress=False, kinds=("runtime",), max_outer=1, rules=rules)
    df = data.df.reset_index(drop=True)
    tr, _ = outer_folds("runtime", df, 2, 42)[0]
    labels = {"runtime": kind_labels(df, ("runtime",))["runtime"].iloc[tr].reset_index(drop=True)}
    assert labels["runtime"].nunique() >= 3, "the sample's training part needs two held-out runtimes besides eager"
    s, fold = conformal.all_oof_scores_by_fold(
        clone(model.pipeline), df[data.cols].iloc[tr].reset_index(drop=True), df["target"].to_numpy(float)[tr],
        ("runtime",), df["gpu"].astype(str).iloc[tr], family_labels(df).iloc[tr], 2, 42, labels=labels)["runtime"]
    assert len(np.unique(fold)) == labels["runtime"].nunique() - 1
    # every held-out row gets the runtime kind (the only one calibrated), so its width is exp(q) of that kind
    assert out["pooled"]["by_rows"]["0.80"]["median_width_factor"] == pytest.approx(
        np.exp(conformal.quantile(s, 0.8)))
    assert out["pooled"]["served"]["0.80"]["median_width_factor"] == pytest.approx(
        np.exp(conformal.balanced_quantile(s, fold, 0.8)))
    assert conformal.quantile(s, 0.8) != conformal.balanced_quantile(s, fold, 0.8)
    from src.predict.served_coverage import as_rule

    assert as_rule(Rule(["runtime"], ["arch"])) == Rule(("runtime",), ("arch",))  # hashable: keys the calibrations
    assert as_rule(["setup"]) == Rule(("setup",))
    with pytest.raises(ValueError, match=r"unknown balanced kind\(s\) \['batch'\]"):
        served_rule_coverage(model.pipeline, data, "runtime", [], (0.9,), rules={"x": Rule((), ("batch",))})


def test_group_coverage_counts_each_group_once():
    import numpy as np

    from src.predict.served_coverage import group_coverage

    # a large group covered at 0.95 and two small ones at 0.5 and 0.0: pooled 0.905, per group 0.483
    inside = np.array([True] * 95 + [False] * 5 + [True, False] + [False] * 3)
    groups = np.array(["rtx3090"] * 100 + ["t4"] * 2 + ["k40"] * 3)
    out = group_coverage(inside, groups, 0.8)
    assert inside.mean() > 0.9
    assert out["groups"] == 3 and out["min"] == 0.0 and out["worst"] == "k40"
    assert out["mean"] == pytest.approx((0.95 + 0.5 + 0.0) / 3) and out["median"] == 0.5
    assert out["below_0.70"] == 2
    # a setup label's fields (joined by the unit separator) read apart
    setup = group_coverage(np.array([True, False]), np.array(["paddle\x1ffp16", "torch\x1ffp32"]), 0.9)
    assert setup["worst"] == "torch / fp32"
