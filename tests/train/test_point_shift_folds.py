"""Each fold model answers the MAPE point (`target.point: mape`), its shift read from training rows only (tiny
table)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from omegaconf import OmegaConf

from src.config import compose
from src.train.point import blended_shift, mape_optimal_shift
from src.train.protocols import Fold, cv_splits, group_labels, subsample
from src.train.run import Trainer
from src.train.tuning import OOF_SHIFT_ATTR
from tests.train.tiny import overrides


def trainer(tmp_path, *extra: str) -> Trainer:
    ov = overrides(tmp_path, n_trials=2, protocols="[random]")
    return Trainer(OmegaConf.to_container(compose([*ov, "model=xgb", *extra]), resolve=True))


def fit_gpu_fold(tr: Trainer):
    """Hold out one GPU (a fold of leave_gpu_out)."""
    held = (tr.df["gpu"] == tr.df["gpu"].iloc[0]).to_numpy()
    fold = Fold("gpu0", np.flatnonzero(~held), np.flatnonzero(held), [])
    labels = group_labels(tr.df, "leave_gpu_out")
    return fold, labels, tr.fit_fold("leave_gpu_out", fold, labels, dict(tr.c["model"]["warm_start"]), False, "g")


def test_the_fold_model_carries_the_632_blend_of_its_tuning_cv_and_in_sample_shifts(tmp_path):
    tr = trainer(tmp_path)
    assert tr.c["target"]["point"] == "mape"  # the default
    fold, labels, (study, chosen, model, pred, _, _) = fit_gpu_fold(tr)
    oof = chosen.user_attrs[OOF_SHIFT_ATTR]
    # recompute both halves by hand: the chosen trial's grouped tuning CV, and the final model on the tuning rows
    b = tr.budget()
    idx = subsample(fold.train, b["tune_max_rows"], tr.seed)
    splits = cv_splits(len(idx), labels[idx], b["cv_folds"], tr.seed)
    by_hand = np.concatenate([np.log(tr.make_model(chosen.params).fit(tr.X.iloc[idx[a]], tr.y[idx[a]])
                                     .predict(tr.X.iloc[idx[v]]) / tr.y[idx[v]]) for a, v in splits])
    assert oof == pytest.approx(mape_optimal_shift(by_hand), abs=1e-9)
    unshifted = copy.copy(model).set_params(point_shift=0.0)
    in_sample = np.log(unshifted.predict(tr.X.iloc[idx]) / tr.y[idx])
    assert model.point_shift == pytest.approx(blended_shift(mape_optimal_shift(in_sample), oof), abs=1e-12)
    assert model.point_shift != 0.0
    # the held-out answer is the shifted one
    np.testing.assert_allclose(pred, unshifted.predict(tr.X.iloc[fold.test]) * np.exp(model.point_shift), rtol=1e-6)


def test_median_keeps_the_learners_answer_and_latency_refuses_mape(tmp_path):
    tr = trainer(tmp_path / "median", "target.point=median")
    assert fit_gpu_fold(tr)[2][2].point_shift == 0.0
    tr = trainer(tmp_path / "latency", "target=latency", "+target.point=mape")
    with pytest.raises(ValueError, match="target.point=mape shifts the learned efficiency: it needs target=efficiency"):
        fit_gpu_fold(tr)
