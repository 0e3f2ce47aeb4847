"""Outputs of a ranking: CSV, a plot with interval bars, a console table, and optional MLflow logging."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from src.predict.rank import RankResult  # noqa: E402


def plot_ranking(table: pd.DataFrame, title: str, path: Path, top: int = 40) -> Path:
    """Horizontal bars of predicted latency per GPU (one panel per batch size) with conformal interval bars."""
    batches = sorted(table["batch_size"].unique())
    n = min(top, table.groupby("batch_size").size().max())
    fig, axes = plt.subplots(1, len(batches), figsize=(6.5 * len(batches), 0.28 * n + 1.6), squeeze=False)
    for ax, b in zip(axes[0], batches, strict=True):
        t = table[table["batch_size"] == b].nsmallest(n, "latency_ms").iloc[::-1]
        y = np.arange(len(t))
        seen = t["gpu_in_training"].fillna(False).astype(bool).to_numpy()
        ax.barh(y, t["latency_ms"], color=np.where(seen, "tab:blue", "tab:orange"))
        if t["latency_lo_ms"].notna().all():
            err = np.vstack([t["latency_ms"] - t["latency_lo_ms"], t["latency_hi_ms"] - t["latency_ms"]])
            ax.errorbar(t["latency_ms"], y, xerr=err, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        ax.scatter(t["roofline_ms"], y, marker="|", color="red", s=60, zorder=3, label="roofline bound")
        ax.set_yticks(y, t["gpu"], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("predicted latency per batch (ms, log scale)")
        ax.set_title(f"batch {b}", fontsize=9)
        ax.legend(loc="lower right", fontsize=7)
    fig.suptitle(f"{title}\nblue: GPU in training data, orange: GPU known only by specs; bars: "
                 f"{int(table['interval_level'].iloc[0] * 100)} % conformal interval", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def console_table(table: pd.DataFrame, top: int | None = None) -> str:
    cols = ["batch_size", "rank", "gpu", "latency_ms", "latency_lo_ms", "latency_hi_ms", "throughput_per_s",
            "roofline_ms", "bound", "gpu_in_training", "in_training_range", "interval_kind"]
    t = table[cols] if top is None else table.groupby("batch_size").head(top)[cols]
    return t.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def save(result: RankResult, out_dir: Path, stem: str, title: str, meta: dict) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / f"{stem}.csv", "png": out_dir / f"{stem}.png", "json": out_dir / f"{stem}.json"}
    result.table.to_csv(paths["csv"], index=False)
    plot_ranking(result.table, title, paths["png"])
    paths["json"].write_text(json.dumps({**meta, "timings": result.timings, "notes": result.notes}, indent=2,
                                        default=str) + "\n")
    return paths


def log_mlflow(paths: dict[str, Path], params: dict, timings: dict, tracking_uri: str, experiment: str,
               artifact_root: str | None) -> str:
    """One run per query in its own experiment: query params, phase timings, the CSV/plot/JSON as artifacts."""
    import mlflow

    from src.tracking import setup

    setup(tracking_uri, experiment, artifact_root)
    with mlflow.start_run(run_name=f"dse/{params.get('cnn')}") as run:
        mlflow.set_tag("run_kind", "dse")
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        mlflow.log_metrics({k: float(v) for k, v in timings.items() if isinstance(v, (int, float))})
        for p in paths.values():
            mlflow.log_artifact(str(p), artifact_path="dse")
        return run.info.run_id
