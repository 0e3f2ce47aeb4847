"""A fold whose every held-out row the efficiency target's fallback answers fits the warm start alone (tiny table).

Why: with `target.unseen_fallback`, a held-out row whose runtime (or precision class) no training row ran gets the
bare physics estimate x the median training efficiency, whatever the learner's parameters; tuning such a fold
(every leave_runtime_out fold) changes no held-out prediction and cost ~150 s of the main job.
"""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from src.config import compose
from src.train.protocols import Fold, group_labels
from src.train.run import Trainer
from tests.train.tiny import overrides


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    ov = overrides(tmp_path_factory.mktemp("fallback_folds"), n_trials=3, protocols="[random]")
    tr = Trainer(OmegaConf.to_container(compose([*ov, "model=dt"]), resolve=True))
    assert tr.c["target"]["unseen_fallback"] and set(tr.df["compile_mode"]) == {"eager"}
    # the tiny table is eager only: call one GPU's rows a torch.compile run, so another runtime exists
    compiled = (tr.df["gpu"] == tr.df["gpu"].iloc[0]).to_numpy()
    tr.df.loc[compiled, "compile_mode"] = "torch_compile"
    tr.X = tr.df[tr.cols]
    return tr, compiled


def fit(tr, train: np.ndarray, test: np.ndarray, name: str):
    warm = dict(tr.c["model"]["warm_start"])
    fold = Fold(name, np.flatnonzero(train), np.flatnonzero(test), [])
    return tr.fit_fold("leave_runtime_out", fold, group_labels(tr.df, "random"), warm, False, name)


def test_a_fold_the_fallback_answers_entirely_is_not_tuned(trainer):
    tr, compiled = trainer
    study, chosen, model, pred, timing, n_trials = fit(tr, ~compiled, compiled, "runtime_unseen")
    # no learner is fitted (one column's kind is new on every held-out row): no study, no trial, no CV score
    assert n_trials == 0 and study is None and timing["tune"] == 0.0 and np.isnan(chosen.value)
    assert model.learner_fitted_ is False
    assert chosen.params == tr.c["model"]["warm_start"]
    # and its held-out predictions are the fallback's: the bare estimate x the training efficiency at the MAPE
    # point (target.point=mape), below the median
    X = tr.X.iloc[np.flatnonzero(compiled)]
    np.testing.assert_allclose(pred, np.exp(model.fallback_log_efficiency_) * model.baseline_ms(X), rtol=1e-12)
    assert model.fallback_log_efficiency_ < model.median_log_efficiency_


def test_a_fold_with_one_row_the_learner_answers_gets_the_full_budget(trainer):
    tr, compiled = trainer
    test = compiled.copy()
    test[np.flatnonzero(~compiled)[0]] = True  # one eager row held out beside the compiled ones
    study, _, _, _, _, n_trials = fit(tr, ~test, test, "runtime_mixed")
    assert n_trials == tr.budget()["n_trials"] == 3 and len(study.trials) == 3


def test_without_the_fallback_every_fold_is_tuned(trainer):
    tr, compiled = trainer
    tr.c["target"]["unseen_fallback"] = False
    try:
        assert not tr.fallback_only(Fold("x", np.flatnonzero(~compiled), np.flatnonzero(compiled), []))
    finally:
        tr.c["target"]["unseen_fallback"] = True


def test_a_fold_held_out_by_runtime_skips_the_learner_and_scores_the_same(trainer):
    from sklearn.base import clone

    from src.train.estimators import native_importances
    from src.train.importance import permutation

    tr, compiled = trainer
    _, chosen, bare, pred, _, _ = fit(tr, ~compiled, compiled, "runtime_unseen_bare")
    assert bare.learner_fitted_ is False and native_importances(bare, tr.name) is None
    whole = clone(bare).fit(tr.X.iloc[np.flatnonzero(~compiled)], tr.y[~compiled])
    X, y = tr.X.iloc[np.flatnonzero(compiled)], tr.y[compiled]
    np.testing.assert_allclose(pred, whole.predict(X), rtol=1e-12)
    # every input column shuffled among the held-out rows: the same importances as the whole model's
    args = (X, y, tr.cols, 1000, 2, tr.seed)
    assert permutation(bare, *args) == pytest.approx(permutation(whole, *args), rel=1e-12, abs=1e-12)


def test_the_served_protocol_and_mixed_folds_fit_the_learner(trainer):
    tr, compiled = trainer
    test = compiled.copy()
    test[np.flatnonzero(~compiled)[0]] = True
    assert fit(tr, ~test, test, "runtime_mixed_fit")[2].learner_fitted_ is True
    warm = dict(tr.c["model"]["warm_start"])
    fold = Fold("served", np.flatnonzero(~compiled), np.flatnonzero(compiled), [])
    model = tr.fit_fold("random", fold, group_labels(tr.df, "random"), warm, False, "served")[2]
    assert model.learner_fitted_ is True  # the random protocol's model is the one served
