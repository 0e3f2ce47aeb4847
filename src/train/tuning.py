"""Optuna studies: seeded TPE, median pruning over CV folds, RDB storage (SQLite default, PostgreSQL by URL).

The objective is the cross-validated MAPE (percent, original scale) on the TRAINING part only.
A study that workers share (src/train/shared.py, made by `python -m src.train.worker`) is joined, never
replaced, and tuned only through its queue: its budget is spent once, whoever spends it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
import warnings
from collections.abc import Callable

import mlflow
import numpy as np
import optuna
import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from src.features.baseline import predict_point
from src.train import shared
from src.train.estimators import suggest
from src.train.metrics import mape
from src.train.point import mape_optimal_shift

log = logging.getLogger("cnnperf.tuning")
# Trial attribute holding the validation MAPE of each CV fold (the one-standard-error rule needs their spread).
FOLD_SCORES_ATTR = "fold_mape"
# Trial attribute holding the MAPE-optimal log shift of its pooled out-of-fold predictions (src/train/point.py).
OOF_SHIFT_ATTR = "oof_point_shift"
SELECTION_RULES = ("best", "one_se", "incumbent")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def cv_mape(make_model: Callable[[dict], object], params: dict, X: pd.DataFrame, y: np.ndarray,
            splits: list[tuple[np.ndarray, np.ndarray]], trial: optuna.Trial | None = None) -> float:
    """Mean validation MAPE over the splits; reports after each fold so the pruner can stop bad trials.

    A trial that completes every fold also records the MAPE-optimal log shift of its pooled out-of-fold
    predictions (`OOF_SHIFT_ATTR`), which the chosen trial hands to the final model (src/train/point.py): of the
    rows its learner answered, as the shift moves only those (`learner_rows`)."""
    scores, log_ratios = [], []
    for k, (tr, va) in enumerate(splits):
        model = make_model(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X.iloc[tr], y[tr])
        pred = predict_point(model, X.iloc[va])
        score = mape(y[va], pred) if np.all(np.isfinite(pred)) else math.inf
        scores.append(score)
        if math.isfinite(score) and np.all(pred > 0) and np.all(y[va] > 0):
            # the shift moves the learner's answers only: rows the unseen-kind fallback answers do not vote
            log_ratios.append(np.log(pred / y[va])[learner_rows(model, X.iloc[va])])
        if trial is not None:
            trial.set_user_attr(FOLD_SCORES_ATTR, [float(v) for v in scores])
            trial.report(float(np.mean(scores)), k)
            if trial.should_prune():
                raise optuna.TrialPruned()
    if trial is not None and len(log_ratios) == len(splits):
        pooled = np.concatenate(log_ratios)
        # no validation row the learner answered: no evidence for a shift
        trial.set_user_attr(OOF_SHIFT_ATTR, mape_optimal_shift(pooled) if pooled.size else 0.0)
    return float(np.mean(scores))


def learner_rows(model, X: pd.DataFrame) -> np.ndarray:
    """Rows a fitted model answers with its learner: all but those of a kind no training row had (the efficiency
    target's fallback, src/features/baseline.py), which the point shift does not move."""
    masks = model.unseen(X) if hasattr(model, "unseen") else {}
    if not masks:
        return np.ones(len(X), dtype=bool)
    return ~np.logical_or.reduce(list(masks.values()))


@dataclasses.dataclass(frozen=True)
class UntunedTrial:
    """The parameters of a fold that fits no learner (`Trainer.learner_free`): a trial's CV score could change
    none of its answers, so none is computed (value NaN) and no study is created."""
    params: dict
    value: float = math.nan
    number: int = 0


def create_study(name: str, storage: str, seed: int, resume: bool = False) -> optuna.Study:
    """A fresh seeded study (an existing one of the same name is replaced unless `resume`).

    A shared study of that name (workers' study, with its queue and heartbeats) is joined as it is.
    """
    joined = shared.open_if_shared(name, storage, seed)
    if joined is not None:
        return joined
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


class TrialRun:
    """One trial's MLflow run, by the client API (a failure to close it cannot leave a run on MLflow's stack)."""

    def __init__(self, name: str, parent: str | None, tags: dict[str, str]) -> None:
        self.client = MlflowClient()
        # The parent is the protocol run, or a shared study's run; without either, the process's experiment.
        exp = (self.client.get_run(parent).info.experiment_id if parent
               else mlflow.tracking.fluent._get_experiment_id())
        tags = {**tags, MLFLOW_RUN_NAME: name, **({MLFLOW_PARENT_RUN_ID: parent} if parent else {})}
        self.run_id = self.client.create_run(exp, run_name=name, tags=tags).info.run_id

    def end(self, state: str, params: dict, metrics: dict[str, float] | None = None) -> None:
        """Log params (and metrics), tag `trial_state`, end the run: FINISHED, or FAILED for a failed trial."""
        now = int(time.time() * 1000)
        try:
            self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()],
                                  metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                                  tags=[RunTag("trial_state", state)])
        finally:
            self.client.set_terminated(self.run_id, "FAILED" if state == "FAIL" else "FINISHED")


def tune(study: optuna.Study, space: dict, make_model: Callable[[dict], object], X: pd.DataFrame,
         y: np.ndarray, splits, n_trials: int, log_trials: bool, run_prefix: str,
         enqueue: dict | None = None, progress: bool = True,
         policy: shared.FaultPolicy | None = None, drain: bool = True, parent_run: str | None = None) -> optuna.Study:
    """Run `n_trials` trials; each trial becomes a nested MLflow run (params, cv_mape, state).

    A shared study instead runs its queued trials until its budget (which must equal `n_trials`) is spent by
    all its workers (`drain`: and until none runs anywhere); `policy` says how to ride out database outages there.
    `parent_run` names the run the trial runs nest under (default: the active run of this thread).
    """
    found = shared.settings(study)
    active = mlflow.active_run()
    parent = parent_run or (active.info.run_id if active else (found or {}).get("mlflow_run_id"))

    def objective(trial: optuna.Trial) -> float:
        # The run first, so that a trial failing at any step below still has its (FAILED) run.
        run = TrialRun(f"{run_prefix}/trial-{trial.number}", parent, {
            "run_kind": "trial", "optuna_study": study.study_name, "optuna_trial": str(trial.number),
            "worker": shared.worker_id()}) if log_trials else None
        params: dict = {}
        try:
            if run:
                trial.set_user_attr(shared.RUN_ATTR, run.run_id)
            if found is not None:
                trial.set_user_attr(shared.WORKER_ATTR, shared.worker_id())
            params = suggest(trial, space)
            score = cv_mape(make_model, params, X, y, splits, trial)
        except optuna.TrialPruned:
            if run:
                run.end("PRUNED", params)
            raise
        except BaseException:
            if run:
                run.end("FAIL", params)
            raise
        if run:
            run.end("COMPLETE", params, {"cv_mape": score})
        return score

    if found is not None:
        shared.check_budget(study, n_trials)
        counts = shared.run_queue(study, objective, policy or shared.FaultPolicy(), drain=drain)
        log.info("study %s: %s", study.study_name, counts)
        return study
    if enqueue:
        study.enqueue_trial(enqueue, skip_if_exists=True)
    study.optimize(objective, n_trials=n_trials, show_progress_bar=progress, catch=())
    return study


def check_selection(selection: dict | None, space: dict, where: str = "model.selection") -> dict:
    """The selection spec, checked against the search space: {rule, simpler: {param: low|high}}."""
    selection = dict(selection or {})
    rule = selection.get("rule", "best")
    if rule not in SELECTION_RULES:
        raise ValueError(f"{where}.rule: unknown rule {rule!r} (one of {', '.join(SELECTION_RULES)})")
    simpler = dict(selection.get("simpler") or {})
    if rule == "one_se" and not simpler:
        raise ValueError(f"{where}.simpler: the one_se rule needs an order of simplicity, e.g. {{max_depth: low}}")
    for name, prefer in simpler.items():
        spec = space.get(name)
        if spec is None or spec.get("type") not in ("int", "float"):
            raise ValueError(f"{where}.simpler: {name!r} is not a numeric parameter of the search space "
                             f"({sorted(space)})")
        if prefer not in ("low", "high"):
            raise ValueError(f"{where}.simpler.{name}: {prefer!r} must be 'low' or 'high' (which values are simpler)")
    return {"rule": rule, "simpler": simpler}


def standard_error(trial: optuna.trial.FrozenTrial) -> float:
    """Standard error of a trial's CV MAPE over its folds (0 with fewer than two folds recorded)."""
    folds = np.asarray(trial.user_attrs.get(FOLD_SCORES_ATTR) or [], dtype=float)
    if len(folds) < 2 or not np.all(np.isfinite(folds)):
        return 0.0
    return float(folds.std(ddof=1) / math.sqrt(len(folds)))


def select_trial(study: optuna.Study, selection: dict | None = None,
                 space: dict | None = None) -> optuna.trial.FrozenTrial:
    """The trial whose parameters are refit on the whole training part.

    `best` (default): the lowest CV MAPE, as `study.best_trial`. `incumbent`: the warm start (the enqueued first
    trial) unless the best trial's CV MAPE is lower than the warm start's by more than the warm start's standard
    error over its folds (no warm start: `best`). Why: with two trials on two grouped CV folds, argmin swaps the
    hand-set parameters for TPE's random draw on noise; measured on XGBoost (docs/experiments.md). `one_se`: CART's
    one-standard-error rule
    (Breiman et al. 1984, 3.4.3; Hastie et al., ESL 7.10): among the complete trials whose CV MAPE is within one
    standard error (over its CV folds) of the best one's, the simplest by `simpler` (lexicographic in its order,
    `low` or `high` values being simpler; ties by CV MAPE). Why: with a few grouped CV folds the scores of
    different trials are often within noise of each other, and argmin then picks among them by chance, deepest
    tree included.
    """
    sel = check_selection(selection, space if space is not None else {k: {"type": "float"} for k in
                                                                       (selection or {}).get("simpler") or {}})
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE
            and t.value is not None and math.isfinite(t.value)]
    if not done:
        raise ValueError(f"study {study.study_name}: no complete trial with a finite CV MAPE to select")
    best = min(done, key=lambda t: (t.value, t.number))
    if sel["rule"] == "best":
        return best
    if sel["rule"] == "incumbent":
        warm = [t for t in done if t.system_attrs.get("fixed_params")]
        if not warm:
            return best
        incumbent = min(warm, key=lambda t: t.number)
        return best if best.value < incumbent.value - standard_error(incumbent) else incumbent
    limit = best.value + standard_error(best)
    within = [t for t in done if t.value <= limit]

    def simplicity(t: optuna.trial.FrozenTrial) -> tuple:
        return tuple(float(t.params[k]) * (1 if d == "low" else -1) for k, d in sel["simpler"].items()) + (
            t.value, t.number)

    return min(within, key=simplicity)


def trials_frame(study: optuna.Study, selected: int | None = None) -> pd.DataFrame:
    """Trials as committed to reports (DVC-hashed): no durations or timestamps, which differ on every run;
    per-fold CV MAPE and, when given, which trial was `selected` for the refit."""
    frame = study.trials_dataframe(attrs=("number", "value", "params", "state"))
    frame[FOLD_SCORES_ATTR] = [json.dumps([round(v, 6) for v in t.user_attrs.get(FOLD_SCORES_ATTR) or []])
                               for t in study.trials]
    if selected is not None:
        frame["selected"] = frame["number"] == selected
    return frame
