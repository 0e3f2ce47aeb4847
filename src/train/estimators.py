"""Estimators from conf/model/<name>.yaml: class path, fixed params and the Optuna search space."""

from __future__ import annotations

import importlib

import numpy as np
import optuna
from sklearn.compose import TransformedTargetRegressor
from sklearn.pipeline import Pipeline

from src.features.engineer import make_preprocessor


def estimator_class(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def suggest(trial: optuna.Trial, space: dict) -> dict:
    """Sample one parameter set from a search space spec {name: {type, low, high, log, step, choices}}."""
    params = {}
    for name, spec in space.items():
        kind = spec["type"]
        if kind == "int":
            params[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]),
                                             step=int(spec.get("step", 1)), log=bool(spec.get("log", False)))
        elif kind == "float":
            params[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]),
                                               log=bool(spec.get("log", False)))
        elif kind == "categorical":
            params[name] = trial.suggest_categorical(name, list(spec["choices"]))
        else:
            raise ValueError(f"search space {name!r}: unknown type {kind!r} (int, float, categorical)")
    return params


def build_model(model_cfg: dict, feat_cfg: dict, ptx_features: list[str], params: dict, log_target: bool):
    """features Pipeline + estimator, wrapped so it is fitted on log(target) and predicts the original scale."""
    est = estimator_class(model_cfg["estimator"])(**dict(model_cfg.get("fixed") or {}), **params)
    pipe = Pipeline([("features", make_preprocessor(feat_cfg, ptx_features, bool(model_cfg.get("scale")))),
                     ("model", est)])
    if not log_target:
        return pipe
    return TransformedTargetRegressor(regressor=pipe, func=np.log, inverse_func=np.exp, check_inverse=False)


def inner_pipeline(model) -> Pipeline:
    return model.regressor_ if isinstance(model, TransformedTargetRegressor) else model


def feature_names(model) -> list[str]:
    return [str(n) for n in inner_pipeline(model).named_steps["features"].get_feature_names_out()]


def native_importances(model, model_name: str) -> tuple[str, dict[str, float]] | None:
    """Model-specific importances, named for what they are: impurity (Gini) for trees/forests, gain for XGBoost."""
    est = inner_pipeline(model).named_steps["model"]
    if not hasattr(est, "feature_importances_"):
        return None
    kind = "gain" if model_name == "xgb" else "impurity"
    values = np.asarray(est.feature_importances_, dtype=float)
    return kind, dict(zip(feature_names(model), values.tolist(), strict=True))
