"""Metric functions against values computed by hand."""

import math

import pytest

from src.train.metrics import adjusted_r2, all_metrics, mape, median_ape, r2, support_metrics, within


def test_mape_and_median_by_hand():
    # errors: |110-100|/100 = 10 %, |45-50|/50 = 10 %, |26-20|/20 = 30 %, |8-10|/10 = 20 %
    t, p = [100, 50, 20, 10], [110, 45, 26, 8]
    assert mape(t, p) == pytest.approx(17.5)
    assert median_ape(t, p) == pytest.approx(15.0)
    assert within(t, p, 10.0) == pytest.approx(0.5)


def test_r2_by_hand():
    # mean 2.5; ss_tot = 2.25+0.25+0.25+2.25 = 5; ss_res = 0.01+0.04+0+0.09 = 0.14
    t, p = [1, 2, 3, 4], [1.1, 1.8, 3.0, 4.3]
    assert r2(t, p) == pytest.approx(1 - 0.14 / 5)


def test_adjusted_r2_with_n_and_p():
    # 1 - (1 - 0.9) * (100 - 1) / (100 - 5 - 1) = 1 - 0.1 * 99 / 94
    assert adjusted_r2(0.9, 100, 5) == pytest.approx(1 - 0.1 * 99 / 94)
    assert adjusted_r2(0.5, 10, 1) == pytest.approx(1 - 0.5 * 9 / 8)
    assert math.isnan(adjusted_r2(0.9, 5, 4))


def test_all_metrics_names_and_errors():
    m = all_metrics([100, 50, 20, 10], [110, 45, 26, 8], n_features=1)
    assert set(m) == {"mape", "median_ape", "within_10pct", "r2", "adj_r2", "r2_log", "n_rows"}
    assert m["adj_r2"] == pytest.approx(adjusted_r2(m["r2"], 4, 1))
    with pytest.raises(ValueError, match="contains 0"):
        mape([0, 1], [1, 1])
    with pytest.raises(ValueError, match="y_true has 2 values, y_pred 3"):
        mape([1, 2], [1, 2, 3])


def test_r2_log_accepts_a_one_millisecond_row():
    """log(1.0 ms) = 0 is a valid log target; only relative errors need y_true != 0."""
    import numpy as np

    from src.train.metrics import all_metrics

    t, p = np.array([1.0, 2.0, 4.0]), np.array([1.1, 1.9, 4.2])
    m = all_metrics(t, p, n_features=1)
    log_t, log_p = np.log(t), np.log(p)
    expected = 1 - np.sum((log_t - log_p) ** 2) / np.sum((log_t - log_t.mean()) ** 2)
    assert m["r2_log"] == pytest.approx(expected)



def test_support_metrics_split_the_error_by_setting_support():
    # seen rows: 10 % and 10 % off; other release: 30 % off; unseen: 20 % off
    t, p = [100, 50, 20, 10], [110, 45, 26, 8]
    m = support_metrics(t, p, ["seen", "seen", "other_release", "unseen"])
    assert m == pytest.approx({"seen_setting_rows": 2.0, "seen_setting_mape": 10.0, "other_release_setting_rows": 1.0,
                               "other_release_setting_mape": 30.0, "unseen_setting_rows": 1.0,
                               "unseen_setting_mape": 20.0})
    # pooled MAPE is the row-weighted mean of the levels
    assert (10.0 * 2 + 30.0 + 20.0) / 4 == pytest.approx(mape(t, p))
    every = support_metrics(t, p, ["seen"] * 4)
    assert every["unseen_setting_rows"] == 0 and math.isnan(every["unseen_setting_mape"])
    with pytest.raises(ValueError, match="support has 3 values, y_true 4"):
        support_metrics(t, p, ["seen"] * 3)
    with pytest.raises(ValueError, match=r"support labels \['True'\] are not among \['seen', 'other_release', "
                                         r"'unseen'\]"):
        support_metrics(t, p, ["seen", "seen", "seen", "True"])
