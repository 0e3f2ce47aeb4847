"""Load a logged cnnperf pyfunc (registry alias, runs:/ URI or local folder) and its conformal calibration.

Why unwrap the pyfunc: the served model validates GPU names against the GPU table it was trained with; ranking
GPUs the training never saw needs the same Pipeline fed with any GPU's spec columns, through the same
`src.features.served.predict_frame` code path (we hand it a GPU table holding the requested GPUs).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd

log = logging.getLogger("cnnperf.predict")
CONFORMAL_ARTIFACT = "conformal/conformal.json"


class ModelLoadError(RuntimeError):
    """The model URI could not be loaded or is not a cnnperf pyfunc (message names the URI)."""


@dataclass
class LoadedModel:
    uri: str
    pipeline: object
    meta: dict
    gpus: pd.DataFrame  # GPU table shipped with the model (the GPUs it knows by name)
    run_id: str | None
    conformal: dict | None
    load_seconds: float = 0.0
    # the MLflow logged model (MLflow 3 `models:/m-...`) and the calibration its folder holds, which is what
    # `mlflow models serve` answers with (src/features/intervals.py); None for a local folder / none there yet
    model_id: str | None = None
    served_conformal: dict | None = None


def read_conformal(run_id: str | None, path: str | None = None) -> dict | None:
    """Calibration JSON: an explicit file wins, else the artifact logged next to the model's run, else None (`load`
    then takes the copy in the model's own folder, if any)."""
    from src.features.served import read_calibration_file

    if path:
        p = Path(path)
        if not p.is_file():
            raise ModelLoadError(f"conformal calibration file {path!r} not found")
        try:
            return read_calibration_file(p)  # names the file: not JSON (line, column), or not a calibration
        except ValueError as err:
            raise ModelLoadError(str(err)) from err
    if not run_id:
        return None
    try:
        local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=CONFORMAL_ARTIFACT)
    except Exception:  # noqa: BLE001 - absent artifact: intervals are reported as unavailable
        return None
    try:
        return read_calibration_file(local)
    except ValueError as err:
        raise ModelLoadError(f"run {run_id}'s {CONFORMAL_ARTIFACT}: {err}") from err


def load(uri: str, conformal_path: str | None = None) -> LoadedModel:
    """Load the pyfunc at `uri` and return its Pipeline, metadata and GPU table (plus calibration if any)."""
    import time

    t0 = time.perf_counter()
    path = list(sys.path)
    try:
        pm = mlflow.pyfunc.load_model(uri)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"cannot load model {uri!r}: {exc}. Train and register one (`python -m src.train` "
                             "then `python -m src.register`) or pass --model-uri") from exc
    finally:
        # load_model put the model's carried code (the `src` it was logged with) first on sys.path; this process
        # runs the working tree's `src`, so later imports, and the worker processes that calibration spawns (they
        # inherit sys.path), must not pick up an older copy of a module
        sys.path[:] = path
    py = pm.unwrap_python_model()
    for attr in ("pipeline", "meta", "gpus"):
        if not hasattr(py, attr):
            raise ModelLoadError(f"{uri!r} is not a cnnperf pyfunc (no {attr!r}); log it with "
                                 "src.features.served.log_pyfunc")
    run_id = getattr(pm.metadata, "run_id", None)
    served = getattr(py, "conformal", None)
    cal = read_conformal(run_id, conformal_path)
    if cal is None and not conformal_path:
        cal = served  # a model folder copied away from its run (or its store) still carries its calibration
    return LoadedModel(uri, py.pipeline, py.meta, py.gpus, run_id, cal, time.perf_counter() - t0,
                       getattr(pm.metadata, "model_id", None), served)
