"""Optuna studies: seeded TPE, median pruning over CV folds, RDB storage (SQLite default, PostgreSQL by URL).

The objective is the cross-validated MAPE (percent, original scale) on the TRAINING part only.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable

import mlflow
import numpy as np
import optuna
import pandas as pd

from src.train.estimators import suggest
from src.train.metrics import mape

log = logging.getLogger("cnnperf.tuning")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def cv_mape(make_model: Callable[[dict], object], params: dict, X: pd.DataFrame, y: np.ndarray,
            splits: list[tuple[np.ndarray, np.ndarray]], trial: optuna.Trial | None = None) -> float:
    """Mean validation MAPE over the splits; reports after each fold so the pruner can stop bad trials."""
    scores = []
    for k, (tr, va) in enumerate(splits):
        model = make_model(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X.iloc[tr], y[tr])
        pred = model.predict(X.iloc[va])
        score = mape(y[va], pred) if np.all(np.isfinite(pred)) else math.inf
        scores.append(score)
        if trial is not None:
            trial.report(float(np.mean(scores)), k)
            if trial.should_prune():
                raise optuna.TrialPruned()
    return float(np.mean(scores))


def create_study(name: str, storage: str, seed: int, resume: bool = False) -> optuna.Study:
    """A fresh seeded study (an existing one of the same name is replaced unless `resume`)."""
    if not resume:
        try:
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass
    return optuna.create_study(
        study_name=name,
        storage=storage,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0),
        load_if_exists=resume,
    )


def tune(study: optuna.Study, space: dict, make_model: Callable[[dict], object], X: pd.DataFrame,
         y: np.ndarray, splits, n_trials: int, log_trials: bool, run_prefix: str,
         enqueue: dict | None = None, progress: bool = True) -> optuna.Study:
    """Run `n_trials` trials; each trial becomes a nested MLflow run (params, cv_mape, state)."""
    if enqueue:
        study.enqueue_trial(enqueue, skip_if_exists=True)

    def objective(trial: optuna.Trial) -> float:
        params = suggest(trial, space)
        ctx = mlflow.start_run(run_name=f"{run_prefix}/trial-{trial.number}", nested=True) if log_trials else None
        try:
            try:
                score = cv_mape(make_model, params, X, y, splits, trial)
            except optuna.TrialPruned:
                if ctx:
                    mlflow.log_params(params)
                    mlflow.set_tags({"run_kind": "trial", "trial_state": "PRUNED"})
                raise
            if ctx:
                mlflow.log_params(params)
                mlflow.log_metric("cv_mape", score)
                mlflow.set_tags({"run_kind": "trial", "trial_state": "COMPLETE"})
            return score
        finally:
            if ctx:
                mlflow.end_run()

    study.optimize(objective, n_trials=n_trials, show_progress_bar=progress, catch=())
    return study


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    return study.trials_dataframe(attrs=("number", "value", "params", "state", "duration"))
