"""Performance-engineering features, computed inside the sklearn Pipeline from human-level inputs.

Why inside the Pipeline: the logged model then takes the raw columns a user knows (GMACs, parameters, batch size,
precision, GPU specs) and the same code computes the features in training and in serving.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

# Bytes per tensor element by precision. Mixed precision (amp_*) computes and stores activations in 16 bit.
BYTES_PER_ELEMENT = {"fp32": 4.0, "fp64": 8.0, "fp16": 2.0, "bf16": 2.0, "amp_fp16": 2.0, "amp_bf16": 2.0,
                     "int8": 1.0}
HALF_PRECISIONS = {"fp16", "bf16", "amp_fp16", "amp_bf16"}
# Counts that may be zero get log1p instead of log.
LOG1P_COLUMNS = {"tensor_cores"}
NO_LOG_COLUMNS = {"compute_capability", "framework_release", "tf32_conv_default"}
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
# What a user can say about the software, derived from (framework, framework_version) instead of a one-hot of raw
# version strings (git hashes included), which a new deployment cannot set and which marks measurement twins.
RELEASE_FEATURES = ["framework_release", "tf32_conv_default"]
# First release whose convolutions use TF32 tensor cores for fp32 by default on Ampere and newer (cuDNN):
# PyTorch 1.7 (torch.backends.cudnn.allow_tf32 = True), TensorFlow 2.4. Other frameworks: never by default.
TF32_CONV_SINCE = {"pytorch": 1.07, "tensorflow": 2.04}
_RELEASE_RE = re.compile(r"^\s*v?(\d+)\.(\d+)")


def parse_release(version) -> float:
    """'2.9.1' -> 2.09 (major + minor / 100, so 2.10 > 2.9); git hashes, '', 'unknown' -> NaN."""
    m = _RELEASE_RE.match(str(version)) if version is not None else None
    return float(m.group(1)) + float(m.group(2)) / 100.0 if m else float("nan")


def release_features(framework: np.ndarray, release: np.ndarray) -> dict[str, np.ndarray]:
    """Numeric release and whether fp32 convolutions default to TF32, vectorised over rows."""
    since = np.array([TF32_CONV_SINCE.get(str(f), np.inf) for f in framework], dtype=float)
    return {"framework_release": release, "tf32_conv_default": (release >= since).astype(float)}


def int8_tops(gpu: pd.DataFrame) -> pd.Series:
    """Dense int8 peak (TOP/s): tensor cores from Turing (cc 7.5) at 2x their fp16 rate; dp4a (4 int8 MACs per
    fp32 lane) on cc 6.1 and on Volta, whose tensor cores have no int8 mode; the fp32 rate on older GPUs."""
    cc = gpu["compute_capability"].astype(float)
    fp32 = gpu["fp32_tflops"].astype(float)
    dp4a = (cc.round(1) == 6.1) | ((cc >= 7.0) & (cc < 7.5))
    return pd.Series(np.where(cc >= 7.5, 2.0 * gpu["tensor_fp16_tflops"].astype(float),
                              np.where(dp4a, 4.0 * fp32, fp32)), index=gpu.index)


def peak_tflops(precision: pd.Series, gpu: pd.DataFrame) -> pd.Series:
    """Precision-appropriate peak: tensor-core fp16 for half/mixed precision, int8 rate for int8, fp32 or fp64
    CUDA-core rate else."""
    peak = gpu["fp32_tflops"].astype(float).copy()
    half = precision.isin(HALF_PRECISIONS)
    peak[half] = gpu.loc[half, "tensor_fp16_tflops"].astype(float)
    fp64 = precision.eq("fp64")
    peak[fp64] = gpu.loc[fp64, "fp64_tflops"].astype(float)
    int8 = precision.eq("int8")
    if int8.any():
        peak[int8] = int8_tops(gpu.loc[int8])
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
                 engineered: bool = True, release_column: str | None = None, physics=None,
                 physics_constants: dict | None = None, spec_features: bool = True):
        self.numeric_inputs = numeric_inputs
        self.categorical_inputs = categorical_inputs
        self.gpu_features = gpu_features
        self.ptx_features = ptx_features
        self.engineered = engineered
        self.release_column = release_column
        # A `src.features.layer_physics.ProfileIndex`: adds the per-kernel physics estimate and its aggregates.
        self.physics = physics
        self.physics_constants = physics_constants
        # False: GPU specs feed the estimates only, not the learner (a tree cannot extrapolate raw specs to a
        # GPU faster than any it saw; scale-free shares and ratios transfer).
        self.spec_features = spec_features

    def fit(self, X: pd.DataFrame, y=None):
        self.n_features_in_ = X.shape[1]
        if self.release_column:
            # An unknown release (git hash, empty) gets its framework's median training release, else the median.
            rel = X[self.release_column].map(parse_release)
            fw = X["framework"].astype(str)
            self.release_by_framework_ = {str(k): float(v) for k, v in rel.groupby(fw).median().dropna().items()}
            self.release_median_ = float(np.nanmedian(rel)) if rel.notna().any() else 0.0
        return self

    def encoded_categoricals(self) -> list[str]:
        """Categorical inputs one-hot encoded (the release column is turned into numbers instead)."""
        return [c for c in self.categorical_inputs if c != self.release_column]

    def numeric_names(self) -> list[str]:
        specs = list(self.gpu_features) if self.spec_features else []
        names = list(self.numeric_inputs) + specs + list(self.ptx_features)
        names += ENGINEERED if self.engineered else []
        names += RELEASE_FEATURES if self.release_column else []
        return names + (self._physics_names() if self.physics is not None else [])

    @staticmethod
    def _physics_names() -> list[str]:
        from .layer_physics import PHYSICS_FEATURES

        return list(PHYSICS_FEATURES)

    def _no_log(self) -> set[str]:
        from .layer_physics import SHARE_FEATURES

        return NO_LOG_COLUMNS | (set(SHARE_FEATURES) if self.physics is not None else set())

    def physics_frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """The per-kernel physics estimate of every row (src/features/layer_physics.py), memoised."""
        from .layer_physics import PhysicsConstants, cached_price

        if self.physics is None:
            raise ValueError("PerfFeatures has no kernel profiles (physics=None)")
        tf32 = None
        if self.release_column:
            tf32 = self.release(X)["tf32_conv_default"].to_numpy() > 0
        return cached_price(X, self.physics, PhysicsConstants.from_config(self.physics_constants), tf32)

    def release(self, X: pd.DataFrame) -> pd.DataFrame:
        fw = X["framework"].astype(str).to_numpy()
        rel = X[self.release_column].map(parse_release).to_numpy(dtype=float, copy=True)
        unknown = np.isnan(rel)
        if unknown.any():
            fill = np.array([self.release_by_framework_.get(f, self.release_median_) for f in fw[unknown]])
            rel[unknown] = fill
        return pd.DataFrame(release_features(fw, rel), index=X.index)

    def transform(self, X: pd.DataFrame) -> pd.DataFrame:
        specs = list(self.gpu_features) if self.spec_features else []
        raw_cols = list(self.numeric_inputs) + specs + list(self.ptx_features)
        num = X[raw_cols].astype(float)
        if self.engineered:
            num = pd.concat([num, engineer(X)], axis=1)
        if self.release_column:
            num = pd.concat([num, self.release(X)], axis=1)
        if self.physics is not None:
            num = pd.concat([num, self.physics_frame(X)], axis=1)
        no_log = self._no_log()
        out = pd.DataFrame(index=X.index)
        for col in num.columns:
            v = num[col].to_numpy(dtype=float)
            if col in no_log:
                out[col] = v
            elif col in LOG1P_COLUMNS or col in set(self.ptx_features):
                out[f"log1p_{col}"] = np.log1p(np.clip(v, 0.0, None))
            else:
                out[f"log_{col}"] = np.log(np.clip(v, EPS, None))
        for col in self.encoded_categoricals():
            out[col] = X[col].astype(str).to_numpy()
        return out

    def get_feature_names_out(self, input_features=None):
        names = []
        no_log = self._no_log()
        for col in self.numeric_names():
            if col in no_log:
                names.append(col)
            elif col in LOG1P_COLUMNS or col in set(self.ptx_features):
                names.append(f"log1p_{col}")
            else:
                names.append(f"log_{col}")
        return np.array(names + self.encoded_categoricals(), dtype=object)


def make_preprocessor(feat_cfg: dict, ptx_features: list[str], scale: bool, physics=None,
                      physics_constants: dict | None = None) -> Pipeline:
    """PerfFeatures -> (scaled) numerics + one-hot categoricals, with readable output feature names.

    `physics` (a ProfileIndex) is required when the feature set says `physics: true`."""
    if feat_cfg.get("physics") and physics is None:
        raise ValueError(f"features={feat_cfg.get('name')} uses the physics estimate but no kernel profiles "
                         "were given (data.kernel_profiles)")
    perf = PerfFeatures(
        numeric_inputs=list(feat_cfg["numeric_inputs"]),
        categorical_inputs=list(feat_cfg["categorical_inputs"]),
        gpu_features=list(feat_cfg["gpu_features"]),
        ptx_features=list(ptx_features),
        engineered=bool(feat_cfg.get("engineered", True)),
        release_column=feat_cfg.get("release_column"),
        physics=physics if feat_cfg.get("physics") else None,
        physics_constants=physics_constants,
        spec_features=bool(feat_cfg.get("spec_features", True)),
    )
    numeric = [n for n in perf.get_feature_names_out() if n not in set(perf.categorical_inputs)]
    encode = ColumnTransformer(
        [
            ("num", StandardScaler() if scale else "passthrough", numeric),
            ("cat", OneHotEncoder(handle_unknown="infrequent_if_exist", sparse_output=False,
                                  min_frequency=feat_cfg.get("min_category_rows")), perf.encoded_categoricals()),
        ],
        verbose_feature_names_out=False,
    )
    return Pipeline([("perf", perf), ("encode", encode)])


# Extra raw columns of the physics estimate: which CNN (its kernel profile) and which GPU (GeForce rate rule).
PHYSICS_INPUTS = ["model_key", "gpu"]


def input_columns(feat_cfg: dict, ptx_features: list[str]) -> list[str]:
    """Raw columns the Pipeline (and so the logged sklearn model) expects, in order."""
    return (
        list(feat_cfg["numeric_inputs"])
        + list(feat_cfg["categorical_inputs"])
        + list(feat_cfg["gpu_features"])
        + list(ptx_features)
        + (PHYSICS_INPUTS if feat_cfg.get("physics") else [])
    )
