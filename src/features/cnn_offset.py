"""How much slower or faster than its peers a CNN ran on the *other* GPUs we measured it on.

Why: the physics estimate prices a CNN's kernels, but some CNNs run further from it than others on every GPU
(depthwise convolutions, odd channel counts, a framework path that fuses badly). A learner that sees only static
features and PTX counts has to guess that from the architecture; the measurements of the same CNN on other GPUs
tell it directly. That is exactly what a user has when asking about a GPU nobody measured: the CNN is in the
table, on other cards.

The offset of a training row is its target minus the mean target of its *condition* (same GPU, runtime, release,
precision, mode, batch, image size: the CNN is the only thing that differs), so it is relative to the CNN's peers
and does not carry the GPU's or the source's level. A row's feature is the shrunk mean offset of the same CNN over
training rows on **other GPUs only**: a training row never sees its own target, its twins (another release or a
repeated run: same GPU) or anything else of its GPU, and a row of a GPU that no training row has gets exactly the
information it would get in training. A CNN on no other GPU gets 0 with a support of 0 (as a never-measured CNN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

# Columns that, with the CNN, define a measured configuration; the condition of a row is all of them but the CNN.
CONDITION_COLUMNS = ("gpu", "framework", "framework_version", "compile_mode", "precision", "mode", "memory_layout",
                     "batch_size", "img_size")
# Feature names: the offset over rows of the same mode and precision class, the offset over all rows of the CNN,
# and log1p of the number of other-GPU rows behind the latter.
OFFSET_FEATURES = ["cnn_offset_config", "cnn_offset_kind", "cnn_offset_any", "cnn_offset_rows"]
# The same configuration but the GPU (and release): the closest match of a row on another card.
CONFIG_COLUMNS = ("model_key", "framework", "compile_mode", "precision", "mode", "memory_layout", "batch_size",
                  "img_size")
_SEP = "\x1f"


def _joined(X: Mapping[str, Any], columns: tuple[str, ...] | list[str]) -> np.ndarray:
    """One str key per row from several columns (vectorised: one astype per column)."""
    parts = [np.asarray(X[c], dtype=object).astype(str) for c in columns]
    out = parts[0]
    for p in parts[1:]:
        out = np.char.add(np.char.add(out.astype(str), _SEP), p)
    return np.asarray(out, dtype=object)


def _kind(X: Mapping[str, Any]) -> np.ndarray:
    from .baseline import precision_class

    prec = np.asarray(X["precision"], dtype=object)
    classes = pd.Series(prec).map(precision_class).to_numpy(dtype=object) if len(prec) else prec
    return _joined({"mode": X["mode"], "cls": classes}, ["mode", "cls"])


def condition_residuals(X: Mapping[str, Any], y: np.ndarray) -> np.ndarray:
    """y minus the mean y of the row's condition (every configuration column but the CNN)."""
    y = np.asarray(y, dtype=float)
    codes, _ = pd.factorize(_joined(X, [c for c in CONDITION_COLUMNS if c in X]))
    sums = np.bincount(codes, weights=y)
    counts = np.bincount(codes)
    return y - sums[codes] / counts[codes]


def _sum_table(keys: np.ndarray, r: np.ndarray) -> dict[str, tuple[float, int]]:
    codes, uniq = pd.factorize(keys)
    sums = np.bincount(codes, weights=r)
    counts = np.bincount(codes)
    return {str(k): (float(s), int(n)) for k, s, n in zip(uniq.tolist(), sums.tolist(), counts.tolist(), strict=True)}


def fit_offset_tables(X: Mapping[str, Any], y: np.ndarray) -> dict[str, dict[str, tuple[float, int]]]:
    """Sums and counts of condition residuals per CNN (and kind), and per CNN (and kind) on each GPU."""
    r = condition_residuals(X, y)
    cnn = np.asarray(X["model_key"], dtype=object).astype(str)
    gpu = np.asarray(X["gpu"], dtype=object).astype(str)
    kind = _kind(X)
    cnn_kind = _joined({"c": cnn, "k": kind}, ["c", "k"])
    config = _joined(X, CONFIG_COLUMNS)
    return {
        "config": _sum_table(config, r),
        "config_gpu": _sum_table(_joined({"c": config, "g": gpu}, ["c", "g"]), r),
        "kind": _sum_table(cnn_kind, r),
        "kind_gpu": _sum_table(_joined({"c": cnn_kind, "g": gpu}, ["c", "g"]), r),
        "any": _sum_table(cnn, r),
        "any_gpu": _sum_table(_joined({"c": cnn, "g": gpu}, ["c", "g"]), r),
    }


def _other_gpus(keys: np.ndarray, gpu: np.ndarray, total: dict, own: dict) -> tuple[np.ndarray, np.ndarray]:
    """(sum, count) over the key's rows on GPUs other than the row's own, per row (distinct keys looked up once)."""
    joint = _joined({"k": keys, "g": gpu}, ["k", "g"])
    codes, uniq = pd.factorize(joint)
    key_of = {}
    for j, (k, g) in enumerate(zip(pd.Series(uniq).str.rsplit(_SEP, n=1).str[0].tolist(), uniq.tolist(),
                                   strict=True)):
        key_of[j] = (k, g)
    sums = np.zeros(len(uniq))
    counts = np.zeros(len(uniq))
    for j, (k, kg) in key_of.items():
        s, n = total.get(k, (0.0, 0))
        so, no = own.get(kg, (0.0, 0))
        sums[j], counts[j] = s - so, n - no
    return sums[codes], counts[codes]


def _mean(sums: np.ndarray, counts: np.ndarray, shrink: float) -> np.ndarray:
    """sums / (counts + shrink), 0 where nothing supports it."""
    den = counts + shrink
    return np.divide(sums, den, out=np.zeros_like(sums), where=den > 0)


def offset_arrays(X: Mapping[str, Any], tables: dict, shrink: float) -> dict[str, np.ndarray]:
    """The OFFSET_FEATURES of X's rows from fitted tables; `shrink` pseudo-rows pull a thinly supported mean to 0."""
    cnn = np.asarray(X["model_key"], dtype=object).astype(str)
    gpu = np.asarray(X["gpu"], dtype=object).astype(str)
    cnn_kind = _joined({"c": cnn, "k": _kind(X)}, ["c", "k"])
    s_kind, n_kind = _other_gpus(cnn_kind, gpu, tables["kind"], tables["kind_gpu"])
    s_any, n_any = _other_gpus(cnn, gpu, tables["any"], tables["any_gpu"])
    s_conf, n_conf = _other_gpus(_joined(X, CONFIG_COLUMNS), gpu, tables["config"], tables["config_gpu"])
    return {
        "cnn_offset_config": _mean(s_conf, n_conf, shrink),
        "cnn_offset_kind": _mean(s_kind, n_kind, shrink),
        "cnn_offset_any": _mean(s_any, n_any, shrink),
        "cnn_offset_rows": np.log1p(n_any),
    }
