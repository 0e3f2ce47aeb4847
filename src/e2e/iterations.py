"""The iteration axis of the end-to-end model, checked on ryujaehun's per-iteration timings (single GPU).

Why: the other sources log one per-step statistic, so `time = iters * step` can only be checked where every
iteration was timed. For each (file, CNN column) we predict the measured total of all N logged iterations
(including the first, warm-up iteration) from a short profile of the first k iterations:
- product: N * step_k, with step_k the median of iterations 2..k (warm-up excluded, as the ingest does);
- with warm-up: (t_1 - step_k) + N * step_k, i.e. the first iteration's extra cost added once.
Also reported: N * step_all, the per-step median over all kept iterations (what the measurement table stores).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

SOURCE_DIR = "ryujaehun-pytorch-gpu-benchmark"
SINGLE_GPU = re.compile(r"^(?P<gpu>.+)_1_gpus__(?P<precision>[a-z]+)_model_(?P<mode>train|training|inference)_")


def read_samples(mirror: Path) -> pd.DataFrame:
    """Long table (file, gpu_raw, precision, mode, model, iteration, ms) of every single-GPU per-iteration file."""
    root = Path(mirror) / SOURCE_DIR
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: ryujaehun's raw files not found (ingest.mirror in params.yaml)")
    frames = []
    for path in sorted(root.rglob("*_1_gpus_*.csv")):
        m = SINGLE_GPU.match(path.name)
        if not m:
            continue
        wide = pd.read_csv(path)
        long = wide.reset_index(names="iteration").melt(id_vars="iteration", var_name="model", value_name="ms")
        long["file"] = str(path.relative_to(root))
        long["gpu_raw"] = m["gpu"]
        long["precision"] = m["precision"]
        long["mode"] = "training" if m["mode"].startswith("train") else "inference"
        frames.append(long)
    if not frames:
        raise FileNotFoundError(f"{root}: no single-GPU per-iteration files")
    out = pd.concat(frames, ignore_index=True)
    out["ms"] = pd.to_numeric(out["ms"], errors="coerce")
    return out


def skip_reason(t: np.ndarray, fit_iters: int) -> str:
    """Why a series cannot be scored ('' if it can): a value that is not a positive number, or too few
    iterations for a profile of `fit_iters` and a total at least twice as long."""
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        return "not a positive number"
    if len(t) < 2 * fit_iters:
        return f"fewer than 2 x {fit_iters} iterations"
    return ""


def skipped(samples: pd.DataFrame, fit_iters: int = 10) -> pd.DataFrame:
    """(file, model, reason, n_iters) of every series `evaluate` leaves out: reported, never dropped silently."""
    rows = []
    for (file, model), s in samples.groupby(["file", "model"], sort=True):
        t = s.sort_values("iteration")["ms"].to_numpy(dtype=float)
        reason = skip_reason(t, fit_iters)
        if reason:
            rows.append({"file": file, "model": model, "reason": reason, "n_iters": len(t)})
    return pd.DataFrame(rows, columns=["file", "model", "reason", "n_iters"])


def evaluate(samples: pd.DataFrame, fit_iters: int = 10) -> pd.DataFrame:
    """One row per (file, model) series with >= 2 * fit_iters positive samples: measured total vs predictions
    (the others: `skipped`)."""
    rows = []
    for (file, model), s in samples.groupby(["file", "model"], sort=True):
        t = s.sort_values("iteration")["ms"].to_numpy(dtype=float)
        if skip_reason(t, fit_iters):
            continue
        n = len(t)
        step_k = float(np.median(t[1:fit_iters]))
        step_all = float(np.median(t[1:]))
        measured = float(t.sum())
        rows.append({"file": file, "model": model, "mode": s["mode"].iloc[0], "precision": s["precision"].iloc[0],
                     "gpu_raw": s["gpu_raw"].iloc[0], "n_iters": n, "measured_total_ms": measured,
                     "product_short_ms": n * step_k, "warmup_short_ms": (t[0] - step_k) + n * step_k,
                     "product_table_step_ms": n * step_all, "warmup_excess_ms": t[0] - step_all})
    return pd.DataFrame(rows)


def summary(ev: pd.DataFrame) -> dict:
    def mape(col: str, d: pd.DataFrame) -> float:
        return float(np.mean(np.abs(d[col] - d["measured_total_ms"]) / d["measured_total_ms"]) * 100)

    out = {}
    for mode, d in [("all", ev), *ev.groupby("mode")]:
        out[str(mode)] = {"series": int(len(d)), "median_iters": float(d["n_iters"].median()),
                          "product_short_mape": mape("product_short_ms", d),
                          "warmup_short_mape": mape("warmup_short_ms", d),
                          "product_table_step_mape": mape("product_table_step_ms", d),
                          "median_warmup_excess_ms": float(d["warmup_excess_ms"].median())}
    return out
