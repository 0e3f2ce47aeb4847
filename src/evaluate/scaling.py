"""GPU-to-GPU scaling: does a per-row estimate move from one GPU to another as the measurements do?

The efficiency target (measured / physics estimate) carries a prediction to a GPU the learner never saw only as
far as the estimate's ratio between two GPUs is right. For every pair of GPUs that ran identical configurations
(`CONFIG_COLUMNS`), per `PAIR_GROUP` (source, precision, runtime): the median measured latency ratio (slower /
faster GPU) against the median ratio of the estimates. `log_error` = log(estimated / measured) > 0 means the
estimate expects the faster GPU to gain more than it does. Used by benchmarks/gpu_pair_scaling.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

# What makes two rows "the same configuration on another GPU".
CONFIG_COLUMNS = ["source", "model_key", "img_size", "batch_size", "precision", "mode", "memory_layout",
                  "compile_mode", "framework", "framework_version"]
PAIR_GROUP = ["source", "precision", "compile_mode"]


def pair_groups(df: pd.DataFrame, estimate: str = "t_physics_ms", measured: str = "target",
                min_rows: int = 20) -> pd.DataFrame:
    """One row per (GPU pair, PAIR_GROUP) with >= min_rows identical configurations: `rows`, `measured_ratio` and
    `estimated_ratio` (medians, slower GPU by measurement first as `gpu_a`) and `log_error`."""
    missing = [c for c in (*CONFIG_COLUMNS, "gpu", estimate, measured) if c not in df.columns]
    if missing:
        raise KeyError(f"pair_groups: missing column(s) {missing}")
    out = []
    keyed = df[[*CONFIG_COLUMNS, "gpu", measured, estimate]]
    for keys, part in keyed.groupby(PAIR_GROUP, sort=True):
        counts = part["gpu"].value_counts()
        for a, b in itertools.combinations(sorted(counts[counts >= min_rows].index), 2):
            m = part[part["gpu"] == a].merge(part[part["gpu"] == b], on=CONFIG_COLUMNS, suffixes=("_a", "_b"))
            if len(m) < min_rows:
                continue
            meas = float(np.median(m[f"{measured}_a"] / m[f"{measured}_b"]))
            est = float(np.median(m[f"{estimate}_a"] / m[f"{estimate}_b"]))
            if meas < 1.0:  # name the slower GPU first
                a, b, meas, est = b, a, 1.0 / meas, 1.0 / est
            out.append({**dict(zip(PAIR_GROUP, keys, strict=True)), "gpu_a": a, "gpu_b": b, "rows": len(m),
                        "measured_ratio": meas, "estimated_ratio": est, "log_error": float(np.log(est / meas))})
    return pd.DataFrame(out, columns=[*PAIR_GROUP, "gpu_a", "gpu_b", "rows", "measured_ratio", "estimated_ratio",
                                      "log_error"])


def scaling_summary(groups: pd.DataFrame, tolerance: float = 0.10) -> dict:
    """How often the estimate's ratio is within `tolerance` of the measured one, and which way it misses."""
    if groups.empty:
        raise ValueError("no GPU pair to summarise")
    err = groups["log_error"].to_numpy(float)
    bound = np.log1p(tolerance)
    return {"groups": int(len(groups)), "pairs": int(groups[["gpu_a", "gpu_b"]].drop_duplicates().shape[0]),
            "rows": int(groups["rows"].sum()),
            "median_abs_log_error": float(np.median(np.abs(err))),
            "row_weighted_abs_log_error": float(np.average(np.abs(err), weights=groups["rows"])),
            "within_10pct_share": float((np.abs(err) <= bound).mean()),
            "overestimated_gain_share": float((err > bound).mean()),
            "underestimated_gain_share": float((err < -bound).mean())}
