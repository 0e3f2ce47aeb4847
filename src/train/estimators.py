"""Estimators from conf/model/<name>.yaml: class path, fixed params and the Optuna search space."""

from __future__ import annotations

import importlib

import numpy as np
import optuna
from sklearn.compose import TransformedTargetRegressor
from sklearn.pipeline import Pipeline

from src.features.baseline import PhysicsBaselineRegressor
from src.features.distill import DistilledBaselineRegressor, distill_blocks
from src.features.engineer import input_columns, make_preprocessor


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


def monotone_constraints(estimator, feature_names: list[str], monotone: dict | None) -> dict[str, int] | None:
    """{feature: +1/-1} of `monotone` restricted to features present, for estimators that take
    `monotone_constraints` by feature name (XGBoost); None where none applies."""
    if not monotone or "monotone_constraints" not in estimator.get_params():
        return None
    present = {k: int(v) for k, v in monotone.items() if k in set(feature_names)}
    return present or None


# Feature-set keys a model may set for itself (conf/model/<name>.yaml `feature_overrides`): they change which
# columns the learner sees, never which rows exist, so every model is still scored on the same rows and folds.
MODEL_FEATURE_KEYS = ("spec_features",)


def model_features(model_cfg: dict, feat_cfg: dict) -> dict:
    """The feature set as this model sees it: `feat_cfg` with the model's `feature_overrides` applied."""
    overrides = dict(model_cfg.get("feature_overrides") or {})
    bad = sorted(set(overrides) - set(MODEL_FEATURE_KEYS))
    if bad:
        raise ValueError(f"model {model_cfg.get('name')}: feature_overrides {bad} cannot be set per model (only "
                         f"{list(MODEL_FEATURE_KEYS)}: a per-model key may change the learner's columns, not the rows)")
    return {**dict(feat_cfg), **overrides}


# What a synthetic row of a distilled model swaps as one block (conf/model/<name>.yaml `distill.swap`): a CNN's
# description (its name carries its layers and PTX counts, looked up inside the Pipeline) and a GPU's specs.
SWAP_BLOCKS = {"cnn": ("model_key", "family", "param_count_m", "gmacs", "activations_m", "img_size"),
               "gpu": ("gpu",)}


def swap_block_columns(feat_cfg: dict, ptx_features: list[str]) -> dict[str, tuple[str, ...]]:
    """SWAP_BLOCKS restricted to the feature set's raw input columns; the GPU block adds its spec columns."""
    cols = input_columns(feat_cfg, ptx_features)
    blocks = {"cnn": SWAP_BLOCKS["cnn"], "gpu": SWAP_BLOCKS["gpu"] + tuple(feat_cfg["gpu_features"])}
    return {name: tuple(c for c in block if c in cols) for name, block in blocks.items()}


def build_model(model_cfg: dict, feat_cfg: dict, ptx_features: list[str], params: dict,
                log_target: bool | None = None, target_cfg: dict | None = None, physics=None,
                physics_constants: dict | None = None, ptx=None, teacher=None):
    """features Pipeline + estimator, wrapped for the target: log(target) (predictions on the original scale), or
    the efficiency log(target / physics estimate) when the target config says `baseline: physics`. The model's
    `feature_overrides` apply to `feat_cfg` (model_features).

    Monotone constraints (target config `monotone`: feature -> +1/-1) go to estimators that support them.
    A model config with `distill` (and its `teacher`, an unfitted model built by the caller) is grown on the
    teacher's answers (src/features/distill.py); that needs the efficiency target."""
    target_cfg = dict(target_cfg or {"log": bool(log_target)})
    est = estimator_class(model_cfg["estimator"])(**dict(model_cfg.get("fixed") or {}), **params)
    pre = make_preprocessor(model_features(model_cfg, feat_cfg), ptx_features, bool(model_cfg.get("scale")), physics,
                            physics_constants, ptx)
    names = [str(n) for n in pre.named_steps["perf"].get_feature_names_out()]
    constraints = monotone_constraints(est, names, target_cfg.get("monotone"))
    if constraints:
        pre.set_output(transform="pandas")  # XGBoost maps constraints by column name
        est.set_params(monotone_constraints=constraints)
    pipe = Pipeline([("features", pre), ("model", est)])
    distill = model_cfg.get("distill")
    if distill and target_cfg.get("baseline") != "physics":
        raise ValueError(f"model {model_cfg.get('name')}: distill needs the efficiency target (target=efficiency); "
                         f"set model.distill=null to grow the tree on the measurements with target "
                         f"{target_cfg.get('name', '?')}")
    if target_cfg.get("baseline") == "physics":
        if not target_cfg.get("log"):
            raise ValueError("target.baseline=physics models log(target / estimate): set target.log=true")
        common = {"regressor": pipe, "unseen_fallback": bool(target_cfg.get("unseen_fallback")),
                  "by_numbers_share": float(target_cfg.get("by_numbers_share") or 0.0),
                  "random_state": int(target_cfg.get("by_numbers_seed") or 0),
                  # the point the unseen-kind fallback answers follows `target.point` (src/train/point.py)
                  "fallback_point": str(target_cfg.get("point") or "median"),
                  # answers that never fall as the batch grows (src/features/batch_monotone.py), unless the model's
                  # own config turns the rule off (conf/model/knn.yaml: what it costs there)
                  "batch_monotone": bool(target_cfg.get("batch_monotone")) and bool(model_cfg.get("batch_monotone",
                                                                                                    True))}
        if not distill:
            return PhysicsBaselineRegressor(**common)
        if teacher is None:
            raise ValueError(f"model {model_cfg.get('name')}: distill.teacher {distill.get('teacher')!r} was not built")
        blocks = distill_blocks(list(distill.get("swap") or []), swap_block_columns(feat_cfg, ptx_features))
        return DistilledBaselineRegressor(**common, teacher=teacher, synthetic_blocks=blocks,
                                          synthetic_copies=int(distill.get("copies", 3)),
                                          synthetic_donors=str(distill.get("donors", "rows")))
    if not target_cfg.get("log"):
        return pipe
    return TransformedTargetRegressor(regressor=pipe, func=np.log, inverse_func=np.exp, check_inverse=False)


def inner_pipeline(model) -> Pipeline:
    if isinstance(model, TransformedTargetRegressor | PhysicsBaselineRegressor):
        return model.regressor_
    return model


def feature_names(model) -> list[str]:
    return [str(n) for n in inner_pipeline(model).named_steps["features"].get_feature_names_out()]


def native_importances(model, model_name: str) -> tuple[str, dict[str, float]] | None:
    """Model-specific importances, named for what they are: impurity (Gini) for trees/forests, gain for XGBoost."""
    est = inner_pipeline(model).named_steps["model"]
    if not getattr(model, "learner_fitted_", True) or not hasattr(est, "feature_importances_"):
        return None
    kind = "gain" if model_name == "xgb" else "impurity"
    values = np.asarray(est.feature_importances_, dtype=float)
    return kind, dict(zip(feature_names(model), values.tolist(), strict=True))
