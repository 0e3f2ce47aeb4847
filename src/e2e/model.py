"""End-to-end time model per (CNN, GPU, mode, software context): time(batch, iters) = iters * (a + b * batch).

Why per group and linear: within one deployment (same CNN, GPU, framework build, precision, layout, compile
mode) a step's time grows about linearly with the batch (a fixed per-step cost `a`: launches, weight reads,
optimizer; plus `b` per sample), and a run is `iters` such steps. Two numbers per deployment, fitted from the
logs of earlier runs at other batch sizes, then predict any batch and iteration count.

Fit: non-negative least squares on relative errors (each row scaled by 1/measured), so small and large batches
weigh alike and a, b >= 0. A deployment left with a single batch size to fit on cannot identify a and b. It is
scaled by the physics estimate of the same deployment (`physics_ms`, the per-kernel estimate of one step on its
GPU, src/features/layer_physics.py) where both batch sizes have one: time(b) = measured(b0) x physics(b) /
physics(b0), `fit_kind = physics_1pt`. The estimate carries the launch and dispatch floor that makes a batch-1
step cost about as much as a batch-32 one; the proportional special case (a = 0) assumes that floor away and was
25-80x off from batch 1 to 256 (our own H200 rows). Without an estimate the proportional case is kept, flagged
`fit_kind = proportional_1pt`. Our sources log per-step times (means or medians over their timed iterations),
so the iteration factor is structural: the relative error of a total-time prediction equals that of the step
time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

# Columns that define one deployment ("software context"). `relaxed` drops the framework/CUDA versions, to use
# timm's batch sizes measured under different PyTorch releases (noise between releases ~3-4 %, STACK-NOTES).
STRICT_KEYS = ["source", "model_key", "gpu", "mode", "precision", "memory_layout", "compile_mode", "framework",
               "framework_version", "cuda_version", "img_size", "data_mode", "variant", "scenario"]
RELAXED_DROP = ["framework_version", "cuda_version"]


@dataclass(frozen=True)
class Linear:
    """Per-step time a + b * batch (ms); `proportional` fits b only (a = 0), the naive scaling baseline."""

    a: float
    b: float

    def step_ms(self, batch) -> np.ndarray:
        return self.a + self.b * np.asarray(batch, dtype=float)

    def total_ms(self, batch, iters) -> np.ndarray:
        return np.asarray(iters, dtype=float) * self.step_ms(batch)


def fit_linear(batch: np.ndarray, ms: np.ndarray, intercept: bool = True) -> Linear:
    """NNLS fit of ms ~ a + b * batch minimising squared relative errors."""
    batch = np.asarray(batch, dtype=float)
    ms = np.asarray(ms, dtype=float)
    if len(batch) == 0 or np.any(ms <= 0):
        raise ValueError("fit_linear needs at least one row and positive times")
    w = 1.0 / ms
    if intercept:
        A = np.column_stack([w, batch * w])
        coef, _ = nnls(A, np.ones_like(ms))
        return Linear(float(coef[0]), float(coef[1]))
    coef, _ = nnls((batch * w)[:, None], np.ones_like(ms))
    return Linear(0.0, float(coef[0]))


def group_keys(df: pd.DataFrame, context: str = "strict") -> list[str]:
    keys = [k for k in STRICT_KEYS if k in df.columns]
    if context == "relaxed":
        keys = [k for k in keys if k not in RELAXED_DROP]
    elif context != "strict":
        raise ValueError(f"e2e.context must be 'strict' or 'relaxed', got {context!r}")
    return keys


def eligible_rows(meas: pd.DataFrame, data_modes: list[str] | None = ("synthetic",)) -> pd.DataFrame:
    """Single-GPU GPU rows with a positive step time (and synthetic input data where the source says)."""
    keep = ~meas["is_cpu"].astype(bool) & (meas["num_gpus"] == 1) & (meas["latency_ms"] > 0)
    if data_modes and "data_mode" in meas.columns:
        keep &= meas["data_mode"].isna() | meas["data_mode"].isin(list(data_modes))
    return meas.loc[keep].copy()


def label_groups(df: pd.DataFrame, context: str, min_batches: int) -> pd.DataFrame:
    """Add `group` (int id) for deployments with at least `min_batches` distinct batch sizes; drop the rest."""
    keys = group_keys(df, context)
    d = df.copy()
    for k in keys:
        d[k] = d[k].astype("string").fillna("")
    d["group"] = d.groupby(keys, sort=True).ngroup()
    n_b = d.groupby("group")["batch_size"].transform("nunique")
    return d.loc[n_b >= min_batches].reset_index(drop=True)


def holdout_mask(d: pd.DataFrame, protocol: str, seed: int = 42) -> list[np.ndarray]:
    """Boolean masks of held-out rows, one per evaluation round.

    largest: each group's largest batch (extrapolation), one round. one_random: one seeded random batch size per
    group, one round. lobo: leave-one-batch-out, round r holds out each group's r-th smallest batch size.
    """
    if protocol == "largest":
        mx = d.groupby("group")["batch_size"].transform("max")
        return [(d["batch_size"] == mx).to_numpy()]
    if protocol == "one_random":
        rng = np.random.default_rng(seed)
        pick = {g: rng.choice(np.sort(s.unique())) for g, s in d.groupby("group")["batch_size"]}
        return [(d["batch_size"] == d["group"].map(pick)).to_numpy()]
    if protocol == "lobo":
        rank = d.groupby("group")["batch_size"].rank(method="dense").astype(int)
        return [(rank == r).to_numpy() for r in sorted(rank.unique())]
    raise ValueError(f"unknown e2e protocol {protocol!r}: largest, one_random, lobo")


def physics_scale(latency_ms, physics_ms) -> float:
    """Measured / estimated step time of a deployment's fit rows (geometric mean); NaN where a row has no
    estimate."""
    ratio = np.asarray(latency_ms, dtype=float) / np.asarray(physics_ms, dtype=float)
    if len(ratio) == 0 or not np.all(np.isfinite(ratio) & (ratio > 0)):
        return float("nan")
    return float(np.exp(np.mean(np.log(ratio))))


def evaluate(d: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """Fit each group on its non-held-out rows, predict its held-out rows: linear where two or more batch sizes
    are left to fit on, else scaled by the physics estimate (`physics_ms` column, when `d` has one and both sides
    are priced), else proportional; the proportional baseline beside every answer."""
    out = []
    held = d.loc[mask]
    fit_rows = d.loc[~mask]
    priced = "physics_ms" in d.columns
    fits = {}
    for g, rows in fit_rows.groupby("group"):
        prop = fit_linear(rows["batch_size"], rows["latency_ms"], intercept=False)
        if rows["batch_size"].nunique() >= 2:
            fits[g] = (fit_linear(rows["batch_size"], rows["latency_ms"]), prop, float("nan"))
        else:  # one batch size left to fit on: a and b are not identifiable
            scale = physics_scale(rows["latency_ms"], rows["physics_ms"]) if priced else float("nan")
            fits[g] = (prop, prop, scale)
    for g, rows in held.groupby("group"):
        if g not in fits:
            continue
        lin, prop, scale = fits[g]
        n_fit = int(fit_rows.loc[fit_rows["group"] == g, "batch_size"].nunique())
        e2e = lin.step_ms(rows["batch_size"])
        kind = np.full(len(rows), "linear" if n_fit >= 2 else "proportional_1pt", dtype=object)
        if n_fit < 2 and np.isfinite(scale):
            est = scale * rows["physics_ms"].to_numpy(dtype=float)
            ok = np.isfinite(est) & (est > 0)
            e2e = np.where(ok, est, e2e)
            kind[ok] = "physics_1pt"
        out.append(pd.DataFrame({
            "measurement_id": rows["measurement_id"].to_numpy(), "group": g,
            "batch_size": rows["batch_size"].to_numpy(), "measured_ms": rows["latency_ms"].to_numpy(),
            "e2e_ms": e2e, "proportional_ms": prop.step_ms(rows["batch_size"]),
            # a and b of the linear (or proportional) fit; none where the physics estimate answered
            "a_ms": np.where(kind == "physics_1pt", np.nan, lin.a),
            "b_ms_per_sample": np.where(kind == "physics_1pt", np.nan, lin.b),
            "physics_scale": scale, "fit_kind": kind,
            "n_fit_batches": n_fit,
        }))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def coefficients(d: pd.DataFrame) -> pd.DataFrame:
    """Final per-group fit on all batch sizes (the deliverable model), with its in-sample MAPE."""
    keys = [c for c in STRICT_KEYS if c in d.columns]
    rows = []
    for g, r in d.groupby("group"):
        lin = fit_linear(r["batch_size"], r["latency_ms"], intercept=r["batch_size"].nunique() >= 2)
        ape = np.abs(lin.step_ms(r["batch_size"]) - r["latency_ms"]) / r["latency_ms"] * 100
        rows.append({"group": g, **{k: r[k].iloc[0] for k in keys}, "a_ms": lin.a, "b_ms_per_sample": lin.b,
                     "n_rows": len(r), "batch_sizes": " ".join(str(int(b)) for b in sorted(r["batch_size"].unique())),
                     "fit_mape": float(ape.mean())})
    return pd.DataFrame(rows)
