"""Error of the batch-1 rule on every CNN the committed per-kernel table holds at a larger compiled batch.

The `ptx` stage compiles each CNN at batch 1 and, with `ptx.extra_batches`, again at 32; a measured batch scales
from the largest compiled batch not above it. This script reads only the committed `ptx_kernels.parquet` (no
zoo extra, no nvcc) and reports, per (CNN, input size, PTX arch) compiled at both, the error the batch-1 rule
would make at that batch: b * count(1) / count(b) - 1 (positive = the rule over-estimates), for thread and warp
instructions, FMA, and global-load bytes; and how many measured GPU rows the compiled counts now price.
`benchmarks/ptx_batch_bench.py` compiles a fixed sample at several batches; this one covers the whole table.

Writes reports/bench/ptx_batch_scaling.json, a histogram (reports/bench/ptx_batch_scaling.png) and an MLflow run
(experiment cnnperf-bench) unless --no-mlflow.

    python benchmarks/ptx_batch_scaling.py [--batch 32] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.zoo.kernel_table import linear_rule_errors  # noqa: E402


def summarise(errors: pd.DataFrame) -> dict:
    """Median, quantiles and the share beyond 2 % of the thread-instruction error, per PTX arch."""
    out = {}
    for arch, e in errors.groupby("nvcc_arch"):
        t = e["thread"].dropna()
        out[str(arch)] = {"cnns": int(len(t)), "median": float(t.median()), "p10": float(t.quantile(0.1)),
                          "p90": float(t.quantile(0.9)), "max_abs": float(t.abs().max()),
                          "share_over_2pct": float((t.abs() > 0.02).mean()),
                          "median_abs": float(t.abs().median()),
                          "median_fma": float(e["fma"].dropna().median()),
                          "median_load_global_bytes": float(e["load_global_bytes"].dropna().median())}
    return out


def rows_priced(counts: pd.DataFrame) -> dict:
    """Measured GPU rows by count method (which compiled batch prices them)."""
    return {str(k): int(v) for k, v in counts["count_method"].value_counts().sort_index().items()}


def plot(errors: pd.DataFrame, batch: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arch, e in errors.groupby("nvcc_arch"):
        ax.hist(100 * e["thread"].dropna().clip(-0.3, 0.5), bins=60, alpha=0.6, label=f"{arch} ({len(e)} CNNs)")
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel(f"batch-1 rule error at batch {batch}, thread instructions (%), clipped to [-30, 50]")
    ax.set_ylabel("(CNN, input size)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--kernels", default="data/processed/ptx_kernels.parquet")
    ap.add_argument("--counts", default="data/processed/ptx_counts.parquet")
    ap.add_argument("--out", default="reports/bench/ptx_batch_scaling.json")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args(argv)
    kernels = pd.read_parquet(args.kernels)
    errors = linear_rule_errors(kernels, args.batch)
    if errors.empty:
        raise SystemExit(f"error: {args.kernels} holds no CNN compiled at batch 1 and at batch {args.batch}")
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    png = out_path.with_suffix(".png")
    plot(errors, args.batch, png)
    worst = errors.loc[errors["nvcc_arch"] == "sm_75"].sort_values("thread", key=abs, ascending=False).head(15)
    out = {"protocol": f"committed per-kernel table; error of the batch-1 rule = {args.batch}*count(1)/"
                       f"count({args.batch}) - 1 per (CNN, input size, PTX arch) compiled at both",
           "batch": args.batch, "summary": summarise(errors),
           "count_methods": rows_priced(pd.read_parquet(args.counts)),
           "worst_sm_75": worst[["model_key", "img_size", "thread", "fma", "load_global_bytes",
                                 "launches_ratio"]].round(4).to_dict("records"),
           "plot": str(png)}
    import json

    print(json.dumps({k: out[k] for k in ("summary", "count_methods")}, indent=1))
    from omegaconf import OmegaConf

    from src.config import compose
    from src.tracking import record_benchmark

    metrics = {f"{a}_{k}": float(v) for a, s in out["summary"].items() for k, v in s.items()}
    mlflow_cfg = None if args.no_mlflow else OmegaConf.to_container(compose([]), resolve=True)["mlflow"]
    record_benchmark(out, out_path, mlflow_cfg, "benchmark/ptx_batch_scaling",
                     {"batch": str(args.batch), "cnns": str(len(errors))}, metrics, artifacts=[png])
    return out


if __name__ == "__main__":
    main()
