"""Plots of the evaluate stage's own checks (the per-run plots are src.train.plots)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


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
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
