"""Regression metrics on the ORIGINAL scale (ms), as the paper reports them.

MAPE and median APE are in percent; `within_10pct` is the share (0..1) of predictions within +-10 %.
R^2 is on the original scale; `r2_log` on log values is logged too. Adjusted R^2 uses n = rows scored and
p = number of features the estimator sees (after one-hot encoding).
"""

from __future__ import annotations

import numpy as np

from src.train.protocols import SUPPORT_LEVELS


def _arrays(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=float).ravel()
    p = np.asarray(y_pred, dtype=float).ravel()
    if t.shape != p.shape:
        raise ValueError(f"y_true has {t.size} values, y_pred {p.size}")
    if t.size == 0:
        raise ValueError("no values to score")
    if np.any(t == 0):
        raise ValueError("y_true contains 0: relative errors undefined")
    return t, p


def ape(y_true, y_pred) -> np.ndarray:
    """Absolute percentage errors, in percent."""
    t, p = _arrays(y_true, y_pred)
    return np.abs(p - t) / np.abs(t) * 100.0


def mape(y_true, y_pred) -> float:
    return float(np.mean(ape(y_true, y_pred)))


def median_ape(y_true, y_pred) -> float:
    return float(np.median(ape(y_true, y_pred)))


def within(y_true, y_pred, pct: float = 10.0) -> float:
    """Share of predictions whose relative error is at most `pct` percent."""
    return float(np.mean(ape(y_true, y_pred) <= pct + 1e-12))


def r2(y_true, y_pred) -> float:
    t, p = _arrays(y_true, y_pred)
    return _r2(t, p)


def _r2(t: np.ndarray, p: np.ndarray) -> float:
    """Coefficient of determination without the relative-error check (log targets may be 0: a 1.0 ms row)."""
    ss_res = float(np.sum((t - p) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - ss_res / ss_tot


def adjusted_r2(r2_value: float, n: int, p: int) -> float:
    """1 - (1 - R^2) (n - 1) / (n - p - 1); NaN when n - p - 1 <= 0 (too few rows for p features)."""
    if n - p - 1 <= 0:
        return float("nan")
    return 1.0 - (1.0 - r2_value) * (n - 1) / (n - p - 1)


def all_metrics(y_true, y_pred, n_features: int) -> dict[str, float]:
    """The metric set logged for every model/protocol/fold (names are the MLflow metric names)."""
    t, p = _arrays(y_true, y_pred)
    r2_orig = r2(t, p)
    pos = (t > 0) & (p > 0)
    return {
        "mape": mape(t, p),
        "median_ape": median_ape(t, p),
        "within_10pct": within(t, p, 10.0),
        "r2": r2_orig,
        "adj_r2": adjusted_r2(r2_orig, t.size, n_features),
        "r2_log": _r2(np.log(t[pos]), np.log(p[pos])) if pos.sum() > 1 else float("nan"),
        "n_rows": float(t.size),
    }



def support_metrics(y_true, y_pred, support, levels: tuple[str, ...] = SUPPORT_LEVELS) -> dict[str, float]:
    """Rows and MAPE of the held-out rows at each support level (src.train.protocols.setting_support: was the
    row's measurement setting in training, only under another release, or not at all): how much of a protocol's
    error the data could not support. NaN MAPE for a level with no rows; an unknown label is an error."""
    t, p = _arrays(y_true, y_pred)
    s = np.asarray(support, dtype=object).ravel()
    if s.shape != t.shape:
        raise ValueError(f"support has {s.size} values, y_true {t.size}")
    unknown = sorted(set(s.tolist()) - set(levels))
    if unknown:
        raise ValueError(f"support labels {unknown} are not among {list(levels)}")
    out: dict[str, float] = {}
    for level in levels:
        mask = s == level
        out[f"{level}_setting_rows"] = float(mask.sum())
        out[f"{level}_setting_mape"] = mape(t[mask], p[mask]) if mask.any() else float("nan")
    return out
