"""Conformal quantiles and the empirical coverage of the intervals on a real held-out split."""

import math

import numpy as np
import pytest

from src.predict import conformal


def test_quantile_is_the_finite_sample_rank():
    s = np.arange(1, 20, dtype=float)  # n = 19 -> ceil(20 * 0.9) = 18th smallest
    assert conformal.quantile(s, 0.9) == 18.0
    assert conformal.quantile(s[:5], 0.9) == math.inf  # ceil(6 * 0.9) = 6 > 5: no finite guarantee
    assert conformal.quantile(np.array([]), 0.8) == math.inf


def test_scores_reject_non_positive():
    with pytest.raises(ValueError, match="positive"):
        conformal.scores(np.array([1.0, -2.0]), np.array([1.0, 1.0]))


def test_interval_is_multiplicative_and_contains_prediction():
    lo, hi = conformal.interval(np.array([10.0, 2.0]), math.log(2))
    assert np.allclose(lo, [5.0, 1.0]) and np.allclose(hi, [20.0, 4.0])


def test_pick_q_falls_back_to_most_conservative():
    cal = {"quantiles": {"row": {"0.90": 0.1}, "gpu": {"0.90": 0.4}, "cnn": {"0.90": math.inf}}}
    assert conformal.pick_q(cal, "gpu", 0.9) == 0.4
    assert conformal.pick_q(cal, "cnn", 0.9) == 0.4  # infinite -> the widest finite one
    with pytest.raises(KeyError):
        conformal.pick_q(cal, "row", 0.8)


def test_coverage_on_real_test_split(holdout_model, real_overrides):
    """Calibrated on the training part only; the registered model's intervals cover ~nominal on the test split."""
    from src.predict.calibrate import calibrate_model
    from src.predict.model import load

    model = load(holdout_model["registered"])
    cal, data = calibrate_model(model, levels=(0.8, 0.9), k=4, kinds=("row", "cnn"), max_rows=8000,
                                progress=False, overrides=real_overrides)
    assert cal["test_rows"] == len(data.test) and len(set(data.train) & set(data.test)) == 0
    for level in ("0.80", "0.90"):
        cov = cal["test_coverage"][level]["coverage"]
        assert abs(cov - float(level)) < 0.05, (level, cov)
    # the novelty-specific quantile is wider than the random-row one (new CNN families are harder)
    assert cal["quantiles"]["cnn"]["0.90"] > cal["quantiles"]["row"]["0.90"]
    ex = cal["excluded_family_coverage"]
    assert ex["families"] == ["densenet"] and "densenet121" not in cal["train_model_keys"]
    assert ex["gpu_ranking"]["configs"] >= 5 and -1 <= ex["gpu_ranking"]["spearman_median"] <= 1
    assert cal["test_gpu_ranking"]["configs"] >= 1
    # a perfect predictor orders the GPUs of every configuration exactly
    from src.evaluate.ranking import ranking_agreement

    y = data.excluded["target"].to_numpy()
    perfect = ranking_agreement(data.excluded, y, y)
    assert perfect["spearman_median"] == 1.0 and perfect["top1_share"] == 1.0


def test_calibration_refuses_a_changed_dataset(holdout_model, real_overrides):
    """The model was fitted on a 4000-row sample; a different sample would leak training rows into the test split."""
    from src.predict.calibrate import calibrate_model
    from src.predict.model import load

    with pytest.raises(ValueError, match="fingerprint mismatch"):
        calibrate_model(load(holdout_model["registered"]), levels=(0.9,), k=2, kinds=("row",), max_rows=3000,
                        progress=False, overrides=real_overrides)


def test_arch_folds_train_only_on_older_generations():
    import pandas as pd

    from src.predict.conformal import arch_folds

    arch = pd.Series(["Pascal", "Ampere", "Volta", "Ampere", "Turing", "Pascal"])
    folds = arch_folds(arch)
    assert [(sorted(set(arch[tr])), sorted(set(arch[te]))) for tr, te in folds] == [
        (["Pascal", "Volta"], ["Turing"]), (["Pascal", "Turing", "Volta"], ["Ampere"])]


@pytest.mark.parametrize("protocol", ["model", "arch"])
def test_grouped_coverage_per_protocol(holdout_model, real_overrides, protocol):
    """Nested calibration by the protocol's own grouping: a pooled coverage per level, groups named."""
    from sklearn.base import clone

    from src.predict.calibrate import grouped_coverage
    from src.predict.data import load_split
    from src.predict.model import load

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    out = grouped_coverage(clone(model.pipeline), data, protocol, (0.8, 0.9), k=3, max_outer=1, progress=False)
    assert out["n_folds"] == 1 and set(out["pooled"]) == {"0.80", "0.90"}
    cov = [out["pooled"][lv]["coverage"] for lv in ("0.80", "0.90")]
    assert 0.0 <= cov[0] <= cov[1] <= 1.0
    (name, group), = out["per_group"].items()
    assert group["n"] > 0 and "coverage_0.90" in group
    if protocol == "arch":  # the first leave_arch_out fold: the newest GPUs (Ada, Hopper, Blackwell)
        assert name == "Ada,Blackwell,Hopper"


def test_runtime_folds_hold_out_each_runtime_but_the_most_common():
    import pandas as pd

    from src.predict.conformal import kind_folds, runtime_folds

    runtime = pd.Series(["eager", "tensorrt", "eager", "torch_compile", "eager", "tensorrt"])
    folds = runtime_folds(runtime)
    assert [(sorted(set(runtime[tr])), sorted(set(runtime[te]))) for tr, te in folds] == [
        (["eager", "torch_compile"], ["tensorrt"]), (["eager", "tensorrt"], ["torch_compile"])]
    assert runtime_folds(pd.Series(["eager"] * 3)) == []
    with pytest.raises(ValueError, match=r"needs labels\['runtime'\]"):
        kind_folds("runtime", 6, runtime, runtime)


def test_setup_folds_hold_out_whole_setups():
    import numpy as np
    import pandas as pd

    from src.predict.calibrate import kind_labels
    from src.predict.conformal import kind_folds

    df = pd.DataFrame({"framework": ["pytorch"] * 4 + ["tensorflow"] * 2, "precision": ["fp32", "amp_fp16"] * 3,
                       "mode": ["inference"] * 6, "memory_layout": ["nchw"] * 6,
                       "compile_mode": ["eager", "eager", "eager", "eager", "xla", "tensorrt"]})
    labels = kind_labels(df, ("setup", "row"))
    assert list(labels) == ["setup"] and labels["setup"].nunique() == 4
    folds = kind_folds("setup", len(df), labels["setup"], labels["setup"], k=2, labels=labels)
    assert len(folds) == 2
    for tr, te in folds:
        # every setup is scored once, by a model that never saw it
        assert not set(labels["setup"][tr]) & set(labels["setup"][te])
    assert sorted(np.concatenate([te for _, te in folds]).tolist()) == list(range(6))


def test_calibration_kinds_must_be_distinct():
    import numpy as np
    import pandas as pd

    from src.predict.conformal import all_oof_scores

    with pytest.raises(ValueError, match="kinds must be distinct, got 3 with 2 distinct"):
        all_oof_scores(None, pd.DataFrame({"a": range(4)}), np.ones(4), ("row", "gpu", "row"), pd.Series(list("abab")),
                       pd.Series(list("aabb")))


def test_a_held_out_runtime_is_scored_without_fitting_the_learner(holdout_model, real_overrides):
    """The fallback answers every row of a runtime no training row has, whatever the learner: the calibration's
    runtime folds skip fitting it, and score the same as a full fit would."""
    import numpy as np
    from sklearn.base import clone

    from src.predict import conformal
    from src.predict.data import load_split
    from src.predict.model import load

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    X, y = data.df[data.cols].reset_index(drop=True), data.df["target"].to_numpy(dtype=float)
    runtime = data.df["compile_mode"].astype(str).reset_index(drop=True)
    folds = conformal.runtime_folds(runtime)
    assert folds, f"the 8000-row sample holds one runtime only: {runtime.unique()}"
    tr, te = folds[0]
    template = clone(model.pipeline)
    assert template.unseen_fallback
    fast = conformal._fit_predict(template, X, y, tr, te)
    full = clone(template).fit(X.iloc[tr], y[tr]).predict(X.iloc[te])
    assert np.allclose(fast, full, rtol=1e-9)


def test_balanced_quantile_with_one_fold_is_the_conformal_rank():
    rng = np.random.default_rng(0)
    for n in (1, 9, 10, 99, 1000):
        s = rng.exponential(size=n)
        for lv in (0.5, 0.8, 0.9):
            assert conformal.balanced_quantile(s, np.zeros(n, dtype=int), lv) == conformal.quantile(s, lv)
    assert math.isinf(conformal.balanced_quantile(np.array([]), np.array([]), 0.9))


def test_balanced_quantile_weighs_each_fold_equally():
    # a large fold of small errors (torch.compile-like) and a small fold of large ones (XLA-like)
    small, large = np.linspace(0.01, 0.1, 900), np.linspace(1.0, 2.0, 100)
    s = np.concatenate([small, large])
    fold = np.repeat([0, 1], [900, 100])
    # pooled by rows the small fold sets the 80 % quantile; balanced, half the weight lies on the large fold, so the
    # 80 % point is 60 % of the way through it: its 61st score ((1 + 61 / 100) / (2 + 2 / 1000) >= 0.8, the new row
    # weighing the mean weight 2 / 1000)
    assert conformal.quantile(s, 0.8) < 0.1
    q = conformal.balanced_quantile(s, fold, 0.8)
    assert q == large[60]
    # a level no score reaches once the new row's weight is added: 2 / 2.002 = 0.999001
    assert conformal.balanced_quantile(s, fold, 0.999) == large[-1]
    assert math.isinf(conformal.balanced_quantile(s, fold, 0.9995))
    # a fold of three rows weighs as much as the large one, but the new row only as an average row: finite
    tiny = np.concatenate([small, [1.0, 1.5, 2.0]])
    assert conformal.balanced_quantile(tiny, np.repeat([0, 1], [900, 3]), 0.9) == 2.0
    # fold ids are labels only: which fold comes first does not matter
    assert conformal.balanced_quantile(s, np.where(fold == 0, 7, 3), 0.8) == q
    with pytest.raises(ValueError, match="3 scores but 2 fold ids"):
        conformal.balanced_quantile(np.ones(3), np.zeros(2), 0.8)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            conformal.balanced_quantile(s, fold, bad)
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            conformal.quantile(s, bad)


def test_balanced_quantile_of_equal_folds_is_the_pooled_rank():
    """Equal-sized folds weigh each row equally, so the balanced quantile is the pooled one, float rounding aside."""
    rng = np.random.default_rng(1)
    for k, size in ((2, 50), (3, 333), (4, 2500)):
        s = rng.exponential(size=k * size)
        fold = np.repeat(np.arange(k), size)
        for lv in (0.8, 0.9):
            assert conformal.balanced_quantile(s, fold, lv) == conformal.quantile(s, lv)


def test_quantiles_from_scores_balance_only_the_named_kinds():
    s = np.concatenate([np.linspace(0.01, 0.1, 900), np.linspace(1.0, 2.0, 100)])
    fold = np.repeat([0, 1], [900, 100])
    every = {"row": (s, fold), "runtime": (s, fold)}
    cal = conformal.quantiles_from_scores(every, (0.8,), ("runtime", "arch"))
    assert cal["balanced_kinds"] == ["runtime"]
    assert cal["quantiles"]["row"]["0.80"] == conformal.quantile(s, 0.8)
    assert cal["quantiles"]["runtime"]["0.80"] == conformal.balanced_quantile(s, fold, 0.8)
    assert cal["n_scores"] == {"row": 1000, "runtime": 1000}
    pooled = conformal.quantiles_from_scores(every, (0.8,), ())
    assert pooled["balanced_kinds"] == [] and pooled["quantiles"]["runtime"] == pooled["quantiles"]["row"]
