"""Efficiency target: the regressor learns log(measured / physics estimate), predictions come back in ms.

Why: the physics estimate (src/features/layer_physics.py) carries what a GPU's peak, bandwidth and SM count
imply for each kernel, including for GPUs faster than any in the training table; a tree then predicts only the
bounded correction (how efficient real kernels, frameworks and drivers are), instead of a latency it cannot
extrapolate. Lives in `src.features` because the served model pickles it (only src/features travels with it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.pipeline import Pipeline

from .batch_monotone import monotone_in_batch
from .engineer import BYTES_PER_ELEMENT, HALF_PRECISIONS, _strings
from .mape_point import mape_optimal_shift

# Run-configuration columns whose kind, when no training row has it, leaves the learned correction without support.
# The precision counts by its class (element size and the peak it runs at), so bf16 rides on what fp16 taught.
UNSEEN_COLUMNS = ("compile_mode", "precision")
#: What the unseen-kind fallback answers (`fallback_point`): the median training efficiency, or its MAPE point.
FALLBACK_POINTS = ("median", "mape")
#: Constructor parameters added after models were registered, with the value that answers as those models did.
PICKLE_DEFAULTS = {"point_shift": 0.0, "fallback_point": "median", "by_numbers_learner": False,
                   "batch_monotone": False}
# The CNN name of a training row priced as a CNN described by its numbers only: in no kernel profile or PTX table.
BY_NUMBERS = "<described by its numbers>"


def precision_class(precision: Any) -> str:
    """'fp16', 'bf16', 'amp_fp16', 'amp_bf16' -> 'tensor16'; 'int8' -> 'int8'; 'fp32', 'fp64' themselves."""
    p = str(precision)
    if p in HALF_PRECISIONS:
        return "tensor16"
    return p if p in BYTES_PER_ELEMENT else f"other:{p}"


def _kinds(column: str, values: Any) -> np.ndarray:
    arr = _strings(values)
    if column == "precision":
        return np.array([precision_class(v) for v in arr.tolist()], dtype=object)
    return arr


def seen_kinds(X: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per column of UNSEEN_COLUMNS that X has, the kinds its rows hold (what a fitted model remembers)."""
    return {c: sorted(set(_kinds(c, X[c]).tolist())) for c in UNSEEN_COLUMNS if c in X}


def unseen_masks(X: Mapping[str, Any], seen: Mapping[str, list[str]]) -> dict[str, np.ndarray]:
    """Per column, the rows of X whose kind is not in `seen` (columns with no such row are left out)."""
    out = {}
    for col, kinds in seen.items():
        if col in X:
            mask = ~np.isin(_kinds(col, X[col]), np.array(kinds, dtype=object))
            if mask.any():
                out[col] = mask
    return out


def fallback_rows(train: Mapping[str, Any], test: Mapping[str, Any]) -> np.ndarray:
    """Rows of `test` that a model fitted on `train` with `unseen_fallback` answers by the fallback (bare estimate
    x median training efficiency), whatever its learner: their runtime or precision class is absent from `train`."""
    masks = unseen_masks(test, seen_kinds(train))
    n = len(next(iter(test.values()))) if isinstance(test, Mapping) else len(test)
    return np.logical_or.reduce(list(masks.values())) if masks else np.zeros(n, dtype=bool)


def fallback_column(train: Mapping[str, Any], test: Mapping[str, Any]) -> str | None:
    """A column of UNSEEN_COLUMNS whose kind no row of `train` has, for every row of `test` (None if none).

    Why: then every test row is answered by the fallback even when any one other column is shuffled among the
    test rows (permutation importance), and shuffling this one keeps every value unseen; a model fitted on `train`
    needs no learner to score `test` (PhysicsBaselineRegressor.fit_without_learner)."""
    for col, mask in unseen_masks(test, seen_kinds(train)).items():
        if mask.all():
            return col
    return None


def perf_step(pipeline: Pipeline):
    """The PerfFeatures step inside a model Pipeline (features -> perf)."""
    return pipeline.named_steps["features"].named_steps["perf"]


def profile_indexes(model) -> list:
    """The distinct kernel-profile indexes (`ProfileIndex`) a fitted model prices with: its learner's and, where
    fitted, the by-numbers learner's (usually one shared object). Empty for a model without the physics estimate."""
    pipes = []
    if isinstance(model, PhysicsBaselineRegressor):
        pipes = [model.regressor_, getattr(model, "by_numbers_regressor_", None)]
    elif hasattr(model, "regressor_"):
        pipes = [model.regressor_]
    elif isinstance(model, Pipeline):
        pipes = [model]
    found: dict[int, object] = {}
    for pipe in pipes:
        try:
            index = perf_step(pipe).physics
        except (AttributeError, KeyError):
            continue
        if index is not None:
            found.setdefault(id(index), index)
    return list(found.values())


def predict_point(model, X: pd.DataFrame) -> np.ndarray:
    """Each row's answer on its own: the model's `predict_point` where it has one (without the batch rule of
    `batch_monotone`), else its `predict`. What tuning and permutation importance score: the rule reads every
    configuration over 13 batch sizes, which would multiply their cost by up to 14, and they judge the learner."""
    point = getattr(model, "predict_point", None)
    return point(X) if callable(point) else model.predict(X)


class PhysicsBaselineRegressor(RegressorMixin, BaseEstimator):
    """Fits `regressor` (a features + estimator Pipeline) on log(y / t_physics); predicts exp(f(X)) * t_physics.

    `regressor_` is the fitted Pipeline, as in sklearn's TransformedTargetRegressor, so importances and
    feature names are read the same way.

    `unseen_fallback`: a row whose runtime (`compile_mode`) or precision class no training row has gets the bare
    estimate x the training efficiency (`fallback_point`: the median, or the point that minimises the training
    rows' MAPE) instead of the learned correction. Why: the correction is learnt
    per kind of run (an INT8 TensorRT engine is not an eager fp16 run), and for a kind it never saw a learner
    returns the correction of whatever it resembles in other columns, which was 113 % off for MLPerf's INT8
    ResNet-50 rows (leave_model_out) where the bare estimate is 39 % off. A rule fixed before any held-out row is
    seen; docs/training.md gives its effect under each protocol.

    `by_numbers_share`: that share of the training rows (seeded by `random_state`) is priced as a CNN described
    by its numbers only (`BY_NUMBERS` as its name: no kernel profile, PTX counts imputed from its GMACs), which is
    what a request for a CNN outside the zoo gets. Why: without it only 184 training rows (172 of them timm's on
    one GPU) teach the learner that pricing, and such a request was 54 % off where the same CNN named was 7 %
    (random protocol, xgb; docs/experiments.md "A CNN described by its numbers").

    `point_shift`: added to the learned log-efficiency of every row the learner answers (not to the fallback's):
    the point answer MAPE asks for lies below the middle of the error, the more so the wider it is. Set by
    training from the tuning CV (src/train/point.py); 0 answers the learner's own middle. The fallback's own point
    is `fallback_point`, read in `fit` from the spread of the training efficiencies (`set_fallback`).

    `by_numbers_learner`: also fit a second learner (`by_numbers_regressor_`) on every training row priced by its
    numbers, and answer with it the rows that have no layer profile (a CNN outside the zoo). Why: a share of
    by-numbers rows in the one learner bends the correction the named CNNs get (leave_arch_out 47.9 -> 76.7 % at
    0.1), while a learner of their own leaves every named row's answer as it was.

    `batch_monotone`: answers never fall as the batch grows: per configuration, the answers over the powers of two
    1 ... 4096 are replaced by their isotonic fit (src/features/batch_monotone.py). `predict_point` is the answer
    without it (what tuning and permutation importance score: the learner itself).
    """

    def __init__(self, regressor: Pipeline, unseen_fallback: bool = False, by_numbers_share: float = 0.0,
                 random_state: int = 0, by_numbers_learner: bool = False, point_shift: float = 0.0,
                 fallback_point: str = "median", batch_monotone: bool = False):
        self.regressor = regressor
        self.unseen_fallback = unseen_fallback
        self.by_numbers_share = by_numbers_share
        self.random_state = random_state
        self.by_numbers_learner = by_numbers_learner
        self.point_shift = point_shift
        self.fallback_point = fallback_point
        self.batch_monotone = batch_monotone

    def by_numbers(self, X: pd.DataFrame) -> pd.DataFrame:
        """X with a seeded `by_numbers_share` of its rows renamed `BY_NUMBERS` (X itself when the share is 0)."""
        share = float(getattr(self, "by_numbers_share", 0.0) or 0.0)
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"by_numbers_share must be within [0, 1], got {share}")
        n = int(round(share * len(X)))
        if n == 0 or "model_key" not in X:
            return X
        pick = np.random.default_rng(self.random_state).choice(len(X), n, replace=False)
        out = X.copy()
        out.iloc[pick, out.columns.get_loc("model_key")] = BY_NUMBERS
        return out

    def baseline_ms(self, X: pd.DataFrame, pipeline: Pipeline | None = None) -> np.ndarray:
        perf = perf_step(pipeline if pipeline is not None else self.regressor_)
        return perf.physics_frame(X)["t_physics_ms"].to_numpy(dtype=float)

    def _start_fit(self, X: pd.DataFrame, y) -> tuple[Pipeline, np.ndarray]:
        """Everything a fit sets before the learner: the priced baseline, the median efficiency, the seen kinds."""
        y = np.asarray(y, dtype=float)
        if (y <= 0).any() or not np.isfinite(y).all():
            raise ValueError("the efficiency target needs positive, finite latencies")
        pipe = clone(self.regressor)
        perf = perf_step(pipe)
        if perf.physics is None:
            raise ValueError("target=efficiency needs a feature set with `physics: true` (e.g. features=physics)")
        perf.fit(X)  # release medians: the TF32 rule of the estimate depends on them
        base = perf.physics_frame(X)["t_physics_ms"].to_numpy(dtype=float)
        log_eff = np.log(y) - np.log(base)
        self.n_features_in_ = X.shape[1]
        # the fallback's efficiency: of the rows priced as they are (a held-out row is), not of the by-numbers share
        named = (np.asarray(X["model_key"], dtype=object) != BY_NUMBERS) if "model_key" in X else np.ones(len(X), bool)
        self.set_fallback(log_eff[named] if named.any() else log_eff)
        self.seen_kinds_ = seen_kinds(X)
        return pipe, log_eff

    def __setstate__(self, state: dict) -> None:
        """A model pickled before a parameter existed gets the value that answers as it did (sklearn's clone and
        get_params read every constructor parameter)."""
        for name, value in PICKLE_DEFAULTS.items():
            state.setdefault(name, value)
        super().__setstate__(state)

    def set_fallback(self, log_eff: np.ndarray) -> None:
        """The unseen-kind fallback's log efficiency, from training rows' log efficiencies: their median, or with
        `fallback_point="mape"` the constant that minimises their MAPE (below the median, as for the learned rows:
        src/train/point.py). The fallback answers every row of an unseen runtime with one constant, so the point
        MAPE asks for is read from the spread of all training efficiencies."""
        rule = getattr(self, "fallback_point", "median") or "median"
        if rule not in FALLBACK_POINTS:
            raise ValueError(f"fallback_point: {rule!r} is not one of {list(FALLBACK_POINTS)}")
        log_eff = np.asarray(log_eff, dtype=float)
        self.median_log_efficiency_ = float(np.median(log_eff))
        shift = mape_optimal_shift(self.median_log_efficiency_ - log_eff) if rule == "mape" else 0.0
        self.fallback_log_efficiency_ = self.median_log_efficiency_ + shift

    def fallback_log_efficiency(self) -> float:
        """What the fallback answers (a model pickled before `fallback_point`: the median)."""
        return float(getattr(self, "fallback_log_efficiency_", self.median_log_efficiency_))

    def fit(self, X: pd.DataFrame, y, **fit_params):
        named = X
        X = self.by_numbers(X)
        pipe, log_eff = self._start_fit(X, y)
        pipe.fit(X, log_eff, **fit_params)
        self.regressor_ = pipe
        self.learner_fitted_ = True
        self.by_numbers_regressor_ = None
        if getattr(self, "by_numbers_learner", False) and "model_key" in named:
            self.by_numbers_regressor_ = self._fit_by_numbers(named, np.asarray(y, dtype=float), pipe, fit_params)
        return self

    def _fit_by_numbers(self, X: pd.DataFrame, y: np.ndarray, main: Pipeline, fit_params: dict) -> Pipeline:
        """The learner of the rows priced by their numbers: every training row renamed `BY_NUMBERS`.

        Its PerfFeatures is fitted on the rows as named (the PTX-per-GMAC imputation needs counted CNNs) and then
        transforms the renamed rows; the rest of the Pipeline is fitted on those. It shares the main Pipeline's
        kernel profiles and PTX table (one copy of each in the pickled model)."""
        renamed = X.assign(model_key=BY_NUMBERS)
        pipe = clone(self.regressor)
        features = pipe.named_steps["features"]
        perf = features.named_steps["perf"]
        perf.physics, perf.ptx = perf_step(main).physics, perf_step(main).ptx
        perf.fit(X)
        log_eff = np.log(y) - np.log(perf.physics_frame(renamed)["t_physics_ms"].to_numpy(dtype=float))
        z = perf.transform(renamed)
        for _, step in features.steps[1:]:
            z = step.fit(z, log_eff).transform(z)
        # the Pipeline's `model__<name>` fit parameters (a sample weight) go to its estimator here
        pipe.named_steps["model"].fit(z, log_eff, **{k.removeprefix("model__"): v for k, v in fit_params.items()})
        return pipe

    def by_numbers_rows(self, physics: pd.DataFrame) -> np.ndarray:
        """Rows (of a priced physics frame) the by-numbers learner answers: no layer profile. None fitted: none."""
        if getattr(self, "by_numbers_regressor_", None) is None:
            return np.zeros(len(physics), dtype=bool)
        return physics["has_layer_profile"].to_numpy(dtype=float) == 0.0

    def by_numbers_view(self) -> PhysicsBaselineRegressor:
        """The by-numbers learner as a model of its own (same fallback and median efficiency)."""
        view = copy.copy(self)
        view.regressor_, view.by_numbers_regressor_ = self.by_numbers_regressor_, None
        return view

    def fit_without_learner(self, X: pd.DataFrame, y):
        """Fit all but the learner (its feature step is fitted, so feature names and counts are known).

        For a held-out set whose every row the fallback answers, however any one of its columns is shuffled
        (`fallback_column`): its predictions and permutation importances are the fallback's whatever the learner,
        so fitting it would only cost time (an outer fold of leave_runtime_out). `predict` then refuses rows the
        learner would answer, naming how many, instead of answering them with anything else."""
        if not self.unseen_fallback:
            raise ValueError("fit_without_learner needs unseen_fallback=True: without the fallback every row "
                             "needs the learner")
        X = self.by_numbers(X)
        pipe, log_eff = self._start_fit(X, y)
        pipe.named_steps["features"].fit(X, log_eff)
        self.regressor_ = pipe
        self.learner_fitted_ = False
        return self

    def unseen(self, X: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Per column of UNSEEN_COLUMNS, which rows have a kind no training row had (empty when the fallback is
        off or the model predates it)."""
        if not getattr(self, "unseen_fallback", False) or not hasattr(self, "seen_kinds_"):
            return {}
        return unseen_masks(X, self.seen_kinds_)

    def correction(self, X: Mapping[str, Any], learned: np.ndarray) -> np.ndarray:
        """The learned log-efficiency plus `point_shift`, with rows of an unseen kind set to the fallback's
        (`set_fallback`)."""
        shift = float(getattr(self, "point_shift", 0.0) or 0.0)
        # in the learner's own dtype (XGBoost answers float32), as without a shift: a shift of 0 changes no bit
        out = learned + np.asarray(shift, dtype=np.asarray(learned).dtype) if shift else learned
        masks = self.unseen(X)
        if not masks:
            return out
        out = np.array(out, dtype=float, copy=True)
        out[np.logical_or.reduce(list(masks.values()))] = self.fallback_log_efficiency()
        return out

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        self._check_learner_free(X)  # on the rows asked for, before the batch rule multiplies them
        if not getattr(self, "batch_monotone", False):
            return self.predict_point(X)
        # the rule answers every configuration at 13 batch sizes: through the array replay of the Pipeline (the
        # served path, same arithmetic) where the model has its shape, at about half the generic path's cost
        from .fast_pipeline import compile_pipeline

        fast = compile_pipeline(self) if getattr(self, "learner_fitted_", True) else None
        if fast is None:
            return monotone_in_batch(self.predict_point, X)
        return fast.predict({c: X[c].to_numpy() for c in X.columns})

    def predict_point(self, X: pd.DataFrame) -> np.ndarray:
        """Each row's answer on its own (without the batch rule of `batch_monotone`). Through the array replay of
        the Pipeline where the model has its shape (as `predict`): tuning, permutation importance and a distilled
        tree's teacher call this hundreds of times per fold, and the generic path's per-column frames and one-hot
        encoding cost about as much as the learner (docs/training.md "Quick and full main job")."""
        if getattr(self, "learner_fitted_", True) and isinstance(X, pd.DataFrame) and len(X):
            from .fast_pipeline import compile_pipeline

            fast = compile_pipeline(self)
            if fast is not None:
                return fast.predict_point({c: X[c].to_numpy() for c in X.columns})
        return self.generic_predict_point(X)

    def generic_predict_point(self, X: pd.DataFrame) -> np.ndarray:
        """predict_point through the fitted sklearn Pipeline itself (the reference the array replay is tested
        against)."""
        if getattr(self, "learner_fitted_", True):
            physics = perf_step(self.regressor_).physics_frame(X)
            out = np.exp(self.correction(X, self.regressor_.predict(X))) * physics["t_physics_ms"].to_numpy(float)
            route = self.by_numbers_rows(physics)
            if route.any():
                out[route] = self.by_numbers_view().predict_point(
                    X.iloc[np.flatnonzero(route)].assign(model_key=BY_NUMBERS))
            return out
        self._check_learner_free(X)
        return np.exp(np.full(len(X), self.fallback_log_efficiency())) * self.baseline_ms(X)

    def _check_learner_free(self, X: pd.DataFrame) -> None:
        """A model fitted without its learner answers only rows the fallback answers; others are refused, counted."""
        if getattr(self, "learner_fitted_", True):
            return
        masks = self.unseen(X)
        learned = ~np.logical_or.reduce(list(masks.values())) if masks else np.ones(len(X), dtype=bool)
        if learned.any():
            raise ValueError(f"this model was fitted without its learner (fit_without_learner), but "
                             f"{int(learned.sum())} of {len(X)} rows have a runtime and precision class that "
                             f"training rows had ({self.seen_kinds_}): refit it with fit()")
