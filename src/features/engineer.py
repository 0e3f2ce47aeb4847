"""Performance-engineering features, computed inside the sklearn Pipeline from human-level inputs.

Why inside the Pipeline: the logged model then takes the raw columns a user knows (GMACs, parameters, batch size,
precision, GPU specs) and the same code computes the features in training and in serving.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

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
NO_LOG_COLUMNS = {"compute_capability", "framework_release", "tf32_conv_default", "ptx_counted", "autocast"}
# Mixed precision by the precision it computes in: with `PerfFeatures.autocast_flag` the learner sees amp_fp16 as
# fp16 plus an `autocast` flag, so pure and mixed half precision share what they have in common (the same tensor
# cores, the same element size) and differ only where the flag earns a split.
AUTOCAST_PRECISIONS = {"amp_fp16": "fp16", "amp_bf16": "bf16"}
# 1 where the CNN's PTX counts were looked up, 0 where imputed from GMACs (a CNN the zoo never counted).
PTX_COUNTED = "ptx_counted"
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


# ---------------------------------------------------------------- column helpers (NumPy, one pass per column)
# Why: a served request is one row; building pandas objects column by column cost ~70 ms per call, so features
# are computed on NumPy arrays and a frame is built once at the end. Inputs are a DataFrame or any mapping of
# column name -> array (the served fast path hands over arrays).
Columns = Mapping[str, Any]


def _floats(X: Columns, col: str) -> np.ndarray:
    return np.asarray(X[col], dtype=float)


def _strings(values: Any) -> np.ndarray:
    """Object array of str, like `Series.astype(str)` (non-strings are formatted; missing values stay missing)."""
    arr = np.asarray(values, dtype=object)
    if arr.size and pd.api.types.infer_dtype(arr, skipna=True) != "string":
        arr = np.array([v if isinstance(v, str) or v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
                        for v in arr.tolist()], dtype=object)
    return arr


# Up to this many values, `factorize` runs a dict pass instead of pandas' hash table (~20 us per call whatever the
# size: a served single row makes about two dozen such calls).
SMALL_FACTORIZE = 32


def factorize(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """`pd.factorize(values, use_na_sentinel=False)`: (codes, distinct values in order of first appearance). A few
    values without missing ones go through a dict; anything else (or any None / NaN) through pandas."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if arr.ndim == 1 and arr.size <= SMALL_FACTORIZE:
        seen: dict = {}
        items = arr.tolist()
        if not any(v is None or (isinstance(v, float) and v != v) for v in items):
            codes = np.array([seen.setdefault(v, len(seen)) for v in items], dtype=np.intp)
            uniq = np.empty(len(seen), dtype=arr.dtype)
            uniq[:] = list(seen)
            return codes, uniq
    return pd.factorize(arr, use_na_sentinel=False)


def lookup(values: Any, fn: Callable[[Any], float]) -> np.ndarray:
    """fn applied to each distinct value once (factorised), as float per row: dictionary maps and regex parses
    over 10,000 rows cost the number of distinct values, not of rows."""
    codes, uniq = factorize(np.asarray(values, dtype=object))
    table = np.array([fn(u) for u in uniq], dtype=float)
    return table[codes] if len(uniq) else np.zeros(0)


def bytes_per_element(precision: Any) -> np.ndarray:
    return lookup(precision, lambda p: BYTES_PER_ELEMENT.get(p, 4.0) if isinstance(p, str) else 4.0)


def int8_tops_arrays(cc: np.ndarray, fp32: np.ndarray, tensor_fp16: np.ndarray) -> np.ndarray:
    dp4a = (np.round(cc, 1) == 6.1) | ((cc >= 7.0) & (cc < 7.5))
    return np.where(cc >= 7.5, 2.0 * tensor_fp16, np.where(dp4a, 4.0 * fp32, fp32))


def int8_tops(gpu: pd.DataFrame) -> pd.Series:
    """Dense int8 peak (TOP/s): tensor cores from Turing (cc 7.5) at 2x their fp16 rate; dp4a (4 int8 MACs per
    fp32 lane) on cc 6.1 and on Volta, whose tensor cores have no int8 mode; the fp32 rate on older GPUs."""
    return pd.Series(int8_tops_arrays(_floats(gpu, "compute_capability"), _floats(gpu, "fp32_tflops"),
                                      _floats(gpu, "tensor_fp16_tflops")), index=gpu.index)


def peak_arrays(precision: Any, gpu: Columns) -> np.ndarray:
    """Precision-appropriate peak (TFLOP/s) per row: tensor-core fp16 for half/mixed precision, the int8 rate for
    int8, the fp64 or fp32 CUDA-core rate else."""
    kind = lookup(precision, lambda p: 1.0 if p in HALF_PRECISIONS else 2.0 if p == "fp64" else
                  3.0 if p == "int8" else 0.0)
    fp32 = _floats(gpu, "fp32_tflops")
    peak = np.where(kind == 1.0, _floats(gpu, "tensor_fp16_tflops"), fp32)
    if (kind == 2.0).any():
        peak = np.where(kind == 2.0, _floats(gpu, "fp64_tflops"), peak)
    if (kind == 3.0).any():
        int8 = int8_tops_arrays(_floats(gpu, "compute_capability"), fp32, _floats(gpu, "tensor_fp16_tflops"))
        peak = np.where(kind == 3.0, int8, peak)
    return peak


def peak_tflops(precision: pd.Series, gpu: pd.DataFrame) -> pd.Series:
    """`peak_arrays` as a Series on the GPU frame's index."""
    return pd.Series(peak_arrays(precision.to_numpy(), gpu), index=gpu.index)


def engineer_arrays(X: Columns) -> dict[str, np.ndarray]:
    """The ENGINEERED columns of `engineer` as arrays (same operations, same order, so the same floats)."""
    training = _strings(X["mode"]) == "training"
    bpe = bytes_per_element(X["precision"])
    batch = _floats(X, "batch_size")
    out: dict[str, np.ndarray] = {}
    out["flops_per_sample"] = 2.0 * _floats(X, "gmacs") * 1e9 * np.where(training, 3.0, 1.0)
    out["flops_step"] = out["flops_per_sample"] * batch
    out["weight_bytes"] = _floats(X, "param_count_m") * 1e6 * bpe * np.where(training, 4.0, 1.0)
    out["activation_bytes"] = 2.0 * _floats(X, "activations_m") * 1e6 * batch * bpe * np.where(training, 2.0, 1.0)
    out["bytes_step"] = out["weight_bytes"] + out["activation_bytes"]
    out["arithmetic_intensity"] = out["flops_step"] / np.maximum(out["bytes_step"], EPS)
    out["peak_tflops"] = peak_arrays(X["precision"], X)
    bw = _floats(X, "memory_bandwidth_gbs")
    out["t_compute_ms"] = out["flops_step"] / (np.maximum(out["peak_tflops"], EPS) * 1e12) * 1e3
    out["t_memory_ms"] = out["bytes_step"] / np.clip(bw * 1e9, EPS, None) * 1e3
    out["t_roofline_ms"] = np.maximum(out["t_compute_ms"], out["t_memory_ms"])
    ridge = out["peak_tflops"] * 1e12 / np.clip(bw * 1e9, EPS, None)
    out["intensity_over_ridge"] = out["arithmetic_intensity"] / np.maximum(ridge, EPS)
    out["samples_per_sm"] = batch / np.maximum(_floats(X, "sm_count"), 1.0)
    out["pixels"] = _floats(X, "img_size") ** 2
    return out


def engineer(X: pd.DataFrame) -> pd.DataFrame:
    """Roofline-style work/traffic/time estimates per step (one batch) on the target GPU.

    FLOPs = 2 * GMACs * batch (x3 for training: forward + two backward GEMMs). Bytes = weights (x4 in training:
    read, gradient, optimizer state) + activations written and read (x2 more in training). Roofline time =
    max(FLOPs / peak, bytes / bandwidth).
    """
    return pd.DataFrame(engineer_arrays(X), index=X.index)


def release_features(framework: np.ndarray, release: np.ndarray) -> dict[str, np.ndarray]:
    """Numeric release and whether fp32 convolutions default to TF32, vectorised over rows."""
    since = lookup(framework, lambda f: TF32_CONV_SINCE.get(str(f), np.inf))
    return {"framework_release": release, "tf32_conv_default": (release >= since).astype(float)}


def parse_releases(versions: Any) -> np.ndarray:
    """parse_release per row, each distinct version string parsed once."""
    return lookup(versions, parse_release)


class PerfFeatures(BaseEstimator, TransformerMixin):
    """Turns raw inputs into model features: raw numerics, GPU specs, PTX counts, engineered roofline terms.

    Positive magnitudes are log-transformed (the target is log latency, so effects become additive); zero-able
    counts get log1p. Categorical columns pass through unchanged for the encoder.
    """

    def __init__(self, numeric_inputs=(), categorical_inputs=(), gpu_features=(), ptx_features=(),
                 engineered: bool = True, release_column: str | None = None, physics=None,
                 physics_constants: dict | None = None, spec_features: bool | list = True, ptx=None,
                 release_number: bool = True, cnn_offset: float | None = None, autocast_flag: bool = False):
        self.numeric_inputs = numeric_inputs
        self.categorical_inputs = categorical_inputs
        self.gpu_features = gpu_features
        self.ptx_features = ptx_features
        self.engineered = engineered
        self.release_column = release_column
        # False: the release still decides TF32 (the physics and `tf32_conv_default`), but the version reaches the
        # learner one-hot (unseen versions: "infrequent/unknown") instead of as a number, whose order across
        # sources is confounded with the source (docs/experiments.md).
        self.release_number = release_number
        # A `src.features.layer_physics.ProfileIndex`: adds the per-kernel physics estimate and its aggregates.
        self.physics = physics
        self.physics_constants = physics_constants
        # Which GPU specs reach the learner: True all `gpu_features`, False none, a list those of them. Specs not
        # given still feed the estimates (a tree cannot extrapolate raw specs to a GPU faster than any it saw;
        # scale-free shares and ratios transfer).
        self.spec_features = spec_features
        # A `src.features.ptx_lookup.PtxIndex`: the ptx_features are looked up from (model_key, img_size,
        # batch_size, compute_capability) instead of read from input columns (None: they are input columns).
        self.ptx = ptx
        # Pseudo-rows of the CNN's offset on other GPUs (src/features/cnn_offset.py); None: no offset features.
        self.cnn_offset = cnn_offset
        # True: the precision one-hot names the compute precision (amp_fp16 -> fp16) and a numeric `autocast`
        # flag says mixed (AUTOCAST_PRECISIONS).
        self.autocast_flag = autocast_flag

    def fit(self, X: pd.DataFrame, y=None):
        self.n_features_in_ = X.shape[1]
        if self._offset_shrink() is not None and y is not None:
            from .cnn_offset import fit_offset_tables

            self.offset_tables_ = fit_offset_tables(X, np.asarray(y, dtype=float))
        if self._ptx_index() is not None:
            self.ptx_per_gmac_ = self._ptx_index().per_gmac(X)
        if self.release_column:
            # An unknown release (git hash, empty) gets its framework's median training release, else the median.
            rel = pd.Series(parse_releases(X[self.release_column]), index=X.index)
            fw = X["framework"].astype(str)
            self.release_by_framework_ = {str(k): float(v) for k, v in rel.groupby(fw).median().dropna().items()}
            self.release_median_ = float(np.nanmedian(rel)) if rel.notna().any() else 0.0
        return self

    def _ptx_index(self):
        """The PTX index when the PTX features are looked up (models pickled before it existed have none)."""
        return getattr(self, "ptx", None) if self.ptx_features else None

    def ptx_arrays(self, X: Columns) -> list[np.ndarray]:
        """The PTX count columns of X's rows: looked up (never-counted CNNs imputed from GMACs) or read."""
        index = self._ptx_index()
        if index is None:
            return [_floats(X, c) for c in self.ptx_features]
        if list(index.columns) != list(self.ptx_features):
            raise ValueError(f"PTX index columns {index.columns[:3]}... differ from ptx_features "
                             f"{list(self.ptx_features)[:3]}...")
        counts, counted = index.counts(X, self.ptx_per_gmac_)
        return [counts[:, j] for j in range(counts.shape[1])] + [counted.astype(float)]

    def _offset_shrink(self) -> float | None:
        return getattr(self, "cnn_offset", None)  # models pickled before the option: none

    def _autocast(self) -> bool:
        return bool(getattr(self, "autocast_flag", False)) and "precision" in self.categorical_inputs

    def offset_arrays(self, X: Columns) -> list[np.ndarray]:
        """The CNN's offset on other GPUs (needs a fit with the target)."""
        from .cnn_offset import OFFSET_FEATURES, offset_arrays

        tables = getattr(self, "offset_tables_", None)
        if tables is None:
            raise ValueError("the cnn_offset features need PerfFeatures fitted with the target (fit(X, y))")
        out = offset_arrays(X, tables, float(self._offset_shrink()))
        return [out[c] for c in OFFSET_FEATURES]

    def encoded_categoricals(self) -> list[str]:
        """Categorical inputs one-hot encoded (the release column is turned into numbers instead)."""
        numbered = self.release_column if self._release_as_number() else None
        return [c for c in self.categorical_inputs if c != numbered]

    def _release_as_number(self) -> bool:
        return getattr(self, "release_number", True)  # models pickled before the option: a number

    def release_feature_names(self) -> list[str]:
        """The release-derived learner features (none without a release column)."""
        if not self.release_column:
            return []
        return list(RELEASE_FEATURES) if self._release_as_number() else ["tf32_conv_default"]

    def learner_specs(self) -> list[str]:
        """The GPU spec columns that are learner features (`spec_features`: True, False or a list of names)."""
        if isinstance(self.spec_features, bool):
            return list(self.gpu_features) if self.spec_features else []
        chosen = [str(c) for c in self.spec_features]
        unknown = sorted(set(chosen) - set(self.gpu_features))
        if unknown:
            raise ValueError(f"features.spec_features names {unknown}, which are not in features.gpu_features "
                             f"{list(self.gpu_features)}")
        return [c for c in self.gpu_features if c in set(chosen)]

    def numeric_names(self) -> list[str]:
        specs = self.learner_specs()
        names = list(self.numeric_inputs) + specs + list(self.ptx_features)
        names += [PTX_COUNTED] if self._ptx_index() is not None else []
        names += ENGINEERED if self.engineered else []
        names += self.release_feature_names()
        names += ["autocast"] if self._autocast() else []
        names += self._offset_names()
        return names + (self._physics_names() if self.physics is not None else [])

    def _offset_names(self) -> list[str]:
        from .cnn_offset import OFFSET_FEATURES

        return list(OFFSET_FEATURES) if self._offset_shrink() is not None else []

    @staticmethod
    def _physics_names() -> list[str]:
        from .layer_physics import PHYSICS_FEATURES

        return list(PHYSICS_FEATURES)

    def _no_log(self) -> set[str]:
        from .layer_physics import SHARE_FEATURES

        no_log = NO_LOG_COLUMNS | set(self._offset_names())  # offsets are logs already, the support a log1p
        return no_log | (set(SHARE_FEATURES) if self.physics is not None else set())

    def _log_kinds(self) -> list[str]:
        """Per numeric column: '' (as is), 'log1p' (zero-able counts) or 'log' (positive magnitudes)."""
        no_log, ptx = self._no_log(), set(self.ptx_features)
        return ["" if c in no_log else "log1p" if c in LOG1P_COLUMNS or c in ptx else "log"
                for c in self.numeric_names()]

    def physics_frame(self, X: Columns, tf32: np.ndarray | None = None) -> pd.DataFrame:
        """The per-kernel physics estimate of every row (src/features/layer_physics.py), memoised. `tf32`: the
        rows' TF32 flags when the caller has them (else derived from the release column)."""
        from .layer_physics import GPU_COLUMNS, ROW_COLUMNS, SMALL_FRAME_ROWS, PhysicsConstants, cached_price

        if self.physics is None:
            raise ValueError("PerfFeatures has no kernel profiles (physics=None)")
        if tf32 is None and self.release_column:
            tf32 = self.release_arrays(X)["tf32_conv_default"] > 0
        if not isinstance(X, pd.DataFrame):
            X = {c: X[c] for c in ROW_COLUMNS + GPU_COLUMNS if c in X}
            if len(next(iter(X.values()), ())) > SMALL_FRAME_ROWS:  # memoised on a frame's content
                X = pd.DataFrame(X)
        return cached_price(X, self.physics, PhysicsConstants.from_config(self.physics_constants), tf32)

    def release_arrays(self, X: Columns) -> dict[str, np.ndarray]:
        fw = _strings(X["framework"])
        rel = parse_releases(X[self.release_column])
        unknown = np.isnan(rel)
        if unknown.any():
            rel[unknown] = lookup(fw[unknown], lambda f: self.release_by_framework_.get(f, self.release_median_))
        return release_features(fw, rel)

    def release(self, X: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(self.release_arrays(X), index=X.index)

    def transform_arrays(self, X: Columns, physics_sink: dict | None = None
                         ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(numeric features as one float matrix in `numeric_names` order, logs applied; categorical columns as
        str arrays). The single implementation behind `transform` and the served fast path. `physics_sink`
        receives the unlogged physics frame under "physics" (the efficiency target's baseline: priced once)."""
        specs = self.learner_specs()
        blocks = [_floats(X, c) for c in list(self.numeric_inputs) + specs] + self.ptx_arrays(X)
        if self.engineered:
            blocks += list(engineer_arrays(X).values())
        tf32 = None
        if self.release_column:
            rel = self.release_arrays(X)
            blocks += [rel[c] for c in self.release_feature_names()]
            tf32 = rel["tf32_conv_default"] > 0
        precision = _strings(X["precision"]) if self._autocast() else None
        if precision is not None:
            blocks.append(np.isin(precision, list(AUTOCAST_PRECISIONS)).astype(float))
        if self._offset_names():
            blocks += self.offset_arrays(X)
        if self.physics is not None:
            phys = self.physics_frame(X, tf32)
            if physics_sink is not None:
                physics_sink["physics"] = phys
            blocks += [phys[c].to_numpy(dtype=float) for c in self._physics_names()]
        n = len(blocks[0]) if blocks else 0
        num = np.empty((n, len(blocks)))
        for j, b in enumerate(blocks):
            num[:, j] = b
        kinds = np.array(self._log_kinds())
        if (kinds == "log").any():
            num[:, kinds == "log"] = np.log(np.clip(num[:, kinds == "log"], EPS, None))
        if (kinds == "log1p").any():
            num[:, kinds == "log1p"] = np.log1p(np.clip(num[:, kinds == "log1p"], 0.0, None))
        cats = {c: _strings(X[c]) for c in self.encoded_categoricals()}
        if precision is not None:
            cats["precision"] = np.array([AUTOCAST_PRECISIONS.get(p, p) for p in precision.tolist()], dtype=object)
        return num, cats

    def transform(self, X: pd.DataFrame) -> pd.DataFrame:
        num, cats = self.transform_arrays(X)
        names = self.get_feature_names_out()
        out = {str(name): num[:, j] for j, name in enumerate(names[:num.shape[1]])}
        out.update({c: X[c].astype(str).to_numpy() for c in cats})
        if self._autocast():
            out["precision"] = np.asarray(cats["precision"], dtype=object)
        return pd.DataFrame(out, index=X.index)

    def get_feature_names_out(self, input_features=None):
        prefix = {"": "", "log1p": "log1p_", "log": "log_"}
        names = [prefix[k] + col for k, col in zip(self._log_kinds(), self.numeric_names(), strict=True)]
        return np.array(names + self.encoded_categoricals(), dtype=object)


def make_preprocessor(feat_cfg: dict, ptx_features: list[str], scale: bool, physics=None,
                      physics_constants: dict | None = None, ptx=None) -> Pipeline:
    """PerfFeatures -> (scaled) numerics + one-hot categoricals, with readable output feature names.

    `physics` (a ProfileIndex) is required when the feature set says `physics: true`; `ptx` (a PtxIndex) makes
    the PTX features a lookup from the CNN's name instead of input columns."""
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
        release_number=bool(feat_cfg.get("release_number", True)),
        physics=physics if feat_cfg.get("physics") else None,
        physics_constants=physics_constants,
        spec_features=_spec_features(feat_cfg.get("spec_features", True)),
        ptx=ptx,
        cnn_offset=feat_cfg.get("cnn_offset"),
        autocast_flag=bool(feat_cfg.get("autocast_flag", False)),
    )
    if ptx_features and ptx is None:
        raise ValueError(f"features={feat_cfg.get('name')} uses PTX counts but no PTX index was given "
                         "(data.ptx_counts)")
    numeric = [n for n in perf.get_feature_names_out() if n not in set(perf.categorical_inputs)]
    encode = ColumnTransformer(
        [
            ("num", StandardScaler() if scale else "passthrough", numeric),
            ("cat", StringOneHotEncoder(handle_unknown="infrequent_if_exist", sparse_output=False,
                                        min_frequency=feat_cfg.get("min_category_rows")),
             perf.encoded_categoricals()),
        ],
        verbose_feature_names_out=False,
    )
    return Pipeline([("perf", perf), ("encode", encode)])


def _spec_features(value: Any) -> bool | list[str]:
    """features.spec_features as PerfFeatures takes it: a bool, or a list of GPU spec names."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, str)):
        return [str(v) for v in value]
    raise ValueError(f"features.spec_features must be true, false or a list of GPU spec names, got {value!r}")


class StringOneHotEncoder(OneHotEncoder):
    """OneHotEncoder that hands its (str) columns on as NumPy unicode arrays.

    Why: on object columns sklearn finds categories and their counts (for `min_frequency`) item by item in Python,
    ~0.15 s per fit of an 18,000-row training part, paid at every trial and fold; on unicode arrays it takes
    np.unique's path. Same categories (code-point order either way), same output.
    """

    def fit(self, X, y=None):
        super().fit(_unicode(X), y)
        self.tables_ = onehot_tables(self) if self.drop is None and self.handle_unknown != "error" else None
        return self

    def transform(self, X):
        tables = getattr(self, "tables_", None)  # None: a drop rule, unknowns refused, or pickled before tables
        if tables is not None:
            # each value's block read from the encoder's own output (`onehot_tables`): sklearn maps values to
            # codes item by item in Python and builds a sparse matrix first; same numbers, about 4x faster
            arr = np.asarray(X.to_numpy() if isinstance(X, pd.DataFrame) else X, dtype=object)
            if arr.ndim != 2 or arr.shape[1] != len(tables):
                raise ValueError(f"X has {arr.shape[-1] if arr.ndim else 0} columns, the encoder was fitted on "
                                 f"{len(tables)}")
            return np.hstack([onehot_block(index, table, arr[:, j]) for j, (index, table) in enumerate(tables)]
                             ) if len(tables) else np.zeros((len(arr), 0))
        out = super().transform(_unicode(X))
        if isinstance(out, pd.DataFrame) and isinstance(X, pd.DataFrame):
            # pandas output (set_output, e.g. for XGBoost's monotone constraints by name): the array handed to
            # OneHotEncoder has no index, so its frame would count rows 0..n-1 and not line up with the numeric
            # columns of the same rows in the ColumnTransformer
            out.index = X.index
        return out


#: A value no encoder has seen: its block is what the encoder outputs for any unknown value.
UNSEEN_CATEGORY = "\x00unseen category\x00"


def onehot_tables(enc: OneHotEncoder) -> list[tuple[dict, np.ndarray]]:
    """Per column of a fitted OneHotEncoder: (category -> table row, the table of its one-hot blocks). The last
    table row is the block of a value it never saw (its infrequent column, or zeros; with handle_unknown='error'
    it is that of the first category). Read from the encoder's own transform of one probe per category, so
    infrequent grouping and category order are the encoder's."""
    cats = [[str(v) for v in c] for c in enc.categories_]
    widths = list(enc._n_features_outs)
    depth = max((len(c) for c in cats), default=0) + 1
    probe = np.empty((depth, len(cats)), dtype=object)
    for j, c in enumerate(cats):
        probe[:, j] = c + [c[0]] * (depth - 1 - len(c)) + [UNSEEN_CATEGORY if enc.handle_unknown != "error"
                                                            else c[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = OneHotEncoder.transform(enc, _unicode(probe))
    out = np.asarray(out.toarray() if hasattr(out, "toarray") else out, dtype=float)
    tables, offset = [], 0
    for j, c in enumerate(cats):
        block = out[:, offset:offset + widths[j]]
        offset += widths[j]
        tables.append(({v: k for k, v in enumerate(c)}, np.vstack([block[:len(c)], block[-1:]])))
    if offset != out.shape[1]:
        raise ValueError("one-hot widths do not add up")
    return tables


def onehot_block(index: dict, table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One column's one-hot block: each value's table row (a value not in `index`: the last, unseen row). Values
    are compared as str, as the encoder saw them (`_unicode`)."""
    codes, uniq = factorize(values)
    if len(uniq) and pd.isna(uniq).any():  # None and NaN share a code here but are 'None' and 'nan' as str
        codes, uniq = factorize(np.asarray(values, dtype=object).astype(str).astype(object))
    rows = np.array([index.get(u if isinstance(u, str) else str(u), len(table) - 1) for u in uniq.tolist()],
                    dtype=np.int64)
    return table[rows[codes]] if len(values) else np.zeros((0, table.shape[1]))


def _unicode(X) -> np.ndarray:
    return np.asarray(X.to_numpy() if isinstance(X, pd.DataFrame) else X, dtype=object).astype(str)


# Extra raw columns of the physics estimate: which CNN (its kernel profile) and which GPU (GeForce rate rule).
PHYSICS_INPUTS = ["model_key", "gpu"]


# Extra raw columns of the PTX lookup: which CNN (with img_size, batch_size and the GPU's compute capability).
PTX_INPUTS = ["model_key", "compute_capability"]


def input_columns(feat_cfg: dict, ptx_features: list[str]) -> list[str]:
    """Raw columns the Pipeline (and so the logged sklearn model) expects, in order. PTX features are looked up
    inside the Pipeline (a PtxIndex, src/features/ptx_lookup.py), so they are not columns; the CNN's name is."""
    cols = (
        list(feat_cfg["numeric_inputs"])
        + list(feat_cfg["categorical_inputs"])
        + list(feat_cfg["gpu_features"])
        + (PHYSICS_INPUTS if feat_cfg.get("physics") else [])
    )
    return cols + ([c for c in PTX_INPUTS if c not in cols] if ptx_features else [])
