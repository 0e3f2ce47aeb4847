"""The point that minimises MAPE for a set of log ratios: where the efficiency estimator and the training layer
both read it (src/features/baseline.py for its unseen-kind fallback, src/train/point.py for the learned rows).

MAPE is not symmetric in log space (2x too slow costs 100 %, 2x too fast 50 %), so the constant that minimises it
lies below the median of the ratios: exactly, a weighted median (below).
"""

from __future__ import annotations

import numpy as np


def mape_optimal_shift(log_ratio: np.ndarray) -> float:
    """The log shift c minimising mean |exp(r + c) - 1| over log(predicted / measured) ratios r.

    Exact: with u = exp(c), sum_i |u exp(r_i) - 1| = sum_i exp(r_i) |u - exp(-r_i)|, so u is the median of
    exp(-r_i) weighted by exp(r_i) (lower weighted median)."""
    r = np.asarray(log_ratio, dtype=float).ravel()
    if r.size == 0:
        raise ValueError("mape_optimal_shift: no ratios")
    if not np.isfinite(r).all():
        raise ValueError(f"mape_optimal_shift: {int((~np.isfinite(r)).sum())} of {r.size} log ratios are not finite")
    order = np.argsort(-r)  # ascending exp(-r)
    weights = np.exp(r[order])
    cum = np.cumsum(weights)
    k = int(np.searchsorted(cum, 0.5 * cum[-1]))
    return float(-r[order][k])
