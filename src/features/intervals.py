"""The conformal interval of a served answer: which calibration a request row gets (its novelty) and its bounds.

Why here and not in src/predict: the served pyfunc carries only src/features, and `mlflow models serve` must
answer with the same intervals as `python -m src.predict`. The calibration itself (cross-conformal fits on the
model's training part) is src/predict/conformal.py; the `calibrate` stage puts its JSON into the served model's
folder (`CALIBRATION_FILE` beside the pipeline), where `CnnPerfModel.load_context` finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: Nominal levels every calibration holds and every served answer carries bounds for.
LEVELS = (0.8, 0.9)
#: Which rows of the calibration a request row resembles: a known GPU and CNN ("row"), a GPU the calibration's
#: training part lacks ("gpu"), a CNN it lacks ("cnn"), or both ("gpu_cnn").
NOVELTY = ("row", "gpu", "cnn", "gpu_cnn")
#: Kinds a row is raised to whatever its novelty: a GPU whose specs lie outside the training range ("arch": calibrated
#: by holding out the newest architectures of the training part, a GPU generation nobody measured) and a runtime or
#: precision class no training row had ("runtime": calibrated by holding out one runtime at a time, the rows the
#: unseen-kind fallback answers) and a setup no training row ran ("setup": framework, precision, mode, layout and
#: runtime together, e.g. TensorFlow with TensorRT; calibrated by holding out groups of setups). Such a row's
#: interval is the widest of its novelty's and these kinds'.
ESCALATIONS = ("arch", "runtime", "setup")
#: Every kind a served answer's `interval_kind` names (besides UNCALIBRATED).
SERVED_KINDS = NOVELTY + ESCALATIONS
#: The calibration's file name in the served model's artifacts folder.
CALIBRATION_FILE = "conformal.json"
#: `interval_kind` of an answer from a model that holds no calibration (its bounds are NaN).
UNCALIBRATED = "uncalibrated"


def novelty(gpu_seen: bool, cnn_seen: bool) -> str:
    if gpu_seen and cnn_seen:
        return "row"
    if cnn_seen:
        return "gpu"
    if gpu_seen:
        return "cnn"
    return "gpu_cnn"


def pick_q(cal: Mapping[str, Any], kind: str, level: float) -> float:
    """The quantile for a novelty kind; falls back to the most conservative calibrated kind if absent."""
    key = f"{level:.2f}"
    qs = cal["quantiles"]
    if kind in qs and key in qs[kind] and np.isfinite(qs[kind][key]):
        return float(qs[kind][key])
    finite = [v[key] for v in qs.values() if key in v and np.isfinite(v[key])]
    if not finite:
        raise KeyError(f"no calibrated quantile at level {key}; calibrated: {qs}")
    return float(max(finite))


def cnn_key(name: Any) -> str:
    """A CNN name as the calibration's `train_model_keys` are compared: case and '-' vs '_' do not matter."""
    return str(name).lower().replace("-", "_")


def cnn_keys(names: Any) -> np.ndarray:
    """`cnn_key` of every name, on arrays (a served request may hold 100,000 rows)."""
    return np.char.replace(np.char.lower(np.asarray(names).astype(str)), "-", "_")


def novelty_kinds(gpu_seen: np.ndarray, cnn_seen: np.ndarray) -> np.ndarray:
    """`novelty` of every row, on arrays."""
    gpu_seen, cnn_seen = np.asarray(gpu_seen, dtype=bool), np.asarray(cnn_seen, dtype=bool)
    return np.select([gpu_seen & cnn_seen, cnn_seen, gpu_seen], ["row", "gpu", "cnn"], "gpu_cnn").astype(object)


def bound_columns(output: str, levels: tuple[float, ...] = LEVELS) -> list[str]:
    """Answer columns of the bounds, e.g. latency_ms_lo_90, latency_ms_hi_90 (in the output's unit)."""
    return [f"{output}_{side}_{round(lv * 100)}" for lv in levels for side in ("lo", "hi")]


def row_quantiles(cal: Mapping[str, Any], kinds: np.ndarray, level: float,
                  escalate: Mapping[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the log half-width at `level` and the kind it comes from: the quantile of the row's novelty kind,
    raised to that of each ESCALATIONS kind whose mask in `escalate` holds for the row when it is wider (a
    calibration without that kind answers its widest calibrated kind: `pick_q`). KeyError where the calibration
    lacks the level."""
    kinds = np.asarray(kinds, dtype=object)
    q = np.full(len(kinds), np.nan)
    for kind in np.unique(kinds).tolist():
        q[kinds == kind] = pick_q(cal, kind, level)
    used = kinds.copy()
    for kind, mask in (escalate or {}).items():
        if kind not in ESCALATIONS:
            raise ValueError(f"unknown interval escalation {kind!r}; choose from {ESCALATIONS}")
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            wider = mask & (pick_q(cal, kind, level) > q)
            q[wider], used[wider] = pick_q(cal, kind, level), kind
    return q, used


def interval_columns(cal: Mapping[str, Any] | None, output: str, pred: np.ndarray, gpus: np.ndarray,
                     model_keys: np.ndarray | None,
                     escalate: Mapping[str, np.ndarray] | None = None,
                     cnn_unseen: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`interval_kind` and the bounds at every level of LEVELS for predictions `pred` of rows naming `gpus` and
    CNNs `model_keys` (None: the request names no CNN, so none counts as seen). `cnn_unseen`: rows whose CNN counts
    as unseen whatever its name (a known CNN's name sent with numbers that contradict it: the answer is neither
    CNN's, src/features/extrapolation.py `known_cnn_reasons`), so their novelty is `cnn` or `gpu_cnn`.

    The kind is the row's novelty against the calibration's training part (`train_gpus`, `train_model_keys`),
    raised to an ESCALATIONS kind where `escalate` (kind -> row mask) flags the row and that kind's interval is
    wider (`row_quantiles`; the kind reported is the one at the widest level); a level the calibration lacks, or no
    calibration at all, leaves its bounds NaN."""
    pred = np.asarray(pred, dtype=float)
    n = len(pred)
    out: dict[str, np.ndarray] = {}
    if not cal:
        out["interval_kind"] = np.full(n, UNCALIBRATED, dtype=object)
        out.update({c: np.full(n, np.nan) for c in bound_columns(output)})
        return out
    gpu_seen = np.isin(np.asarray(gpus).astype(str), np.array(cal.get("train_gpus", []), dtype=str))
    if model_keys is None:
        cnn_seen = np.zeros(n, dtype=bool)
    else:
        known = np.array(sorted({cnn_key(k) for k in cal.get("train_model_keys", [])}), dtype=str)
        cnn_seen = np.isin(cnn_keys(model_keys), known)
    if cnn_unseen is not None:
        cnn_seen &= ~np.asarray(cnn_unseen, dtype=bool)
    kinds = novelty_kinds(gpu_seen, cnn_seen)
    out["interval_kind"] = kinds
    for lv in LEVELS:
        try:
            q, used = row_quantiles(cal, kinds, lv, escalate)
            out["interval_kind"] = used
        except KeyError:
            q = np.full(n, np.nan)  # a calibration without this level: its bounds stay NaN
        lo, hi = bound_columns(output, (lv,))
        out[lo], out[hi] = pred * np.exp(-q), pred * np.exp(q)
    return out
