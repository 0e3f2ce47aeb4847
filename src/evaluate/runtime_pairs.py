"""Does a model get the speed-up of a deployment runtime right? Eager vs TensorRT (or torch.compile, XLA) pairs.

A designer comparing deployments asks how much faster TensorRT makes a CNN on a GPU. Where a source measured the
same CNN setting on the same GPU both eagerly and with another runtime, and both rows are held out, the measured
speed-up is eager / runtime latency (rows of one side averaged first) and the predicted one is the same ratio of
the predictions. Issue 20's target: the predicted ratio within 25 % of the measured one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PAIR_KEYS = ["source", "model_key", "gpu", "batch_size", "img_size", "mode", "precision", "memory_layout"]
WITHIN = 0.25


def pairs(rows: pd.DataFrame, measured: np.ndarray, predicted: np.ndarray) -> pd.DataFrame:
    """One row per (setting, runtime != eager) with an eager twin in `rows`: measured and predicted speed-up
    (eager / runtime) and the relative error of the predicted one."""
    keys = [k for k in PAIR_KEYS if k in rows.columns]
    d = rows[keys + ["compile_mode"]].copy()
    for k in keys:
        if d[k].isna().any():
            d[k] = d[k].astype(object).where(d[k].notna(), "<na>")
    d["m"], d["p"] = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    mean = d.groupby(keys + ["compile_mode"], sort=True, observed=True)[["m", "p"]].mean().reset_index()
    eager = mean[mean["compile_mode"].eq("eager")].drop(columns="compile_mode")
    other = mean[~mean["compile_mode"].eq("eager")]
    j = other.merge(eager, on=keys, suffixes=("", "_eager"))
    cols = keys + ["runtime", "measured_speedup", "predicted_speedup", "ratio_error"]
    if j.empty:
        return pd.DataFrame(columns=cols)
    j = j.rename(columns={"compile_mode": "runtime"})
    j["measured_speedup"] = j["m_eager"] / j["m"]
    j["predicted_speedup"] = j["p_eager"] / j["p"]
    j["ratio_error"] = np.abs(j["predicted_speedup"] / j["measured_speedup"] - 1.0)
    return j[cols]


def summary(t: pd.DataFrame) -> dict:
    """Per runtime: pairs, CNNs, GPUs, median measured and predicted speed-up, median error, share within 25 %."""
    out = {}
    for runtime, g in t.groupby("runtime", sort=True):
        out[str(runtime)] = {"pairs": int(len(g)), "cnns": int(g["model_key"].nunique()),
                             "gpus": int(g["gpu"].nunique()),
                             "measured_speedup_median": float(g["measured_speedup"].median()),
                             "predicted_speedup_median": float(g["predicted_speedup"].median()),
                             "ratio_error_median": float(g["ratio_error"].median()),
                             "within_25pct": float((g["ratio_error"] <= WITHIN).mean())}
    return out
