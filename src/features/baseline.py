"""Efficiency target: the regressor learns log(measured / physics estimate), predictions come back in ms.

Why: the physics estimate (src/features/layer_physics.py) carries what a GPU's peak, bandwidth and SM count
imply for each kernel, including for GPUs faster than any in the training table; a tree then predicts only the
bounded correction (how efficient real kernels, frameworks and drivers are), instead of a latency it cannot
extrapolate. Lives in `src.features` because the served model pickles it (only src/features travels with it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.pipeline import Pipeline


def perf_step(pipeline: Pipeline):
    """The PerfFeatures step inside a model Pipeline (features -> perf)."""
    return pipeline.named_steps["features"].named_steps["perf"]


class PhysicsBaselineRegressor(RegressorMixin, BaseEstimator):
    """Fits `regressor` (a features + estimator Pipeline) on log(y / t_physics); predicts exp(f(X)) * t_physics.

    `regressor_` is the fitted Pipeline, as in sklearn's TransformedTargetRegressor, so importances and
    feature names are read the same way.
    """

    def __init__(self, regressor: Pipeline):
        self.regressor = regressor

    def baseline_ms(self, X: pd.DataFrame, pipeline: Pipeline | None = None) -> np.ndarray:
        perf = perf_step(pipeline if pipeline is not None else self.regressor_)
        return perf.physics_frame(X)["t_physics_ms"].to_numpy(dtype=float)

    def fit(self, X: pd.DataFrame, y, **fit_params):
        y = np.asarray(y, dtype=float)
        if (y <= 0).any() or not np.isfinite(y).all():
            raise ValueError("the efficiency target needs positive, finite latencies")
        pipe = clone(self.regressor)
        perf = perf_step(pipe)
        if perf.physics is None:
            raise ValueError("target=efficiency needs a feature set with `physics: true` (e.g. features=physics)")
        perf.fit(X)  # release medians: the TF32 rule of the estimate depends on them
        base = perf.physics_frame(X)["t_physics_ms"].to_numpy(dtype=float)
        pipe.fit(X, np.log(y) - np.log(base), **fit_params)
        self.regressor_ = pipe
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.exp(self.regressor_.predict(X)) * self.baseline_ms(X)
