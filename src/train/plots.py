"""PNG plots (matplotlib Agg) logged as MLflow artifacts: predicted vs measured, residuals per GPU, importances."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# pyplot keeps global figure state: the trainer runs protocols in threads (`Trainer.run`), so one plot at a time.
_PYPLOT = threading.Lock()


def _one_at_a_time(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _PYPLOT:
            return fn(*args, **kwargs)
    return wrapper


@_one_at_a_time
def predicted_vs_measured(pred: pd.DataFrame, title: str, path: Path) -> Path:
    """Log-log scatter, one colour per GPU, with the y = x line and +-10 % band."""
    fig, ax = plt.subplots(figsize=(7, 6))
    for gpu, part in pred.groupby("gpu"):
        ax.scatter(part["measured"], part["predicted"], s=4, alpha=0.5, label=f"{gpu} ({len(part)})")
    lo = float(min(pred["measured"].min(), pred["predicted"].min()))
    hi = float(max(pred["measured"].max(), pred["predicted"].max()))
    xs = np.geomspace(max(lo, 1e-6), hi, 50)
    ax.plot(xs, xs, "k-", lw=1)
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="grey", alpha=0.2, label="±10 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (ms)")
    ax.set_ylabel("predicted (ms)")
    ax.set_title(title)
    ax.legend(fontsize=6, markerscale=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@_one_at_a_time
def residuals_per_gpu(pred: pd.DataFrame, title: str, path: Path) -> Path:
    """Box plot of the signed relative error (%) per GPU."""
    rel = (pred["predicted"] - pred["measured"]) / pred["measured"] * 100.0
    groups = sorted(pred["gpu"].unique())
    data = [rel[pred["gpu"].eq(g)].to_numpy() for g in groups]
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.35 * len(groups) + 1.5)))
    ax.boxplot(data, orientation="horizontal", showfliers=False)
    ax.set_yticks(range(1, len(groups) + 1), [f"{g} ({len(d)})" for g, d in zip(groups, data, strict=True)],
                  fontsize=7)
    ax.axvline(0, color="k", lw=1)
    ax.set_xlabel("relative error (predicted - measured) / measured, %  (whiskers 1.5 IQR, no fliers)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@_one_at_a_time
def importances(values: dict[str, float], kind: str, title: str, path: Path, top: int = 20) -> Path:
    s = pd.Series(values).sort_values(ascending=True).tail(top)
    fig, ax = plt.subplots(figsize=(7, max(3.0, 0.3 * len(s) + 1.2)))
    ax.barh(s.index, s.to_numpy())
    ax.set_xlabel(kind)
    ax.set_title(title)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
