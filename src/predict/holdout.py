"""Fit, log and register a latency model that never saw some CNN families (the honest "new CNN" demonstration).

Why: ranking GPUs for a CNN "not in the training data" is only meaningful if its rows (and its family's) are out
of the model. This fits through the training package's public entry (src.train.fit_model: the same Pipeline,
features config and conf/model/<name>.yaml as `python -m src.train`) on the training part of the random protocol
minus those families, logs it as the served pyfunc (src.train.log_served_model) and registers it under an alias.
"""

from __future__ import annotations

import time

import mlflow
import numpy as np

from src.config import REPO_ROOT
from src.predict.data import load_split
from src.tracking import file_md5, setup
from src.train import fit_model, log_served_model

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
                features: str = "physics_ptx", register_name: str | None = None, alias: str = "champion",
                max_rows: int | None = None, overrides: list[str] | None = None) -> dict:
    """Train on the dataset minus `exclude_families`, log the pyfunc, register it; returns URIs and test MAPE."""
    data = load_split(features, exclude_families, overrides, max_rows)
    c = data.config
    params = dict(DEFAULT_PARAMS.get(estimator, {}) if params is None else params)
    y = data.df["target"].to_numpy(dtype=float)
    t0 = time.perf_counter()
    model = fit_model(c, data.df, data.train, params, model=estimator)
    fit_s = time.perf_counter() - t0
    pred = model.predict(data.df.iloc[data.test][data.cols])
    mape = float(np.mean(np.abs(pred - y[data.test]) / y[data.test]) * 100)
    setup(c["mlflow"]["tracking_uri"], EXPERIMENT, c["mlflow"]["artifact_root"])
    name = register_name or f"cnnperf-holdout-{'-'.join(sorted(exclude_families)) or 'none'}"
    with mlflow.start_run(run_name=f"holdout/{estimator}/{'-'.join(sorted(exclude_families))}") as run:
        mlflow.set_tags({"run_kind": "holdout", "model": estimator, "excluded_families": ",".join(exclude_families),
                         "data_version": file_md5(REPO_ROOT / c["data"]["measurements"])})
        mlflow.log_params({**{f"param_{k}": v for k, v in params.items()}, "train_rows": len(data.train),
                           "test_rows": len(data.test), "excluded_rows": len(data.excluded)})
        mlflow.log_metrics({"test_mape": mape, "fit_seconds": fit_s})
        info = log_served_model(model, c, data.df, data.test, estimator,
                                excluded_families=sorted(exclude_families),
                                split_fingerprint=data.fingerprint(), max_rows=max_rows)
        version = mlflow.register_model(info.model_uri, name)
        mlflow.MlflowClient().set_registered_model_alias(name, alias, str(version.version))
    return {"run_id": run.info.run_id, "model_uri": info.model_uri, "registered": f"models:/{name}@{alias}",
            "test_mape": mape, "fit_seconds": fit_s, "train_rows": int(len(data.train)),
            "test_rows": int(len(data.test)), "excluded_rows": int(len(data.excluded)), "params": params}
