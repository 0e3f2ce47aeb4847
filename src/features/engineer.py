"""Performance-engineering features, computed inside the sklearn Pipeline from human-level inputs.

Why inside the Pipeline: the logged model then takes the raw columns a user knows (GMACs, parameters, batch size,
precision, GPU specs) and the same code computes the features in training and in serving.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

# Bytes per tensor element by precision. Mixed precision (amp_*) computes and stores activations in 16 bit.
BYTES_PER_ELEMENT = {"fp32": 4.0, "fp64": 8.0, "fp16": 2.0, "bf16": 2.0, "amp_fp16": 2.0, "amp_bf16": 2.0}
HALF_PRECISIONS = {"fp16", "bf16", "amp_fp16", "amp_bf16"}
# Counts that may be zero get log1p instead of log.
LOG1P_COLUMNS = {"tensor_cores"}
NO_LOG_COLUMNS = {"compute_capability"}
EPS = 1e-12

ENGINEERED = [
    "flops_per_sample",
    "flops_step",
    "weight_bytes",
    "activation_bytes",
    "bytes_step",
    "arithmetic_intensity",
    "peak_tflops",
    "t_compute_ms",
    "t_memory_ms",
    "t_roofline_ms",
    "intensity_over_ridge",
    "samples_per_sm",
    "pixels",
]


def peak_tflops(precision: pd.Series, gpu: pd.DataFrame) -> pd.Series:
    """Precision-appropriate peak: tensor-core fp16 for half/mixed precision, fp32 or fp64 CUDA-core rate else."""
    peak = gpu["fp32_tflops"].astype(float).copy()
    half = precision.isin(HALF_PRECISIONS)
    peak[half] = gpu.loc[half, "tensor_fp16_tflops"].astype(float)
    fp64 = precision.eq("fp64")
    peak[fp64] = gpu.loc[fp64, "fp64_tflops"].astype(float)
    return peak


def engineer(X: pd.DataFrame) -> pd.DataFrame:
    """Roofline-style work/traffic/time estimates per step (one batch) on the target GPU.

    FLOPs = 2 * GMACs * batch (x3 for training: forward + two backward GEMMs). Bytes = weights (x4 in training:
    read, gradient, optimizer state) + activations written and read (x2 more in training). Roofline time =
    max(FLOPs / peak, bytes / bandwidth).
    """
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
    out["peak_tflops"] = peak_tflops(X["precision"].astype(str), X).to_numpy()
    bw = X["memory_bandwidth_gbs"].astype(float).to_numpy()
    out["t_compute_ms"] = out["flops_step"] / (out["peak_tflops"].clip(lower=EPS) * 1e12) * 1e3
    out["t_memory_ms"] = out["bytes_step"] / np.clip(bw * 1e9, EPS, None) * 1e3
    out["t_roofline_ms"] = np.maximum(out["t_compute_ms"], out["t_memory_ms"])
    ridge = out["peak_tflops"] * 1e12 / np.clip(bw * 1e9, EPS, None)
    out["intensity_over_ridge"] = out["arithmetic_intensity"] / ridge.clip(lower=EPS)
    out["samples_per_sm"] = batch / X["sm_count"].astype(float).clip(lower=1.0).to_numpy()
    out["pixels"] = X["img_size"].astype(float).to_numpy() ** 2
    return out


class PerfFeatures(BaseEstimator, TransformerMixin):
    """Turns raw inputs into model features: raw numerics, GPU specs, PTX counts, engineered roofline terms.

    Positive magnitudes are log-transformed (the target is log latency, so effects become additive); zero-able
    counts get log1p. Categorical columns pass through unchanged for the encoder.
    """

    def __init__(self, numeric_inputs=(), categorical_inputs=(), gpu_features=(), ptx_features=(),
                 engineered: bool = True):
        self.numeric_inputs = numeric_inputs
        self.categorical_inputs = categorical_inputs
        self.gpu_features = gpu_features
        self.ptx_features = ptx_features
        self.engineered = engineered

    def fit(self, X: pd.DataFrame, y=None):
        self.n_features_in_ = X.shape[1]
        return self

    def numeric_names(self) -> list[str]:
        names = list(self.numeric_inputs) + list(self.gpu_features) + list(self.ptx_features)
        return names + (ENGINEERED if self.engineered else [])

    def transform(self, X: pd.DataFrame) -> pd.DataFrame:
        raw_cols = list(self.numeric_inputs) + list(self.gpu_features) + list(self.ptx_features)
        num = X[raw_cols].astype(float)
        if self.engineered:
            num = pd.concat([num, engineer(X)], axis=1)
        out = pd.DataFrame(index=X.index)
        for col in num.columns:
            v = num[col].to_numpy(dtype=float)
            if col in NO_LOG_COLUMNS:
                out[col] = v
            elif col in LOG1P_COLUMNS or col in set(self.ptx_features):
                out[f"log1p_{col}"] = np.log1p(np.clip(v, 0.0, None))
            else:
                out[f"log_{col}"] = np.log(np.clip(v, EPS, None))
        for col in self.categorical_inputs:
            out[col] = X[col].astype(str).to_numpy()
        return out

    def get_feature_names_out(self, input_features=None):
        names = []
        for col in self.numeric_names():
            if col in NO_LOG_COLUMNS:
                names.append(col)
            elif col in LOG1P_COLUMNS or col in set(self.ptx_features):
                names.append(f"log1p_{col}")
            else:
                names.append(f"log_{col}")
        return np.array(names + list(self.categorical_inputs), dtype=object)


def make_preprocessor(feat_cfg: dict, ptx_features: list[str], scale: bool) -> Pipeline:
    """PerfFeatures -> (scaled) numerics + one-hot categoricals, with readable output feature names."""
    perf = PerfFeatures(
        numeric_inputs=list(feat_cfg["numeric_inputs"]),
        categorical_inputs=list(feat_cfg["categorical_inputs"]),
        gpu_features=list(feat_cfg["gpu_features"]),
        ptx_features=list(ptx_features),
        engineered=bool(feat_cfg.get("engineered", True)),
    )
    numeric = [n for n in perf.get_feature_names_out() if n not in set(perf.categorical_inputs)]
    encode = ColumnTransformer(
        [
            ("num", StandardScaler() if scale else "passthrough", numeric),
            ("cat", OneHotEncoder(handle_unknown="infrequent_if_exist", sparse_output=False,
                                  min_frequency=feat_cfg.get("min_category_rows")), list(perf.categorical_inputs)),
        ],
        verbose_feature_names_out=False,
    )
    return Pipeline([("perf", perf), ("encode", encode)])


def input_columns(feat_cfg: dict, ptx_features: list[str]) -> list[str]:
    """Raw columns the Pipeline (and so the logged sklearn model) expects, in order."""
    return (
        list(feat_cfg["numeric_inputs"])
        + list(feat_cfg["categorical_inputs"])
        + list(feat_cfg["gpu_features"])
        + list(ptx_features)
    )
