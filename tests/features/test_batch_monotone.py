"""Answers that never fall as the batch grows: the isotonic fit over the powers of two, per configuration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

from src.features.batch_monotone import configuration_ids, isotonic_rows, monotone_in_batch


def wavy(X) -> np.ndarray:
    """A 'model' that falls between batch 8 and 32 (a tree stepping down where a step stops being launch-bound),
    scaled per GPU so configurations differ."""
    b = np.asarray(X["batch_size"], dtype=float)
    scale = np.where(np.asarray(X["gpu"]) == "A", 1.0, 3.0)
    return scale * (1.0 + 0.1 * b + np.where((b > 8) & (b <= 32), -0.6, 0.0))


def frame(batches: list[int], gpu: str = "A") -> pd.DataFrame:
    return pd.DataFrame({"gpu": [gpu] * len(batches), "batch_size": batches})


def test_isotonic_rows_is_the_least_squares_non_decreasing_fit():
    values = np.random.default_rng(0).normal(size=(300, 13))
    expected = np.array([IsotonicRegression().fit_transform(np.arange(13), v) for v in values])
    np.testing.assert_allclose(isotonic_rows(values), expected, atol=1e-12)
    ordered = np.sort(values, axis=1)
    np.testing.assert_allclose(isotonic_rows(ordered), ordered, rtol=1e-12, atol=1e-12)  # already monotone: kept


def test_a_falling_answer_becomes_non_decreasing_over_any_sweep():
    sweep = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 128, 256, 1024, 4096]
    raw = wavy(frame(sweep))
    assert (np.diff(raw) < 0).any()  # the model itself falls
    out = monotone_in_batch(wavy, frame(sweep))
    assert (np.diff(out) >= 0).all()
    # the same rows asked one by one, or among other configurations, get the same answers
    alone = np.concatenate([monotone_in_batch(wavy, frame([b])) for b in sweep])
    np.testing.assert_allclose(alone, out, rtol=1e-12)
    mixed = pd.concat([frame(sweep, "B"), frame(sweep)], ignore_index=True)
    np.testing.assert_allclose(monotone_in_batch(wavy, mixed)[len(sweep):], out, rtol=1e-12)


def test_powers_of_two_take_the_fit_and_other_batches_are_clipped_between_their_neighbours():
    grid = 2 ** np.arange(13)
    fit = np.exp(isotonic_rows(np.log(wavy(frame(list(grid))))[None, :]))[0]
    np.testing.assert_allclose(monotone_in_batch(wavy, frame(list(grid))), fit, rtol=1e-12)
    # 12 lies between 8 and 16: its own answer, clipped into [fit(8), fit(16)]
    own = wavy(frame([12]))[0]
    expected = np.clip(own, fit[3], fit[4])
    assert monotone_in_batch(wavy, frame([12]))[0] == pytest.approx(expected, rel=1e-12)
    # a model already non-decreasing in the batch is answered as it is
    def rising(X):
        return 2.0 + np.asarray(X["batch_size"], dtype=float) ** 0.5

    sweep = frame([1, 5, 12, 64, 100, 5000])
    np.testing.assert_array_equal(monotone_in_batch(rising, sweep), rising(sweep))  # bit for bit


def test_a_batch_above_the_grid_extends_it_and_arrays_answer_as_frames():
    big = frame([2048, 8192, 10000])
    out = monotone_in_batch(wavy, big)
    assert (np.diff(out) >= 0).all()
    arrays = {c: big[c].to_numpy() for c in big.columns}
    np.testing.assert_allclose(monotone_in_batch(wavy, arrays), out, rtol=1e-12)


def test_without_a_batch_column_or_with_a_bad_batch():
    no_batch = pd.DataFrame({"gpu": ["A", "B"]})
    np.testing.assert_allclose(monotone_in_batch(lambda X: np.array([1.0, 2.0]), no_batch), [1.0, 2.0])
    with pytest.raises(ValueError, match="batch_size must be finite numbers >= 1"):
        monotone_in_batch(wavy, frame([0]))
    with pytest.raises(ValueError, match="batch_size"):
        monotone_in_batch(wavy, pd.DataFrame({"gpu": ["A"], "batch_size": [np.nan]}))


def test_configurations_are_rows_equal_in_all_but_the_batch():
    X = pd.DataFrame({"gpu": ["A", "A", "B", "A"], "precision": ["fp32", "fp32", "fp32", "fp16"],
                      "batch_size": [1, 8, 1, 1]})
    ids = configuration_ids(X)
    assert ids[0] == ids[1] and len({ids[0], ids[2], ids[3]}) == 3


def test_another_configurations_large_batch_does_not_change_an_answer():
    """A configuration's grid reaches 4096 or its own largest batch: a row of another configuration at 8192 in the
    same call leaves its answers as they are; its own row at 8192 extends its grid and stays monotone."""
    own = frame([12, 256, 4096])
    alone = monotone_in_batch(wavy, own)
    mixed = pd.concat([own, frame([8192], "B")], ignore_index=True)
    np.testing.assert_array_equal(monotone_in_batch(wavy, mixed)[:3], alone)
    longer = monotone_in_batch(wavy, frame([12, 256, 4096, 8192]))
    assert (np.diff(longer) >= 0).all()
