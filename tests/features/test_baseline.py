"""Efficiency target: rows of a runtime or precision class no training row had get the bare physics estimate."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from sklearn.base import clone

from src.config import compose
from src.features.baseline import BY_NUMBERS
from src.features.batch_monotone import monotone_in_batch
from src.features.engineer import input_columns
from src.features.fast_pipeline import FastPipeline
from src.train.fit import fit_model, ptx_columns
from tests.train import tiny


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    ov = tiny.overrides(tmp_path_factory.mktemp("baseline"))
    # the plain tree: these tests are about the efficiency target's regressor (tests/features/test_distill.py: the
    # distilled one, which the same rules carry)
    c = OmegaConf.to_container(compose(ov + ["model=dt", "model.distill=null"]), resolve=True)
    df = pd.read_parquet(c["data"]["dataset"])
    cols = input_columns(c["features"], ptx_columns(c, df))
    # The tiny table is eager fp32 / amp_fp16 only: ask for one row as it is, as TensorRT, as bf16, as int8.
    one = df[cols].iloc[[0]]
    X = pd.concat([one] * 4, ignore_index=True)
    X["precision"] = ["amp_fp16", "amp_fp16", "bf16", "int8"]
    X["compile_mode"] = ["eager", "tensorrt", "eager", "eager"]
    return c, df, cols, fit_model(c, df), X


def test_unseen_runtime_and_precision_class_fall_back(fitted):
    c, df, cols, model, X = fitted
    assert c["target"]["unseen_fallback"] is True and model.unseen_fallback
    base = model.baseline_ms(X)
    learned = np.exp(model.regressor_.predict(X)) * base
    fallback = np.exp(model.fallback_log_efficiency_) * base
    pred = model.predict(X)
    # eager amp_fp16 and bf16 (the 16-bit tensor-core class amp_fp16 taught) keep the learned correction
    assert pred[[0, 2]] == pytest.approx(learned[[0, 2]], rel=1e-12)
    # TensorRT and int8, which no training row has, get the bare estimate x the fallback's training efficiency
    assert pred[[1, 3]] == pytest.approx(fallback[[1, 3]], rel=1e-12)
    assert not np.allclose(learned[[1, 3]], fallback[[1, 3]])  # and that is a change
    y = df["target"].to_numpy(dtype=float)
    log_eff = np.log(y / model.baseline_ms(df[cols]))
    assert model.median_log_efficiency_ == pytest.approx(float(np.median(log_eff)))
    # target.point=mape (the default): the fallback answers the MAPE point of the training efficiencies, below
    # their median; checked against a grid search of the training rows' MAPE
    assert c["target"]["point"] == "mape" and model.fallback_point == "mape"
    def training_mape(level):
        return np.mean(np.abs(np.exp(level - log_eff) - 1))

    grid = model.median_log_efficiency_ + np.linspace(-4.0, 1.0, 5001)
    assert training_mape(model.fallback_log_efficiency_) <= min(map(training_mape, grid)) + 1e-12
    assert model.fallback_log_efficiency_ < model.median_log_efficiency_
    masks = model.unseen(X)
    assert list(masks["compile_mode"]) == [False, True, False, False]
    assert list(masks["precision"]) == [False, False, False, True]


def test_the_served_fast_path_applies_the_same_rule(fitted):
    _, _, cols, model, X = fitted
    fast = FastPipeline(model).predict({c: X[c].to_numpy() for c in cols})
    np.testing.assert_allclose(fast, model.predict(X), rtol=1e-12)


def test_the_fast_path_follows_the_autocast_flag(tmp_path):
    """features.autocast_flag: the served replay encodes precision as the generic path does (amp_fp16 -> fp16 plus
    the flag), and a pure fp16 request shares what amp_fp16 taught."""
    ov = tiny.overrides(tmp_path)
    c = OmegaConf.to_container(compose(ov + ["model=dt", "model.distill=null", "features.autocast_flag=true"]),
                               resolve=True)
    df = pd.read_parquet(c["data"]["dataset"])
    cols = input_columns(c["features"], ptx_columns(c, df))
    model = fit_model(c, df)
    X = pd.concat([df[cols].iloc[:3]] * 3, ignore_index=True)
    X["precision"] = ["fp32"] * 3 + ["amp_fp16"] * 3 + ["fp16"] * 3
    fast = FastPipeline(model).predict({col: X[col].to_numpy() for col in cols})
    np.testing.assert_allclose(fast, model.predict(X), rtol=1e-12)
    assert "autocast" in model.regressor_.named_steps["features"].get_feature_names_out()
    assert "precision" not in model.unseen(X)  # fp16 is the 16-bit class amp_fp16 taught


def test_point_shift_moves_the_learned_rows_only_and_the_fast_path_follows(fitted):
    _, _, cols, model, X = fitted
    assert model.point_shift == 0.0  # fit_model sets none: training does (src/train/run.py)
    before = model.predict(X)
    shifted = copy.copy(model).set_params(point_shift=-0.1)  # the same fit, another point
    after = shifted.predict(X)
    # learned rows (eager amp_fp16, bf16) are exp(-0.1) x lower; the fallback rows (TensorRT, int8) keep theirs
    np.testing.assert_allclose(after[[0, 2]], before[[0, 2]] * np.exp(-0.1), rtol=1e-12)
    np.testing.assert_allclose(after[[1, 3]], before[[1, 3]], rtol=1e-12)
    fast = FastPipeline(shifted).predict({c: X[c].to_numpy() for c in cols})
    np.testing.assert_allclose(fast, after, rtol=1e-12)


def test_a_zero_shift_keeps_the_learners_dtype_and_bits(fitted):
    """XGBoost answers float32: without a shift the correction is its answer untouched (byte-identical reruns)."""
    _, _, _, model, X = fitted
    seen = X.iloc[[0, 2]]  # no unseen kind: no fallback row
    learned = np.array([0.1, -0.2], dtype=np.float32)
    out = model.correction(seen, learned)
    assert out.dtype == np.float32 and out.tobytes() == learned.tobytes()
    shifted = copy.copy(model).set_params(point_shift=-0.05).correction(seen, learned)
    assert shifted.dtype == np.float32
    np.testing.assert_allclose(shifted, learned - 0.05, rtol=1e-6)


def test_fallback_point_median_keeps_the_median_and_a_bad_rule_is_refused(fitted):
    c, df, cols, model, X = fitted
    y = df["target"].to_numpy(dtype=float)
    median = clone(model).set_params(fallback_point="median").fit(df[cols], y)
    assert median.fallback_log_efficiency_ == median.median_log_efficiency_ == model.median_log_efficiency_
    pred = median.predict(X)
    np.testing.assert_allclose(pred[[1, 3]], np.exp(median.median_log_efficiency_) * median.baseline_ms(X)[[1, 3]],
                               rtol=1e-12)
    # the learned rows do not depend on the fallback's point
    np.testing.assert_allclose(pred[[0, 2]], model.predict(X)[[0, 2]], rtol=1e-12)
    with pytest.raises(ValueError, match="fallback_point: 'mean'"):
        clone(model).set_params(fallback_point="mean").fit(df[cols], y)
    # a model pickled before `fallback_point` answers the median
    old = copy.copy(model)
    del old.fallback_log_efficiency_
    assert old.fallback_log_efficiency() == model.median_log_efficiency_


def test_a_model_pickled_before_its_newer_parameters_clones_and_answers_as_before(fitted):
    """Registered models predate `point_shift` / `fallback_point`: unpickled, they get the values that answer as
    they did, so calibrating them (sklearn clone -> get_params) works."""
    import pickle

    _, df, cols, model, X = fitted
    old = copy.copy(model)
    for name in ("point_shift", "fallback_point", "fallback_log_efficiency_", "batch_monotone"):
        old.__dict__.pop(name)
    back = pickle.loads(pickle.dumps(old))
    assert back.point_shift == 0.0 and back.fallback_point == "median" and back.batch_monotone is False
    assert clone(back).get_params()["fallback_point"] == "median"
    pred = back.predict(X)
    np.testing.assert_allclose(pred[[1, 3]], np.exp(model.median_log_efficiency_) * model.baseline_ms(X)[[1, 3]],
                               rtol=1e-12)


def test_answers_never_fall_as_the_batch_grows_in_the_generic_and_the_served_path(fitted):
    """`target.batch_monotone` (on by default): the answers over a batch sweep are the isotonic rule applied to
    the model's own per-row answers (`predict_point`), in `predict` and in the served fast path alike."""
    c, df, cols, model, _ = fitted
    assert c["target"]["batch_monotone"] is True and model.batch_monotone is True
    batches = [1, 2, 3, 4, 8, 12, 16, 32, 64, 100, 256, 1024]
    sweep = pd.concat([df[cols].iloc[[0]]] * len(batches), ignore_index=True).assign(batch_size=batches)
    pred = model.predict(sweep)
    assert (np.diff(pred) >= 0).all()
    np.testing.assert_allclose(pred, monotone_in_batch(model.predict_point, sweep), rtol=1e-12)
    fast = FastPipeline(model)
    arrays = {col: sweep[col].to_numpy() for col in cols}
    np.testing.assert_allclose(fast.predict(arrays), pred, rtol=1e-12)
    np.testing.assert_allclose(fast.predict_point(arrays), model.predict_point(sweep), rtol=1e-12)
    off = copy.copy(model).set_params(batch_monotone=False)
    np.testing.assert_allclose(off.predict(sweep), model.predict_point(sweep), rtol=1e-12)


def test_fallback_off_keeps_the_learned_correction(fitted):
    c, df, cols, _, X = fitted
    off = {**c, "target": {**c["target"], "unseen_fallback": False}}
    model = fit_model(off, df)
    assert model.unseen(X) == {}
    np.testing.assert_allclose(model.predict(X), np.exp(model.regressor_.predict(X)) * model.baseline_ms(X),
                               rtol=1e-12)


def test_a_cnn_without_ptx_counts_is_trained_and_served_with_imputed_counts(tmp_path):
    from src.features.dataset import write_dataset

    ov = tiny.overrides(tmp_path)
    c = OmegaConf.to_container(compose(ov + ["model=dt"]), resolve=True)
    table = pd.read_parquet(c["data"]["ptx_counts"])
    table[table["model_key"] != "vgg16"].to_parquet(c["data"]["ptx_counts"])
    write_dataset(c)
    df = pd.read_parquet(c["data"]["dataset"])
    cols = input_columns(c["features"], ptx_columns(c, df))
    model = fit_model(c, df)
    perf = model.regressor_.named_steps["features"].named_steps["perf"]
    feats = perf.transform(df[cols])
    vgg = (df["model_key"] == "vgg16").to_numpy()
    assert vgg.any() and (feats.loc[vgg, "ptx_counted"] == 0).all() and (feats.loc[~vgg, "ptx_counted"] == 1).all()
    # vgg16's counts are its GMACs x batch x the training rows' median count per GMAC
    fma = perf.ptx_per_gmac_[perf.ptx_features.index("ptx_class_fma")]
    want = np.log1p(fma * df.loc[vgg, "gmacs"] * df.loc[vgg, "batch_size"]).to_numpy()
    np.testing.assert_allclose(feats.loc[vgg, "log1p_ptx_class_fma"].to_numpy(), want, rtol=1e-12)
    assert np.isfinite(model.predict(df[cols])).all()


def test_fallback_rows_are_the_rows_the_fitted_model_falls_back_on(fitted):
    from src.features.baseline import fallback_rows

    _, df, cols, model, X = fitted
    rows = fallback_rows(df[cols], X)
    assert list(rows) == [False, True, False, True]
    assert list(rows) == list(np.logical_or.reduce(list(model.unseen(X).values())))
    assert not fallback_rows(df[cols], df[cols]).any()


def test_fallback_column_is_the_column_unseen_on_every_test_row(fitted):
    from src.features.baseline import fallback_column

    _, df, cols, _, X = fitted
    assert fallback_column(df[cols], X) is None  # rows 0 and 2 are seen in both columns
    assert fallback_column(df[cols], X.iloc[[1]]) == "compile_mode"
    assert fallback_column(df[cols], X.iloc[[3]]) == "precision"
    assert fallback_column(df[cols], X.iloc[[1, 3]]) is None  # each row is unseen, but in different columns
    assert fallback_column(df[cols], X.iloc[[1, 3]].assign(compile_mode="tensorrt")) == "compile_mode"


def test_a_model_fitted_without_its_learner_answers_as_the_whole_model_on_fallback_rows(fitted):
    c, df, cols, model, X = fitted
    from src.train.estimators import feature_names

    y = df["target"].to_numpy(dtype=float)
    bare = clone(model).fit_without_learner(df[cols], y)
    assert bare.learner_fitted_ is False and model.learner_fitted_ is True
    assert bare.median_log_efficiency_ == model.median_log_efficiency_
    assert feature_names(bare) == feature_names(model)  # its feature step is fitted
    assert not hasattr(bare.regressor_.named_steps["model"], "tree_")  # the tree is not
    np.testing.assert_allclose(bare.predict(X.iloc[[1, 3]]), model.predict(X.iloc[[1, 3]]), rtol=1e-12)
    with pytest.raises(ValueError, match=r"fitted without its learner.*2 of 4 rows"):
        bare.predict(X)


def test_fit_without_learner_needs_the_fallback(fitted):
    _, df, cols, model, _ = fitted
    off = clone(model).set_params(unseen_fallback=False)
    with pytest.raises(ValueError, match="unseen_fallback=True"):
        off.fit_without_learner(df[cols], df["target"].to_numpy(dtype=float))


def test_a_share_of_training_rows_is_priced_by_the_cnns_numbers(fitted):
    """`by_numbers_share` renames that share of the rows, seeded, so the learner sees the pricing a CNN outside the
    zoo gets; the fallback's median stays that of the rows priced as they are; 0 leaves the rows alone and a share
    outside [0, 1] is refused."""
    c, df, cols, model, _ = fitted
    assert model.by_numbers_share == c["target"]["by_numbers_share"] == 0.0  # off by default
    X, y = df[cols], df["target"].to_numpy(dtype=float)
    assert model.by_numbers(X) is X
    share = clone(model).set_params(by_numbers_share=0.25)
    out = share.by_numbers(X)
    renamed = out["model_key"].to_numpy() == BY_NUMBERS
    assert renamed.sum() == round(0.25 * len(X)) > 0
    assert (out["model_key"][~renamed] == X["model_key"][~renamed]).all()
    assert out.drop(columns="model_key").equals(X.drop(columns="model_key"))  # only the name changes
    assert ((clone(share).by_numbers(X)["model_key"].to_numpy() == BY_NUMBERS) == renamed).all()  # seeded
    fitted_share = share.fit(X, y)
    # priced from whole-network numbers: another estimate than the kernel profile's
    assert not np.allclose(fitted_share.baseline_ms(X[renamed]), fitted_share.baseline_ms(out[renamed]))
    named = ~renamed
    assert fitted_share.median_log_efficiency_ == pytest.approx(
        float(np.median(np.log(y[named] / fitted_share.baseline_ms(X[named])))))
    with pytest.raises(ValueError, match="by_numbers_share must be within"):
        clone(model).set_params(by_numbers_share=1.5).by_numbers(X)


def test_a_cnn_outside_the_zoo_is_answered_by_the_by_numbers_learner(fitted):
    """`by_numbers_learner` fits a second learner on every row priced by its numbers; rows without a layer profile
    get it (generic and served fast path alike), named rows keep the main learner's answer bit for bit, and both
    learners share one copy of the kernel profiles."""
    from src.features.baseline import perf_step

    c, df, cols, model, _ = fitted
    X, y = df[cols], df["target"].to_numpy(dtype=float)
    both = clone(model).set_params(by_numbers_learner=True).fit(X, y)
    assert both.by_numbers_regressor_ is not None and model.by_numbers_regressor_ is None
    assert perf_step(both.by_numbers_regressor_).physics is perf_step(both.regressor_).physics
    assert perf_step(both.by_numbers_regressor_).ptx is perf_step(both.regressor_).ptx
    np.testing.assert_array_equal(both.predict(X), model.predict(X))  # every tiny row has a layer profile
    outside = X.iloc[:5].assign(model_key="a CNN nobody measured")
    renamed = outside.assign(model_key=BY_NUMBERS)
    expected = both.by_numbers_view().predict(renamed)
    np.testing.assert_allclose(both.predict(outside), expected, rtol=1e-12)
    assert not np.allclose(expected, model.predict(outside))  # another learner than the named rows'
    mixed = pd.concat([X.iloc[:3], outside], ignore_index=True)
    fast = FastPipeline(both).predict({col: mixed[col].to_numpy() for col in cols})
    np.testing.assert_allclose(fast, both.predict(mixed), rtol=1e-12)
    np.testing.assert_allclose(fast[3:], expected, rtol=1e-12)
