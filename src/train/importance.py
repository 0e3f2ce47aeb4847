"""Permutation importance on the raw (human-level) inputs: the same, model-agnostic yardstick for all five."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.inspection import permutation_importance

from src.features.baseline import predict_point
from src.train.metrics import mape


def neg_mape_scorer(estimator, X, y) -> float:
    """-MAPE of the estimator's own answer per row (`predict_point`: what the learner makes of the inputs)."""
    return -mape(y, predict_point(estimator, X))


def permutation(model, X: pd.DataFrame, y: np.ndarray, columns: list[str], max_rows: int, repeats: int,
                seed: int, n_jobs: int = 1) -> dict[str, float]:
    """Mean increase of MAPE (percentage points) when one input column is shuffled."""
    if len(X) > max_rows:
        pick = np.random.default_rng(seed).choice(len(X), size=max_rows, replace=False)
        X, y = X.iloc[pick], y[pick]
    res = permutation_importance(model, X[columns], y, scoring=neg_mape_scorer, n_repeats=repeats,
                                 random_state=seed, n_jobs=n_jobs)
    return dict(zip(columns, res.importances_mean.astype(float).tolist(), strict=True))
