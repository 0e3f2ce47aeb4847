"""Plots of the evaluate stage: comparisons across models and protocols (per-run plots are src.train.plots)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _save(fig, path: Path, dpi: int) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def metric_table(metrics: dict, path: Path, metric: str = "mape") -> Path:
    """Grouped bars: metric per model for each protocol (from reports/metrics.json)."""
    df = pd.DataFrame({p: {m: v.get(metric, np.nan) for m, v in models.items()} for p, models in metrics.items()})
    fig, ax = plt.subplots(figsize=(7, 4))
    df.plot.bar(ax=ax)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per model and protocol")
    return _save(fig, path, 110)


def group_errors(groups: pd.DataFrame, path: Path) -> Path:
    """Held-out MAPE per GPU and per family for each model: where the predictor transfers and where not."""
    panels = [p for p in ("leave_gpu_out", "leave_family_out") if p in set(groups["protocol"])]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(8 * max(1, len(panels)), 9), squeeze=False)
    for ax, protocol in zip(axes[0], panels, strict=False):
        t = groups[groups["protocol"].eq(protocol)].pivot_table(index="group", columns="estimator", values="mape")
        t = t.loc[t.mean(axis=1).sort_values().index]
        t.plot.barh(ax=ax, width=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("held-out MAPE % (log)")
        ax.set_title(f"{protocol}: MAPE per held-out group")
    return _save(fig, path, 100)


def ranking_by_family(t: pd.DataFrame, path: Path, protocol: str = "leave_family_out") -> Path:
    """Per held-out family: median Spearman rho of the GPU order and the share of configurations whose fastest GPU
    the model finds, per estimator (the designer's question: does it pick the right GPU for a CNN it never saw)."""
    t = t[t["protocol"].eq(protocol)]
    fig, axes = plt.subplots(1, 2, figsize=(14, max(4.0, 0.3 * t["family"].nunique() + 1.5)), squeeze=False)
    for ax, col, label in zip(axes[0], ("spearman_median", "top1_share"),
                              ("median Spearman rho of the GPU order", "fastest GPU found (share of configurations)"),
                              strict=True):
        if not t.empty:
            w = t.pivot_table(index="family", columns="estimator", values=col)
            w.loc[w.mean(axis=1).sort_values().index].plot.barh(ax=ax, width=0.8)
        ax.axvline(0.9 if col == "spearman_median" else 0.85, color="k", lw=0.8, ls="--")
        ax.set_xlabel(label)
        ax.set_title(f"{protocol}: {label}")
    return _save(fig, path, 100)



def setting_support(metrics: dict, path: Path, levels: tuple[str, ...]) -> Path:
    """Per protocol and model: held-out MAPE on rows whose measurement setting training saw, on rows whose setup it
    saw under another release only, and on rows whose setup only the held-out group has (reports/metrics.json
    `<level>_setting_*`)."""
    fig, axes = plt.subplots(1, len(levels), figsize=(6.5 * len(levels), 4.5), sharey=True, squeeze=False)
    for ax, level in zip(axes[0], levels, strict=True):
        df = pd.DataFrame({p: {m: v.get(f"{level}_setting_mape", np.nan) for m, v in models.items()}
                           for p, models in metrics.items()})
        rows = {p: int(max(v.get(f"{level}_setting_rows", 0) for v in models.values()))
                for p, models in metrics.items()}
        df.columns = [f"{p}\n({rows[p]} rows)" for p in df.columns]
        df.T.plot.bar(ax=ax, rot=30)
        ax.set_ylabel("held-out MAPE %")
        ax.set_title(f"setting: {level.replace('_', ' ')}")
    return _save(fig, path, 100)
