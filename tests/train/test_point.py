"""The MAPE-optimal log shift: exact against a brute-force search, and the rule check."""

import numpy as np
import pytest

from src.train.point import OOF_WEIGHT, blended_shift, check_rule, mape_optimal_shift


def brute_force(r: np.ndarray) -> float:
    grid = np.linspace(-1.0, 1.0, 20001)
    loss = np.abs(np.exp(r[None, :] + grid[:, None]) - 1.0).mean(axis=1)
    return float(grid[int(np.argmin(loss))])


@pytest.mark.parametrize("seed,spread,offset", [(0, 0.1, 0.0), (1, 0.4, 0.2), (2, 0.8, -0.3), (3, 0.05, 0.5)])
def test_shift_minimises_mape_like_a_grid_search(seed, spread, offset):
    r = np.random.default_rng(seed).normal(offset, spread, 801)
    c = mape_optimal_shift(r)
    mape = lambda s: np.abs(np.exp(r + s) - 1.0).mean()  # noqa: E731
    assert c == pytest.approx(brute_force(r), abs=2e-3)
    assert mape(c) <= mape(c + 0.01) and mape(c) <= mape(c - 0.01)


def test_shift_lies_below_the_median_and_grows_with_the_spread():
    """Log-normal errors of spread s: the MAPE point is about the median x exp(-s^2)."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal(200_001)
    for s in (0.1, 0.3, 0.5):
        assert mape_optimal_shift(s * z) == pytest.approx(-s * s, abs=0.01)
    assert mape_optimal_shift(0.5 * z) < mape_optimal_shift(0.1 * z) < 0.0


def test_one_ratio_is_undone_exactly():
    assert mape_optimal_shift(np.array([0.3])) == pytest.approx(-0.3)


def test_bad_ratios_are_refused():
    with pytest.raises(ValueError, match="no ratios"):
        mape_optimal_shift(np.array([]))
    with pytest.raises(ValueError, match="1 of 3 log ratios are not finite"):
        mape_optimal_shift(np.array([0.1, np.inf, 0.2]))


def test_blend_weights_are_efrons():
    assert blended_shift(0.0, 1.0) == pytest.approx(OOF_WEIGHT) == pytest.approx(0.632)
    assert blended_shift(1.0, 0.0) == pytest.approx(0.368)


def test_rule_names():
    assert check_rule(None) == "median"
    assert check_rule("mape") == "mape"
    with pytest.raises(ValueError, match=r"target.point: 'mean' is not one of \['median', 'mape'\]"):
        check_rule("mean")
