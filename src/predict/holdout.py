"""Fit, log and register a latency model that never saw some CNN families (the honest "new CNN" demonstration).

Why: ranking GPUs for a CNN "not in the training data" is only meaningful if its rows (and its family's) are out
of the model. This fits the same Pipeline as `python -m src.train` (src.train.estimators.build_model, features
config, conf/model/<name>.yaml fixed params) on the 70 % training part of the dataset minus those families,
logs it with the serving pyfunc (src.serve.model.log_pyfunc) and registers it under an alias.
"""

from __future__ import annotations

import time

import mlflow
import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from src.features.engineer import input_columns
from src.predict.data import load_split
from src.serve.model import log_pyfunc, request_columns
from src.tracking import file_md5, setup
from src.train.config import REPO_ROOT, compose
from src.train.estimators import build_model
from src.train.run import pip_requirements

DEFAULT_PARAMS = {
    "xgb": {"n_estimators": 300, "learning_rate": 0.08, "max_depth": 8, "subsample": 0.8, "colsample_bytree": 0.8,
            "min_child_weight": 1.0},
    "dt": {"max_depth": 20, "min_samples_leaf": 3},
    "rf": {"n_estimators": 100, "max_depth": 24, "min_samples_leaf": 2, "max_features": 0.6},
    "knn": {"n_neighbors": 5, "weights": "distance", "p": 1},
    "lr": {"alpha": 1.0},
}
EXPERIMENT = "cnnperf-predict"


def fit_holdout(exclude_families: list[str], estimator: str = "xgb", params: dict | None = None,
                features: str = "engineered", register_name: str | None = None, alias: str = "champion",
                max_rows: int | None = None, overrides: list[str] | None = None) -> dict:
    """Train on the dataset minus `exclude_families`, log the pyfunc, register it; returns URIs and test MAPE."""
    data = load_split(features, exclude_families, overrides, max_rows)
    c = data.config
    mcfg = OmegaConf.to_container(compose([f"model={estimator}"]), resolve=True)["model"]
    params = dict(DEFAULT_PARAMS.get(estimator, {}) if params is None else params)
    model = build_model(mcfg, c["features"], [], params, bool(c["target"]["log"]))
    X, y = data.df[data.cols], data.df["target"].to_numpy(dtype=float)
    t0 = time.perf_counter()
    model.fit(X.iloc[data.train], y[data.train])
    fit_s = time.perf_counter() - t0
    pred = model.predict(X.iloc[data.test])
    mape = float(np.mean(np.abs(pred - y[data.test]) / y[data.test]) * 100)
    gpus = pd.read_parquet(REPO_ROOT / c["data"]["gpus"])
    gpus = gpus[["gpu"] + list(c["features"]["gpu_features"])].dropna().reset_index(drop=True)
    meta = {
        "numeric_inputs": list(c["features"]["numeric_inputs"]),
        "categorical_inputs": list(c["features"]["categorical_inputs"]),
        "open_categorical": list(c["features"].get("open_categorical") or []),
        "gpu_features": list(c["features"]["gpu_features"]), "ptx_features": [],
        "input_columns": input_columns(c["features"], []),
        "categories": {k: sorted(data.df[k].astype(str).unique().tolist())
                       for k in c["features"]["categorical_inputs"]},
        "output": c["target"]["column"], "unit": c["target"]["unit"], "model": estimator,
        "features": c["features"]["name"], "excluded_families": sorted(exclude_families),
        "split_fingerprint": data.fingerprint(), "max_rows": max_rows,
    }
    setup(c["mlflow"]["tracking_uri"], EXPERIMENT, c["mlflow"]["artifact_root"])
    name = register_name or f"cnnperf-holdout-{'-'.join(sorted(exclude_families)) or 'none'}"
    with mlflow.start_run(run_name=f"holdout/{estimator}/{'-'.join(sorted(exclude_families))}") as run:
        mlflow.set_tags({"run_kind": "holdout", "model": estimator, "excluded_families": ",".join(exclude_families),
                         "data_version": file_md5(REPO_ROOT / c["data"]["measurements"])})
        mlflow.log_params({**{f"param_{k}": v for k, v in params.items()}, "train_rows": len(data.train),
                           "test_rows": len(data.test), "excluded_rows": len(data.excluded)})
        mlflow.log_metrics({"test_mape": mape, "fit_seconds": fit_s})
        example = data.df.iloc[data.test[:3]][request_columns(meta)].reset_index(drop=True)
        info = log_pyfunc(model, gpus, meta, example, pip_requirements(estimator))
        version = mlflow.register_model(info.model_uri, name)
        mlflow.MlflowClient().set_registered_model_alias(name, alias, str(version.version))
    return {"run_id": run.info.run_id, "model_uri": info.model_uri, "registered": f"models:/{name}@{alias}",
            "test_mape": mape, "fit_seconds": fit_s, "train_rows": int(len(data.train)),
            "test_rows": int(len(data.test)), "excluded_rows": int(len(data.excluded)), "params": params}
