"""Permutation importance on the raw (human-level) inputs: the same, model-agnostic yardstick for all five."""

from __future__ import annotations

import numpy as np
import pandas as pd

from src.features.baseline import predict_point
from src.train.metrics import mape


def neg_mape_scorer(estimator, X, y) -> float:
    """-MAPE of the estimator's own answer per row (`predict_point`: what the learner makes of the inputs)."""
    return -mape(y, predict_point(estimator, X))


def permutation(model, X: pd.DataFrame, y: np.ndarray, columns: list[str], max_rows: int, repeats: int,
                seed: int, n_jobs: int = 1) -> dict[str, float]:
    """Mean increase of MAPE (percentage points) when one input column is shuffled.

    sklearn's `permutation_importance` with the same shuffles (one RandomState per column from the same seed,
    `repeats` cumulative shuffles), but every shuffled copy is answered in ONE `predict_point` call. Why: a fold
    scores 27 columns on 200-1,000 rows, and the per-call cost of the Pipeline (and of a forest's 50 trees) was most
    of the time. A row's answer depends on that row alone (`predict_point`), so the numbers are sklearn's.
    `n_jobs` is kept for callers; the single call runs in this thread."""
    del n_jobs
    if len(X) > max_rows:
        pick = np.random.default_rng(seed).choice(len(X), size=max_rows, replace=False)
        X, y = X.iloc[pick], y[pick]
    X = X[columns]
    column_seed = np.random.RandomState(seed).randint(np.iinfo(np.int32).max + 1)  # as sklearn draws it
    copies = [X]
    for col in columns:
        rng = np.random.RandomState(column_seed)
        order = np.arange(len(X))
        shuffled = X[col]
        for _ in range(repeats):
            rng.shuffle(order)
            shuffled = shuffled.iloc[order].set_axis(X.index)
            copies.append(X.assign(**{col: shuffled}))
    pred = np.asarray(predict_point(model, pd.concat(copies, ignore_index=True)), dtype=float)
    n = len(X)
    scores = np.array([-mape(y, pred[k * n:(k + 1) * n]) for k in range(len(copies))])
    drop = (scores[0] - scores[1:]).reshape(len(columns), repeats)
    return dict(zip(columns, drop.mean(axis=1).astype(float).tolist(), strict=True))
