"""Eager, torch.compile and CUDA graphs at batch 1 on one GPU: does the physics estimate price each runtime's
kernels and launches as they ran?

Two checks on our own H200 triples (data/own/h200_20261128_compile_bs1_*: the same CNN timed eager, torch.compile
and graph-replayed, back to back), no learner involved:
- kernel counts: the kernels one step launched (profiler traces, `<run>/kernel_counts.csv`, classed by
  src/profiling/trace.py) against the estimate's kernel list for that runtime (kernel profiles: `forward` for
  eager, `forward@pointwise` for torch.compile), whole and without cuDNN's layout transforms;
- speed-ups: measured eager / runtime latency against the same ratio of the physics estimates (t_physics_ms of
  the default feature set's Pipeline, with `--override physics...` to try other constants), and the host time
  per estimated kernel, (latency - graph replay) / kernels, that the `dispatch_us` constants stand for.

Writes reports/bench/runtime_batch1.json (+ .csv per configuration, + .png) and logs an MLflow run
`benchmark/runtime_batch1` (experiment cnnperf-bench).

    python benchmarks/runtime_batch1_bench.py [--override physics.dispatch_us.torch_compile=2.0 ...] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_pair_scaling import finish_ratio_plot, physics_estimates  # noqa: E402

from src.config import REPO_ROOT, compose  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402

RUNS = "data/own/h200_20261128_compile_bs1_*"
WITHIN = 0.25
PASS_OF = {"eager": "forward", "torch_compile": "forward@pointwise"}


def kernel_counts(root: Path) -> pd.DataFrame:
    """Measured kernels per traced step beside the estimate's kernel count for that runtime's pass."""
    files = sorted(glob.glob(str(root / RUNS / "kernel_counts.csv")))
    if not files:
        raise SystemExit(f"no kernel_counts.csv under {root / RUNS}")
    measured = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    prof = pd.read_parquet(root / "data/processed/kernel_profiles.parquet")
    est = (prof.assign(mac=np.where(prof["kernel_class"].isin(["mac", "depthwise"]), prof["count"], 0))
           .groupby(["model_key", "img_size", "pass"], observed=True)
           .agg(est_kernels=("count", "sum"), est_mac_kernels=("mac", "sum")).reset_index())
    measured["pass"] = measured["compile_mode"].map(PASS_OF)
    out = measured.merge(est, on=["model_key", "img_size", "pass"], how="left")
    out["measured_over_estimate"] = out["kernels"] / out["est_kernels"]
    out["without_layout_over_estimate"] = (out["kernels"] - out["layout_kernels"]) / out["est_kernels"]
    out["mac_measured_over_estimate"] = out["mac_kernels"] / out["est_mac_kernels"]
    return out


def speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Per (CNN, precision) triple: measured and estimated eager / runtime speed-ups, host us per kernel."""
    rows = df[df["measurement_id"].str.contains("h200_20261128_compile_bs1")]
    keys = ["model_key", "precision"]
    lat = rows.pivot_table(index=keys, columns="compile_mode", values="target")
    est = rows.pivot_table(index=keys, columns="compile_mode", values="t_physics_ms")
    kernels = rows.pivot_table(index=keys, columns="compile_mode", values="n_kernels")
    out = pd.DataFrame(index=lat.index)
    for rt in ("torch_compile", "cuda_graphs"):
        out[f"measured_{rt}"] = lat["eager"] / lat[rt]
        out[f"estimated_{rt}"] = est["eager"] / est[rt]
        out[f"error_{rt}"] = (out[f"estimated_{rt}"] / out[f"measured_{rt}"] - 1).abs()
    for rt in ("eager", "torch_compile"):
        out[f"host_us_per_kernel_{rt}"] = (lat[rt] - lat["cuda_graphs"]) / kernels[rt] * 1e3
    return out.reset_index()


def plot(sp: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5.5))
    for rt, color in (("torch_compile", "tab:orange"), ("cuda_graphs", "tab:green")):
        ax.scatter(sp[f"measured_{rt}"], sp[f"estimated_{rt}"], s=18, alpha=0.7, color=color, label=rt)
    hi = float(np.nanmax(sp.filter(like="ed_").to_numpy()) * 1.1)
    return finish_ratio_plot(fig, ax, (0.5, hi), path, xlabel="measured speed-up over eager (H200, batch 1)",
                             ylabel="physics estimate's speed-up", title="Runtimes at batch 1: eager / runtime latency")


def summarize(counts: pd.DataFrame, sp: pd.DataFrame) -> dict[str, float]:
    s: dict[str, float] = {"triples": float(len(sp)), "traces": float(len(counts))}
    for rt, g in counts.groupby("compile_mode"):
        s[f"kernels_measured_over_estimate_{rt}"] = float(g["measured_over_estimate"].median())
        s[f"kernels_without_layout_over_estimate_{rt}"] = float(g["without_layout_over_estimate"].median())
        s[f"mac_kernels_measured_over_estimate_{rt}"] = float(g["mac_measured_over_estimate"].median())
    for rt in ("torch_compile", "cuda_graphs"):
        err = sp[f"error_{rt}"].dropna()
        s[f"speedup_measured_median_{rt}"] = float(sp[f"measured_{rt}"].median())
        s[f"speedup_estimated_median_{rt}"] = float(sp[f"estimated_{rt}"].median())
        s[f"speedup_error_median_{rt}"] = float(err.median())
        s[f"speedup_within_25pct_{rt}"] = float((err <= WITHIN).mean())
    for rt in ("eager", "torch_compile"):
        s[f"host_us_per_estimated_kernel_{rt}"] = float(sp[f"host_us_per_kernel_{rt}"].median())
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--override", nargs="*", default=[], help="Hydra overrides of the physics/feature configs")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "runtime_batch1.json"))
    args = ap.parse_args()
    counts = kernel_counts(REPO_ROOT)
    df = physics_estimates(args.override)
    c = OmegaConf.to_container(compose(["features=physics_ptx", "target=efficiency", *args.override]), resolve=True)
    sp = speedups(df)
    summary = summarize(counts, sp)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sp.to_csv(out_path.with_suffix(".csv"), index=False)
    counts.to_csv(out_path.with_name(out_path.stem + "_kernels.csv"), index=False)
    png = plot(sp, out_path.with_suffix(".png"))
    print(counts[["model", "precision", "compile_mode", "kernels", "layout_kernels", "est_kernels",
                  "measured_over_estimate", "without_layout_over_estimate"]].to_string(index=False))
    print(sp.round(3).to_string(index=False))
    print({k: round(v, 3) for k, v in summary.items()})
    record_benchmark({"summary": summary, "overrides": args.override, "speedups": sp.to_dict(orient="records")},
                     out_path, None if args.no_mlflow else c["mlflow"], "benchmark/runtime_batch1",
                     {"overrides": " ".join(args.override)}, summary,
                     artifacts=[png, out_path.with_suffix(".csv"), out_path.with_name(out_path.stem + "_kernels.csv")])
    print(f"-> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
