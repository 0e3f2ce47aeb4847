"""Does a model order GPUs right? Per configuration, Spearman's rho of predicted vs measured latency over GPUs.

A designer uses the predictor to pick a GPU, so what matters beyond MAPE is the order it gives the GPUs for one
CNN setting and whether its fastest GPU is the measured fastest (issue 12's ranking check). One configuration =
one CNN at one batch size, image size, precision, mode, memory layout, runtime and source; its rows on one GPU
(framework releases, repeated runs) are averaged first. Vectorised: ranks and their Pearson correlation come from
grouped sums, not a Python loop per configuration (equal to scipy.stats.spearmanr, tested).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RANK_GROUP = ["source", "model_key", "mode", "precision", "memory_layout", "compile_mode", "batch_size", "img_size"]


def per_config(df: pd.DataFrame, measured: np.ndarray, predicted: np.ndarray, min_gpus: int = 3) -> pd.DataFrame:
    """One row per configuration measured on >= `min_gpus` GPUs: `gpus`, `spearman` (NaN when either side has no
    spread), `top1` (the predicted fastest GPU is the measured fastest), `top1_measured_ratio` (how much slower, as
    measured, the predicted pick is than the measured fastest; 1.0 when right), plus the configuration columns."""
    keys = [k for k in RANK_GROUP if k in df.columns]
    if not keys:
        raise ValueError(f"no configuration column among {RANK_GROUP}: cannot group rows into configurations")
    d = df[keys + ["gpu"]].copy()
    d["m"], d["p"] = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    # NaN keys (e.g. no memory_layout) are a value of their own, as in the data
    for k in keys:
        if d[k].isna().any():
            d[k] = d[k].astype(object).where(d[k].notna(), "<na>")
    g = d.groupby(keys + ["gpu"], sort=True, observed=True)[["m", "p"]].mean().reset_index()
    cfg = g.groupby(keys, sort=False, observed=True)
    g["n"] = cfg["gpu"].transform("size")
    g = g[g["n"] >= min_gpus].copy()
    if g.empty:
        return pd.DataFrame(columns=keys + ["gpus", "spearman", "top1", "top1_measured_ratio"])
    cfg = g.groupby(keys, sort=False, observed=True)
    g["rm"], g["rp"] = cfg["m"].rank(method="average"), cfg["p"].rank(method="average")
    g["cm"] = g["rm"] - cfg["rm"].transform("mean")
    g["cp"] = g["rp"] - cfg["rp"].transform("mean")
    g["cmp"], g["cmm"], g["cpp"] = g["cm"] * g["cp"], g["cm"] ** 2, g["cp"] ** 2
    g["m_min"] = cfg["m"].transform("min")
    # the measured latency of the GPU the model ranks first (first of ties, as idxmin)
    pick = g.loc[cfg["p"].idxmin()].set_index(keys)["m"]
    s = cfg[["cmp", "cmm", "cpp", "m_min"]].agg({"cmp": "sum", "cmm": "sum", "cpp": "sum", "m_min": "first"})
    s["gpus"] = cfg.size()
    denom = np.sqrt(s["cmm"] * s["cpp"])
    s["spearman"] = np.where(denom > 0, s["cmp"] / np.where(denom > 0, denom, 1.0), np.nan)
    s["top1_measured_ratio"] = pick.reindex(s.index).to_numpy() / s["m_min"].to_numpy()
    s["top1"] = s["top1_measured_ratio"] <= 1.0
    return s[["gpus", "spearman", "top1", "top1_measured_ratio"]].reset_index()


def ranking_agreement(df: pd.DataFrame, measured: np.ndarray, predicted: np.ndarray, min_gpus: int = 3) -> dict:
    """Summary over configurations: count, Spearman median and mean, share of fastest GPU found, and, over the
    configurations where it is missed, the median and worst measured slow-down of the predicted pick (how much a
    wrong pick costs; NaN when none is missed)."""
    t = per_config(df, measured, predicted, min_gpus)
    rho = t["spearman"].to_numpy(dtype=float)
    ratio = t["top1_measured_ratio"].to_numpy(dtype=float)
    has = len(t) > 0
    miss = ~t["top1"].to_numpy(dtype=bool)
    return {"configs": int(len(t)), "min_gpus": min_gpus,
            "gpus_mean": float(t["gpus"].mean()) if has else float("nan"),
            "spearman_median": float(np.nanmedian(rho)) if has and np.isfinite(rho).any() else float("nan"),
            "spearman_mean": float(np.nanmean(rho)) if has and np.isfinite(rho).any() else float("nan"),
            "top1_share": float(t["top1"].mean()) if has else float("nan"),
            "top1_miss_slowdown_median": float(np.median(ratio[miss])) if miss.any() else float("nan"),
            "top1_slowdown_worst": float(np.max(ratio)) if has else float("nan")}


def by_group(t: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per value of `group` (a column of `per_config`'s table): configurations, Spearman median, top-1 share."""
    return (t.groupby(group, sort=True)
            .agg(configs=("spearman", "size"), gpus_mean=("gpus", "mean"), spearman_median=("spearman", "median"),
                 spearman_mean=("spearman", "mean"), top1_share=("top1", "mean"),
                 top1_miss_slowdown_median=("top1_measured_ratio", lambda r: r[r > 1.0].median()))
            .reset_index())
