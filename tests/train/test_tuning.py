"""Trial selection: the lowest CV MAPE, or CART's one-standard-error rule over the CV folds."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from src.train.point import mape_optimal_shift
from src.train.tuning import FOLD_SCORES_ATTR, OOF_SHIFT_ATTR, cv_mape, select_trial, standard_error, trials_frame

SPACE = {"max_depth": {"type": "int", "low": 2, "high": 40},
         "min_samples_leaf": {"type": "int", "low": 1, "high": 40},
         "max_features": {"type": "categorical", "choices": [1.0, 0.5]}}
ONE_SE = {"rule": "one_se", "simpler": {"max_depth": "low", "min_samples_leaf": "high"}}
DISTRIBUTIONS = {"max_depth": optuna.distributions.IntDistribution(2, 40),
                 "min_samples_leaf": optuna.distributions.IntDistribution(1, 40)}


def study_of(trials: list[tuple[int, int, list[float] | None]]) -> optuna.Study:
    """An in-memory study of complete trials (max_depth, min_samples_leaf, fold MAPEs); value = mean of folds."""
    study = optuna.create_study(direction="minimize")
    for depth, leaf, folds in trials:
        study.add_trial(optuna.trial.create_trial(
            params={"max_depth": depth, "min_samples_leaf": leaf}, distributions=DISTRIBUTIONS,
            value=float(np.mean(folds)), user_attrs={FOLD_SCORES_ATTR: folds}))
    return study


def test_best_rule_is_optunas_best_trial():
    study = study_of([(20, 2, [30.0, 32.0]), (34, 1, [20.0, 35.6]), (6, 8, [27.0, 29.6])])
    assert select_trial(study).number == study.best_trial.number == 1
    assert select_trial(study, {"rule": "best"}, SPACE).number == 1


def test_one_se_picks_the_shallowest_tree_within_one_standard_error_of_the_best():
    # best: depth 34, folds 20 / 35.6 -> mean 27.8, SE = std(ddof=1) / sqrt(2) = 7.8; limit 35.6
    study = study_of([(34, 1, [20.0, 35.6]), (12, 4, [27.0, 29.6]), (6, 8, [30.0, 32.4]), (4, 30, [40.0, 50.0])])
    assert standard_error(study.trials[0]) == pytest.approx(7.8)
    chosen = select_trial(study, ONE_SE, SPACE)
    assert (chosen.params["max_depth"], chosen.value) == (6, pytest.approx(31.2))   # depth 4 is at 45 > 35.6


def test_one_se_breaks_depth_ties_by_the_larger_leaves_then_by_cv():
    study = study_of([(10, 1, [24.0, 26.0]), (8, 2, [25.0, 27.0]), (8, 9, [25.5, 27.5]), (8, 9, [25.2, 26.8])])
    chosen = select_trial(study, ONE_SE, SPACE)
    assert (chosen.params["max_depth"], chosen.params["min_samples_leaf"], chosen.number) == (8, 9, 3)


def test_one_se_is_argmin_when_the_best_trial_has_no_spread():
    study = study_of([(30, 1, [20.0, 20.0]), (4, 20, [20.5, 20.5])])
    assert select_trial(study, ONE_SE, SPACE).number == 0
    single = study_of([(30, 1, [20.0]), (4, 20, [20.5])])          # one fold: no standard error
    assert standard_error(single.trials[0]) == 0.0
    assert select_trial(single, ONE_SE, SPACE).number == 0


def test_pruned_failed_and_infinite_trials_are_never_selected():
    study = study_of([(30, 1, [20.0, 40.0])])
    study.add_trial(optuna.trial.create_trial(params={"max_depth": 2, "min_samples_leaf": 40},
                                              distributions=DISTRIBUTIONS, state=optuna.trial.TrialState.PRUNED))
    study.add_trial(optuna.trial.create_trial(params={"max_depth": 3, "min_samples_leaf": 40},
                                              distributions=DISTRIBUTIONS, value=float("inf")))
    assert select_trial(study, ONE_SE, SPACE).number == 0
    with pytest.raises(ValueError, match="no complete trial"):
        select_trial(optuna.create_study(study_name="empty"), ONE_SE, SPACE)


@pytest.mark.parametrize("selection, match", [
    ({"rule": "lowest"}, r"model.selection.rule: unknown rule 'lowest'"),
    ({"rule": "one_se"}, r"model.selection.simpler: the one_se rule needs an order"),
    ({"rule": "one_se", "simpler": {"depth": "low"}}, r"'depth' is not a numeric parameter"),
    ({"rule": "one_se", "simpler": {"max_features": "low"}}, r"'max_features' is not a numeric parameter"),
    ({"rule": "one_se", "simpler": {"max_depth": "small"}}, r"simpler.max_depth: 'small' must be 'low' or 'high'"),
])
def test_bad_selection_specs_name_the_field(selection, match):
    with pytest.raises(ValueError, match=match):
        select_trial(study_of([(4, 1, [1.0, 2.0])]), selection, SPACE)


def test_cv_mape_records_each_folds_score_on_the_trial_and_the_frame_marks_the_selected_one():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.uniform(1, 2, 200), "b": rng.uniform(1, 2, 200)})
    y = (X["a"] * 3 + X["b"]).to_numpy()
    idx = np.arange(200)
    splits = [(idx[idx % 2 == 0], idx[idx % 2 == 1]), (idx[idx % 2 == 1], idx[idx % 2 == 0])]

    def make(params):
        return DecisionTreeRegressor(random_state=0, **params)

    study = optuna.create_study(direction="minimize")
    study.optimize(lambda t: cv_mape(make, {"max_depth": t.suggest_int("max_depth", 1, 8)}, X, y, splits, t),
                   n_trials=3)
    for t in study.trials:
        folds = t.user_attrs[FOLD_SCORES_ATTR]
        assert len(folds) == 2 and np.mean(folds) == pytest.approx(t.value)
    chosen = select_trial(study, {"rule": "one_se", "simpler": {"max_depth": "low"}},
                          {"max_depth": {"type": "int", "low": 1, "high": 8}})
    frame = trials_frame(study, chosen.number)
    assert frame["selected"].tolist() == [t.number == chosen.number for t in study.trials]
    assert [json.loads(v) for v in frame[FOLD_SCORES_ATTR]] == [
        [round(v, 6) for v in t.user_attrs[FOLD_SCORES_ATTR]] for t in study.trials]


def _noisy_rows(seed: int) -> tuple[pd.DataFrame, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """300 rows with a 30 % log-normal error, a flag column `b` on every fifth row, and 3 interleaved CV splits."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.uniform(1, 2, 300), "b": (np.arange(300) % 5 == 0).astype(int)})
    y = (X["a"] * 3).to_numpy() * np.exp(rng.normal(0, 0.3, 300))
    idx = np.arange(300)
    return X, y, [(idx[idx % 3 != k], idx[idx % 3 == k]) for k in range(3)]


def _recorded_shift(make, X: pd.DataFrame, y: np.ndarray, splits) -> float:
    study = optuna.create_study(direction="minimize")
    study.optimize(lambda t: cv_mape(make, {"max_depth": 2}, X, y, splits, t), n_trials=1)
    return study.trials[0].user_attrs[OOF_SHIFT_ATTR]


def test_cv_mape_records_the_mape_optimal_shift_of_the_pooled_out_of_fold_predictions():
    X, y, splits = _noisy_rows(1)
    X = X[["a"]]

    def make(params):
        return DecisionTreeRegressor(random_state=0, **params)

    oof = np.concatenate([np.log(make({"max_depth": 2}).fit(X.iloc[tr], y[tr]).predict(X.iloc[va]) / y[va])
                          for tr, va in splits])
    shift = _recorded_shift(make, X, y, splits)
    assert shift == pytest.approx(mape_optimal_shift(oof), abs=1e-12)
    assert shift < -0.03  # wide errors: the MAPE point lies below the middle


def _with_warm_start(warm_folds: list[float], others: list[list[float]]) -> optuna.Study:
    """A study whose first trial was enqueued (the model's warm start), then complete trials with these folds."""
    study = optuna.create_study(direction="minimize")
    study.enqueue_trial({"max_depth": 8, "min_samples_leaf": 2})
    folds = iter([warm_folds, *others])
    depths = iter(range(20, 40))

    def objective(trial: optuna.trial.Trial) -> float:
        trial.suggest_int("max_depth", 2, 40) if trial.number == 0 else trial.suggest_int(
            "max_depth", next(depths), 40)
        trial.suggest_int("min_samples_leaf", 1, 40)
        scores = next(folds)
        trial.set_user_attr(FOLD_SCORES_ATTR, scores)
        return float(np.mean(scores))

    study.optimize(objective, n_trials=1 + len(others))
    return study


def test_incumbent_keeps_the_warm_start_unless_a_trial_beats_it_by_more_than_its_standard_error():
    rule = {"rule": "incumbent"}
    # warm start 16 / 20 (mean 18, SE 2): a trial at 16.5 is within noise, one at 15.5 is not
    assert select_trial(_with_warm_start([16.0, 20.0], [[15.0, 18.0]]), rule, SPACE).number == 0
    assert select_trial(_with_warm_start([16.0, 20.0], [[14.0, 17.0]]), rule, SPACE).number == 1
    # a worse challenger never wins; without a warm start the rule is argmin
    assert select_trial(_with_warm_start([16.0, 20.0], [[30.0, 31.0]]), rule, SPACE).number == 0
    study = study_of([(20, 2, [30.0, 32.0]), (34, 1, [20.0, 35.6])])
    assert select_trial(study, rule, SPACE).number == 1


def test_the_out_of_fold_shift_is_read_from_the_rows_the_learner_answers():
    """Rows the unseen-kind fallback answers are not moved by the shift, so they do not vote for it."""

    class FallbackTree(DecisionTreeRegressor):
        """A tree whose `unseen` marks rows with b == 1 (as the efficiency target's fallback marks a runtime)."""

        def unseen(self, X):
            return {"b": X["b"].to_numpy() == 1}

        def predict(self, X):
            out = super().predict(X[["a"]])
            return np.where(X["b"].to_numpy() == 1, out * 3.0, out)  # a far-off fallback answer

        def fit(self, X, y):
            return super().fit(X[["a"]], y)

    X, y, splits = _noisy_rows(2)

    def make(params):
        return FallbackTree(random_state=0, **params)

    learned = []
    for tr, va in splits:
        m = make({"max_depth": 2}).fit(X.iloc[tr], y[tr])
        keep = X["b"].to_numpy()[va] == 0
        learned.append(np.log(m.predict(X.iloc[va]) / y[va])[keep])
    shift = _recorded_shift(make, X, y, splits)
    assert shift == pytest.approx(mape_optimal_shift(np.concatenate(learned)), abs=1e-12)
    # with every validation row answered by the fallback there is nothing to read: no shift
    assert _recorded_shift(make, X.assign(b=1), y, splits) == 0.0
