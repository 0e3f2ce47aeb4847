"""Roofline features against hand-computed values (ResNet-50, 4.11 GMACs, 25.56 M params, 11.11 M acts)."""

import numpy as np
import pandas as pd
import pytest

from src.features.engineer import ENGINEERED, PerfFeatures, engineer, make_preprocessor
from tests.train.tiny import GPUS

RTX4090 = GPUS.set_index("gpu").loc["GeForce RTX 4090"]


def row(precision: str, mode: str = "inference", batch: int = 32) -> dict:
    return {"param_count_m": 25.56, "gmacs": 4.11, "activations_m": 11.11, "batch_size": batch, "img_size": 224,
            "precision": precision, "mode": mode, "memory_layout": "nchw", "compile_mode": "eager",
            **RTX4090.to_dict()}


def test_roofline_fp32_by_hand():
    e = engineer(pd.DataFrame([row("fp32")])).iloc[0]
    # FLOPs = 2 * 4.11e9 * 32 = 263.04e9 on 82.58 TFLOPS -> 3.18528 ms
    assert e["t_compute_ms"] == pytest.approx(263.04e9 / 82.58e12 * 1e3)
    # bytes = 25.56e6 * 4 + 2 * 11.11e6 * 32 * 4 = 2946.4e6 on 1008 GB/s -> 2.92302 ms
    assert e["bytes_step"] == pytest.approx(2946.4e6)
    assert e["t_memory_ms"] == pytest.approx(2946.4e6 / 1008e9 * 1e3)
    assert e["t_roofline_ms"] == pytest.approx(max(263.04e9 / 82.58e12, 2946.4e6 / 1008e9) * 1e3)
    assert e["arithmetic_intensity"] == pytest.approx(263.04e9 / 2946.4e6)


def test_half_precision_uses_tensor_core_peak():
    e = engineer(pd.DataFrame([row("amp_fp16")])).iloc[0]
    assert e["peak_tflops"] == pytest.approx(165.2)
    assert e["t_compute_ms"] == pytest.approx(263.04e9 / 165.2e12 * 1e3)
    assert e["bytes_step"] == pytest.approx(2946.4e6 / 2)


def test_training_triples_flops_and_fp64_peak():
    e = engineer(pd.DataFrame([row("fp64", "training")])).iloc[0]
    assert e["flops_step"] == pytest.approx(3 * 263.04e9)
    assert e["peak_tflops"] == pytest.approx(1.29)


def test_perf_features_names_match_columns_and_logs():
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training", 128)])
    pf = PerfFeatures(["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
                      ["precision", "mode"], ["memory_bandwidth_gbs", "tensor_cores", "compute_capability"])
    out = pf.fit_transform(X)
    assert list(out.columns) == list(pf.get_feature_names_out())
    assert out["log_batch_size"].tolist() == pytest.approx([np.log(32), np.log(128)])
    assert out["log1p_tensor_cores"].iloc[0] == pytest.approx(np.log1p(512))
    assert out["compute_capability"].iloc[0] == pytest.approx(8.9)
    assert {f"log_{c}" for c in ENGINEERED} <= set(out.columns)


@pytest.mark.parametrize(("spec_features", "specs"), [
    (True, ["memory_bandwidth_gbs", "tensor_cores", "compute_capability"]),
    (False, []),
    (["compute_capability", "memory_bandwidth_gbs"], ["memory_bandwidth_gbs", "compute_capability"]),
])
def test_spec_features_choose_which_gpu_specs_reach_the_learner(spec_features, specs):
    """The specs left out are no learner columns, but the roofline terms still price the row on that GPU."""
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training", 128)])
    gpu_features = ["memory_bandwidth_gbs", "tensor_cores", "compute_capability"]
    pf = PerfFeatures(["batch_size"], ["precision"], gpu_features, spec_features=spec_features)
    assert pf.learner_specs() == specs
    out = pf.fit_transform(X)
    spec_columns = [c for c in out.columns if c.removeprefix("log_").removeprefix("log1p_") in gpu_features]
    assert spec_columns == [c for c in ["log_memory_bandwidth_gbs", "log1p_tensor_cores", "compute_capability"]
                            if c.removeprefix("log_").removeprefix("log1p_") in specs]
    assert out["log_t_memory_ms"].iloc[0] == pytest.approx(np.log(2946.4e6 / 1008e9 * 1e3))


def test_spec_features_naming_an_unknown_spec_is_an_error():
    X = pd.DataFrame([row("fp32")])
    pf = PerfFeatures(["batch_size"], ["precision"], ["memory_bandwidth_gbs"], spec_features=["tdp_w"])
    with pytest.raises(ValueError, match=r"spec_features names \['tdp_w'\].*gpu_features"):
        pf.fit_transform(X)
    with pytest.raises(ValueError, match="spec_features must be true, false or a list"):
        make_preprocessor({"numeric_inputs": ["batch_size"], "categorical_inputs": [], "gpu_features": [],
                           "spec_features": "yes"}, [], scale=False)


def test_preprocessor_one_hot_and_unknown_category():
    feat = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
            "categorical_inputs": ["precision", "mode"], "gpu_features": ["memory_bandwidth_gbs", "fp32_tflops",
            "tensor_fp16_tflops", "fp64_tflops", "sm_count"], "engineered": True}
    pre = make_preprocessor(feat, [], scale=True)
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training")])
    Z = pre.fit_transform(X)
    names = list(pre.get_feature_names_out())
    assert "precision_fp32" in names and "mode_training" in names
    assert Z.shape == (2, len(names))


@pytest.mark.parametrize(
    ("gpu", "datasheet_tops"),
    [("Tesla T4", 130.0), ("A100 PCIe 40 GB", 624.0), ("GeForce RTX 4090", 660.6), ("GeForce GTX 1080", 35.5),
     ("Tesla V100 PCIe 16 GB", 56.0)],
)
def test_int8_peak_matches_datasheets(gpu, datasheet_tops):
    """Dense int8 TOP/s: Turing+ tensor cores at 2x fp16, dp4a (4x fp32) on Pascal cc 6.1 and on Volta."""
    from src.features.engineer import BYTES_PER_ELEMENT, peak_tflops
    from src.ingest.gpus import gpu_features

    specs = gpu_features([gpu])
    peak = float(peak_tflops(pd.Series(["int8"], index=specs.index), specs).iloc[0])
    assert peak == pytest.approx(datasheet_tops, rel=0.05)
    assert BYTES_PER_ELEMENT["int8"] == 1.0


# ---------------------------------------------------------------- the NumPy rewrite against the pandas original
# Frozen copy of the pandas implementation before issue 13 (engineer, peak_tflops, int8_tops and
# PerfFeatures.release / transform), kept to prove the NumPy rewrite computes the same feature matrix.
def _old_int8_tops(gpu: pd.DataFrame) -> pd.Series:
    cc = gpu["compute_capability"].astype(float)
    fp32 = gpu["fp32_tflops"].astype(float)
    dp4a = (cc.round(1) == 6.1) | ((cc >= 7.0) & (cc < 7.5))
    return pd.Series(np.where(cc >= 7.5, 2.0 * gpu["tensor_fp16_tflops"].astype(float),
                              np.where(dp4a, 4.0 * fp32, fp32)), index=gpu.index)


def _old_peak_tflops(precision: pd.Series, gpu: pd.DataFrame) -> pd.Series:
    from src.features.engineer import HALF_PRECISIONS

    peak = gpu["fp32_tflops"].astype(float).copy()
    half = precision.isin(HALF_PRECISIONS)
    peak[half] = gpu.loc[half, "tensor_fp16_tflops"].astype(float)
    fp64 = precision.eq("fp64")
    peak[fp64] = gpu.loc[fp64, "fp64_tflops"].astype(float)
    int8 = precision.eq("int8")
    if int8.any():
        peak[int8] = _old_int8_tops(gpu.loc[int8])
    return peak


def _old_engineer(X: pd.DataFrame) -> pd.DataFrame:
    from src.features.engineer import BYTES_PER_ELEMENT, EPS

    training = X["mode"].astype(str).eq("training").to_numpy()
    bpe = X["precision"].astype(str).map(BYTES_PER_ELEMENT).fillna(4.0).to_numpy()
    batch = X["batch_size"].astype(float).to_numpy()
    out = pd.DataFrame(index=X.index)
    out["flops_per_sample"] = 2.0 * X["gmacs"].astype(float).to_numpy() * 1e9 * np.where(training, 3.0, 1.0)
    out["flops_step"] = out["flops_per_sample"] * batch
    out["weight_bytes"] = X["param_count_m"].astype(float).to_numpy() * 1e6 * bpe * np.where(training, 4.0, 1.0)
    out["activation_bytes"] = (
        2.0 * X["activations_m"].astype(float).to_numpy() * 1e6 * batch * bpe * np.where(training, 2.0, 1.0)
    )
    out["bytes_step"] = out["weight_bytes"] + out["activation_bytes"]
    out["arithmetic_intensity"] = out["flops_step"] / out["bytes_step"].clip(lower=EPS)
    out["peak_tflops"] = _old_peak_tflops(X["precision"].astype(str), X).to_numpy()
    bw = X["memory_bandwidth_gbs"].astype(float).to_numpy()
    out["t_compute_ms"] = out["flops_step"] / (out["peak_tflops"].clip(lower=EPS) * 1e12) * 1e3
    out["t_memory_ms"] = out["bytes_step"] / np.clip(bw * 1e9, EPS, None) * 1e3
    out["t_roofline_ms"] = np.maximum(out["t_compute_ms"], out["t_memory_ms"])
    ridge = out["peak_tflops"] * 1e12 / np.clip(bw * 1e9, EPS, None)
    out["intensity_over_ridge"] = out["arithmetic_intensity"] / ridge.clip(lower=EPS)
    out["samples_per_sm"] = batch / X["sm_count"].astype(float).clip(lower=1.0).to_numpy()
    out["pixels"] = X["img_size"].astype(float).to_numpy() ** 2
    return out


def _old_release(pf: PerfFeatures, X: pd.DataFrame) -> pd.DataFrame:
    from src.features.engineer import TF32_CONV_SINCE, parse_release

    fw = X["framework"].astype(str).to_numpy()
    rel = X[pf.release_column].map(parse_release).to_numpy(dtype=float, copy=True)
    unknown = np.isnan(rel)
    if unknown.any():
        rel[unknown] = np.array([pf.release_by_framework_.get(f, pf.release_median_) for f in fw[unknown]])
    since = np.array([TF32_CONV_SINCE.get(str(f), np.inf) for f in fw], dtype=float)
    return pd.DataFrame({"framework_release": rel, "tf32_conv_default": (rel >= since).astype(float)}, index=X.index)


def _old_transform(pf: PerfFeatures, X: pd.DataFrame) -> pd.DataFrame:
    from src.features.engineer import EPS, LOG1P_COLUMNS
    from src.features.layer_physics import PhysicsConstants, cached_price

    specs = pf.learner_specs()
    num = X[list(pf.numeric_inputs) + specs + list(pf.ptx_features)].astype(float)
    if pf.engineered:
        num = pd.concat([num, _old_engineer(X)], axis=1)
    if pf.release_column:
        num = pd.concat([num, _old_release(pf, X)], axis=1)
    if pf.physics is not None:
        tf32 = _old_release(pf, X)["tf32_conv_default"].to_numpy() > 0 if pf.release_column else None
        num = pd.concat([num, cached_price(X, pf.physics, PhysicsConstants.from_config(pf.physics_constants),
                                           tf32)], axis=1)
    no_log = pf._no_log()
    out = pd.DataFrame(index=X.index)
    for col in num.columns:
        v = num[col].to_numpy(dtype=float)
        if col in no_log:
            out[col] = v
        elif col in LOG1P_COLUMNS or col in set(pf.ptx_features):
            out[f"log1p_{col}"] = np.log1p(np.clip(v, 0.0, None))
        else:
            out[f"log_{col}"] = np.log(np.clip(v, EPS, None))
    for col in pf.encoded_categoricals():
        out[col] = X[col].astype(str).to_numpy()
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from tests.serve.realdata import real_table

    return real_table(str(tmp_path_factory.mktemp("real")))


def _perf(c: dict, index) -> PerfFeatures:
    f = c["features"]
    return PerfFeatures(list(f["numeric_inputs"]), list(f["categorical_inputs"]), list(f["gpu_features"]), [],
                        engineered=True, release_column=f.get("release_column"), physics=index,
                        physics_constants=c.get("physics"))


def test_numpy_features_equal_the_pandas_original_on_the_real_table(real):
    """Every feature of every real row, bit for bit: raw logs, GPU specs, roofline terms, releases, physics."""
    from src.features.engineer import input_columns

    df, index, c = real
    X = df[input_columns(c["features"], [])]
    pf = _perf(c, index).fit(X)
    new = pf.transform(X)
    pd.testing.assert_frame_equal(new, _old_transform(pf, X), check_exact=True)
    assert list(new.columns) == list(pf.get_feature_names_out())
    pd.testing.assert_frame_equal(engineer(X), _old_engineer(X), check_exact=True)
    # a shuffled slice with its own index, and single rows (the served case)
    part = X.sample(300, random_state=1)
    pd.testing.assert_frame_equal(pf.transform(part), _old_transform(pf, part), check_exact=True)
    for i in range(0, 300, 60):
        pd.testing.assert_frame_equal(pf.transform(part.iloc[[i]]), _old_transform(pf, part.iloc[[i]]),
                                      check_exact=True)


def test_transform_arrays_takes_plain_arrays(real):
    """The served path hands over a dict of NumPy arrays (no DataFrame): same matrix as transform."""
    from src.features.engineer import input_columns

    df, index, c = real
    X = df[input_columns(c["features"], [])].sample(200, random_state=2)
    pf = _perf(c, index).fit(X)
    num, cats = pf.transform_arrays({col: X[col].to_numpy() for col in X.columns})
    frame = pf.transform(X)
    assert np.array_equal(num, frame.iloc[:, :num.shape[1]].to_numpy(dtype=float))
    assert all(np.array_equal(cats[k], frame[k].to_numpy(dtype=object)) for k in cats)


def test_old_models_pickled_before_the_rewrite_still_transform():
    """A PerfFeatures pickled by the pandas version has the same attributes: it loads and transforms."""
    import pickle

    pf = PerfFeatures(["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
                      ["precision", "mode", "framework"], ["memory_bandwidth_gbs", "tensor_cores",
                                                           "compute_capability"], release_column="framework_version")
    X = pd.DataFrame([row("fp32"), row("int8", "training", 128)]).assign(framework=["pytorch", "tensorflow"],
                                                                         framework_version=["2.1", "abc"])
    pf.fit(X)
    state = {k: v for k, v in pickle.loads(pickle.dumps(pf)).__dict__.items()}
    assert set(state) == {"numeric_inputs", "categorical_inputs", "gpu_features", "ptx_features", "engineered",
                          "release_column", "physics", "physics_constants", "spec_features", "ptx", "n_features_in_",
                          "release_by_framework_", "release_median_", "release_number", "cnn_offset",
                          "autocast_flag"}
    pd.testing.assert_frame_equal(pf.transform(X), _old_transform(pf, X), check_exact=True)
    old = pickle.loads(pickle.dumps(pf))
    del old.__dict__["release_number"]  # pickled before the option: the release stays a number
    assert old.release_feature_names() == ["framework_release", "tf32_conv_default"]
    pd.testing.assert_frame_equal(old.transform(X), pf.transform(X), check_exact=True)
    del old.__dict__["cnn_offset"]  # pickled before the CNN offset: no offset features
    assert old.numeric_names() == pf.numeric_names()
    pd.testing.assert_frame_equal(old.transform(X), pf.transform(X), check_exact=True)
    del old.__dict__["autocast_flag"]  # pickled before the autocast flag: precision as named
    assert old.numeric_names() == pf.numeric_names()
    pd.testing.assert_frame_equal(old.transform(X), pf.transform(X), check_exact=True)


def test_release_one_hot_keeps_tf32_and_encodes_the_version():
    """release_number=False: the version is one-hot (an unseen version is not placed on a numeric axis), while the
    release still sets tf32_conv_default."""
    pf = PerfFeatures(["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
                      ["precision", "mode", "framework", "framework_version"], ["memory_bandwidth_gbs"],
                      release_column="framework_version", release_number=False)
    X = pd.DataFrame([row("fp32"), row("fp32", "training", 128)]).assign(framework=["pytorch", "pytorch"],
                                                                         framework_version=["1.6", "2.1"])
    out = pf.fit(X).transform(X)
    assert pf.release_feature_names() == ["tf32_conv_default"]
    assert "framework_release" not in out.columns and "framework_version" in pf.encoded_categoricals()
    assert out["tf32_conv_default"].tolist() == [0.0, 1.0]  # PyTorch enables TF32 convolutions from 1.7
    assert out["framework_version"].tolist() == ["1.6", "2.1"]


def test_autocast_flag_names_the_compute_precision_and_flags_mixed():
    """autocast_flag: amp_fp16 reaches the one-hot as fp16 (and amp_bf16 as bf16) with a numeric `autocast` flag,
    so pure and mixed half precision share a category; off, the precision passes through as named."""
    cats = ["precision", "mode"]
    X = pd.DataFrame([row(p) for p in ("fp32", "amp_fp16", "fp16", "amp_bf16")])
    on = PerfFeatures(["batch_size"], cats, ["memory_bandwidth_gbs"], autocast_flag=True).fit(X)
    out = on.transform(X)
    assert out["precision"].tolist() == ["fp32", "fp16", "fp16", "bf16"]
    assert out["autocast"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert list(on.get_feature_names_out()) == list(out.columns) and "autocast" in on.numeric_names()
    num, arrays = on.transform_arrays(X)  # the served fast path reads the same arrays
    assert arrays["precision"].tolist() == out["precision"].tolist()
    off = PerfFeatures(["batch_size"], cats, ["memory_bandwidth_gbs"]).fit(X).transform(X)
    assert off["precision"].tolist() == X["precision"].tolist() and "autocast" not in off.columns
    assert off.drop(columns="precision").equals(out.drop(columns=["precision", "autocast"]))


@pytest.mark.parametrize("values", [
    ["fp32", "amp_fp16", "fp32", "int8"],
    np.array(["eager", "tensorrt", "eager"]),
    np.array([224, 288, 224, 224]),
    [1, 1.0, "1", True],
    ["a", None, "b", None],
    [np.nan, "x", np.nan],
    [],
    [f"gpu{i % 40}" for i in range(100)],
])
def test_factorize_is_pandas_factorize(values):
    from src.features.engineer import factorize

    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    codes, uniq = factorize(values)
    want_codes, want_uniq = pd.factorize(arr, use_na_sentinel=False)
    np.testing.assert_array_equal(codes, want_codes)
    assert [str(u) for u in uniq] == [str(u) for u in want_uniq]


def test_pandas_output_keeps_the_rows_index():
    """set_output(pandas), as XGBoost's monotone constraints need: a training part's rows keep their labels
    (not 0..n-1), so the one-hot columns line up with the numeric ones of the same rows."""
    feat = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
            "categorical_inputs": ["precision", "mode"], "gpu_features": ["memory_bandwidth_gbs", "fp32_tflops",
            "tensor_fp16_tflops", "fp64_tflops", "sm_count"], "engineered": True}
    X = pd.DataFrame([row("fp32"), row("amp_fp16", "training"), row("fp32", batch=64)], index=[7, 40, 41])
    plain = make_preprocessor(feat, [], scale=False).fit_transform(X)
    pre = make_preprocessor(feat, [], scale=False).set_output(transform="pandas")
    Z = pre.fit_transform(X)
    assert list(Z.index) == [7, 40, 41] and Z.shape == plain.shape
    np.testing.assert_array_equal(Z.to_numpy(dtype=float), plain)
    assert list(pre.transform(X.iloc[[2, 0]]).index) == [41, 7]


def test_latency_target_with_monotone_constraints_fits_a_training_part():
    """target=latency, the direct target issue 12 keeps as an option: XGBoost with its monotone constraints fits
    and predicts rows picked out of a larger table (a fold's training part), as the pipeline hands them over."""
    from omegaconf import OmegaConf

    from src.config import compose
    from src.train.estimators import build_model

    c = OmegaConf.to_container(compose(["model=xgb", "target=latency"]), resolve=True)
    feat = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
            "categorical_inputs": ["precision", "mode"], "gpu_features": ["memory_bandwidth_gbs", "fp32_tflops",
            "tensor_fp16_tflops", "fp64_tflops", "sm_count"], "engineered": True}
    rows = [row(p, m, b) for p in ("fp32", "amp_fp16") for m in ("inference", "training") for b in (1, 8, 64, 256)]
    X = pd.DataFrame(rows * 3)
    y = X["batch_size"].to_numpy(dtype=float) * np.where(X["precision"] == "fp32", 0.4, 0.15) + 1.0
    part = np.arange(1, len(X), 2)  # every other row: labels 1, 3, 5, ...
    model = build_model(c["model"], feat, [], {"n_estimators": 20, "max_depth": 3}, target_cfg=c["target"])
    model.fit(X.iloc[part], y[part])
    assert model.regressor_.named_steps["model"].get_params()["monotone_constraints"]["log_flops_step"] == 1
    pred = model.predict(X.iloc[::2])
    assert np.isfinite(pred).all() and (pred > 0).all()


def test_one_hot_tables_equal_sklearns_own_transform(real):
    """StringOneHotEncoder reads each value's block from tables of its own output: the same matrix as sklearn's
    OneHotEncoder.transform, bit for bit, on the real table's categorical columns, with infrequent categories
    grouped, values it never saw, missing values and numbers among the strings, and under pandas output."""
    from sklearn.preprocessing import OneHotEncoder

    from src.features.engineer import StringOneHotEncoder, _unicode

    df, _, c = real
    cols = [col for col in c["features"]["categorical_inputs"] if col in df.columns] + ["gpu"]
    train = df[cols].sample(3000, random_state=3)
    enc = StringOneHotEncoder(handle_unknown="infrequent_if_exist", sparse_output=False, min_frequency=20).fit(train)
    assert enc.tables_ is not None and any(i is not None for i in enc.infrequent_categories_)
    test = df[cols].sample(500, random_state=4).astype(object).reset_index(drop=True)
    test.iloc[0, 0], test.iloc[1, 0], test.iloc[2, 1], test.iloc[3, 1] = "never seen", None, float("nan"), 3.5
    want = OneHotEncoder.transform(enc, _unicode(test))
    got = enc.transform(test)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    framed = enc.set_output(transform="pandas").transform(test.set_axis(range(100, 600)))
    assert list(framed.index) == list(range(100, 600)) and list(framed.columns) == list(enc.get_feature_names_out())
    assert np.array_equal(framed.to_numpy(), want)
    refusing = StringOneHotEncoder(handle_unknown="error", sparse_output=False).fit(train)
    assert refusing.tables_ is None
    with pytest.raises(ValueError, match="unknown categor"):
        refusing.transform(test)
