"""A step's time never falls as its batch grows: the model's answers for one configuration, read over a grid of
batch sizes, are replaced by their isotonic (non-decreasing) fit.

Why: a step at batch b does all the work of a step at any smaller batch on the same GPU and runtime, so it cannot
finish sooner. The measurements agree: of the 3,103 pairs of adjacent batch sizes of one configuration in our
data, 27 fall (16 by more than 5 %, all harness quirks: DLInfBench's VGG at batch 1, our own host-bound batch 1 on
the H200, PaddleClas' TensorRT tables). A learned correction is not monotone in the batch, though: it is a
piecewise function of batch-dependent features (a tree steps down where a step stops being launch-bound). Over the
batches 1-4096 the served champion's answer fell somewhere for 5,226 of the 8,652 configurations of its test
rows, and for DenseNet-121 training on 342 of 396 GPUs (by up to 14.6 %); a designer sweeping batch sizes reads
that as "a bigger batch is faster".

The rule: per configuration (every input column but the batch), the answers at the powers of two 1 ... 4096
(further when the call asks that configuration for more) are replaced by their least-squares isotonic fit in log
space (each grid point weighs the same, so neither the small nor the large batches alone decide where the fit
sits; taking the maximum of the smaller batches instead raised 69 measured test rows from 16.2 to 19.8 % MAPE).
A row at a power of two gets the fit's value there; a row between two powers of two gets its own answer, clipped
into the fit's values at those two. So answers never fall from one power of two to the next, nor between a power
of two and any batch; two batches between the same two powers of two (12 and 14) are each clipped, not ordered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

BATCH = "batch_size"
#: A configuration's grid reaches 2**GRID_TOP_POWER (4096: the largest batch of the training data), or its own
#: largest batch in the call when that is more; so its answers up to 4096 are the same whatever else a call asks.
GRID_TOP_POWER = 12


def isotonic_rows(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit of each row of `values` (equal weights), by the min-max formula
    fit[i] = max over j <= i of min over k >= i of mean(values[j..k]), vectorised over rows (the grid is short)."""
    v = np.asarray(values, dtype=float)
    m = v.shape[1]
    prefix = np.concatenate([np.zeros((len(v), 1)), np.cumsum(v, axis=1)], axis=1)
    j, k = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    valid = k >= j
    span = np.where(valid, k - j + 1, 1)
    means = (prefix[:, k + 1] - prefix[:, j]) / span  # rows x j x k
    fit = np.empty_like(v)
    for i in range(m):
        # min over k >= i of mean(j..k), for each j <= i; then max over those j
        inner = np.where(valid[: i + 1, i:], means[:, : i + 1, i:], np.inf).min(axis=2)
        fit[:, i] = inner.max(axis=1)
    return fit


def configuration_ids(X: pd.DataFrame | Mapping[str, Any]) -> np.ndarray:
    """One id per row, equal for rows that differ in nothing but the batch."""
    others = [c for c in X.keys() if c != BATCH]
    n = len(X[BATCH])
    if not others or n == 1:  # a served request of one row: no frame to build
        return np.zeros(n, dtype=np.int64)
    frame = pd.DataFrame({c: np.asarray(X[c]) for c in others})
    return frame.groupby(others, sort=False, dropna=False).ngroup().to_numpy(dtype=np.int64)


def _take(X: pd.DataFrame | Mapping[str, Any], rows: np.ndarray, batch: np.ndarray, dtype) -> Any:
    """X's `rows`, with their batch set to `batch` (X's own kind: a DataFrame or a mapping of arrays)."""
    if isinstance(X, pd.DataFrame):
        out = X.iloc[rows].reset_index(drop=True)
    else:
        out = {c: np.asarray(v)[rows] for c, v in X.items()}
    out[BATCH] = batch.astype(dtype, copy=False)
    return out


def monotone_in_batch(predict: Callable[[Any], np.ndarray], X: pd.DataFrame | Mapping[str, Any]) -> np.ndarray:
    """`predict(X)` made non-decreasing in the batch (module docstring); `predict` takes X's kind. X without a
    batch column is answered by `predict` as it is."""
    if BATCH not in X or len(X[BATCH]) == 0:
        return np.asarray(predict(X), dtype=float)
    raw = np.asarray(X[BATCH])
    batch = raw.astype(float)
    if (batch < 1).any() or not np.isfinite(batch).all():
        raise ValueError(f"{BATCH} must be finite numbers >= 1")
    dtype = raw.dtype if np.issubdtype(raw.dtype, np.number) else np.float64
    config = configuration_ids(X)
    # each configuration's grid reaches 4096, or its own largest batch in X: another configuration's row never
    # changes its answers
    top = np.full(config.max() + 1, GRID_TOP_POWER, dtype=np.int64)
    np.maximum.at(top, config, np.ceil(np.log2(batch)).astype(np.int64))
    out = np.empty(len(batch))
    for t in np.unique(top):
        rows = np.flatnonzero(top[config] == t)
        part = X if len(rows) == len(batch) else _take(X, rows, raw[rows], raw.dtype)
        out[rows] = _fit_on_grid(predict, part, batch[rows], config[rows], int(t), dtype)
    return out


def _fit_on_grid(predict: Callable[[Any], np.ndarray], X: pd.DataFrame | Mapping[str, Any], batch: np.ndarray,
                 config: np.ndarray, top: int, dtype) -> np.ndarray:
    """monotone_in_batch for rows whose configurations share the grid 1, 2, 4 ... 2**top."""
    grid = np.exp2(np.arange(top + 1))
    ids, first, local = np.unique(config, return_index=True, return_inverse=True)  # one row per configuration
    local = local.ravel()
    on_grid = np.isin(batch, grid)
    off = np.flatnonzero(~on_grid)
    rows = np.concatenate([np.repeat(first, len(grid)), off])
    batches = np.concatenate([np.tile(grid, len(first)), batch[off]])
    pred = np.asarray(predict(_take(X, rows, batches, dtype)), dtype=float)
    n_grid = len(first) * len(grid)
    on_points = pred[:n_grid].reshape(len(first), len(grid))
    log_fit = isotonic_rows(np.log(on_points))
    # where the fit keeps an answer (no fall around it), that answer itself, bit for bit
    fit = np.where(np.abs(log_fit - np.log(on_points)) <= 1e-12, on_points, np.exp(log_fit))
    out = np.empty(len(batch))
    power = np.log2(batch)
    at = np.flatnonzero(on_grid)
    out[at] = fit[local[at], power[at].astype(np.int64)]
    lo = np.floor(power[off]).astype(np.int64)
    out[off] = np.clip(pred[n_grid:], fit[local[off], lo], fit[local[off], lo + 1])
    return out
