"""Permutation importance answers every shuffled copy in one call: sklearn's numbers for a row-wise model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from sklearn.inspection import permutation_importance

from src.config import compose
from src.features.engineer import input_columns
from src.train.fit import fit_model, ptx_columns
from src.train.importance import neg_mape_scorer, permutation
from tests.train.tiny import overrides


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    ov = overrides(tmp_path_factory.mktemp("importance"))
    c = OmegaConf.to_container(compose([*ov, "model=xgb"]), resolve=True)
    df = pd.read_parquet(c["data"]["dataset"])
    cols = input_columns(c["features"], ptx_columns(c, df))
    train = df.sample(frac=0.7, random_state=0)
    test = df.drop(train.index)
    return fit_model(c, train), test[cols], test["target"].to_numpy(dtype=float), cols


@pytest.mark.parametrize("max_rows, repeats", [(10_000, 1), (40, 2), (25, 3)])
def test_the_same_numbers_as_sklearns_permutation_importance(fitted, max_rows, repeats):
    model, X, y, cols = fitted
    got = permutation(model, X, y, cols, max_rows, repeats, seed=7)
    if len(X) > max_rows:  # the same row sample as permutation() draws
        pick = np.random.default_rng(7).choice(len(X), size=max_rows, replace=False)
        X, y = X.iloc[pick], y[pick]
    want = permutation_importance(model, X[cols], y, scoring=neg_mape_scorer, n_repeats=repeats, random_state=7)
    assert list(got) == cols
    assert got == dict(zip(cols, want.importances_mean.astype(float).tolist(), strict=True))
    assert any(v > 0 for v in got.values())  # some column matters: the comparison is not between zeros


def test_the_rows_and_the_model_are_left_as_they_were(fitted):
    model, X, y, cols = fitted
    before = X.copy()
    first = permutation(model, X, y, cols, 10_000, 2, seed=3)
    pd.testing.assert_frame_equal(X, before)
    assert permutation(model, X, y, cols, 10_000, 2, seed=3) == first
    assert permutation(model, X, y, cols, 10_000, 2, seed=4) != first
