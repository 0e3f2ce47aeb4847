"""Does the physics estimate scale from one GPU to another as the measurements do?

The efficiency target (measured / physics estimate) carries a prediction to a GPU the learner never saw only as
far as the estimate's GPU-to-GPU ratio is right. This benchmark checks that ratio directly, without any learner:
for every pair of GPUs that ran identical configurations (same source, CNN, input size, batch, precision, mode,
layout, runtime and framework release), the median measured latency ratio A / B against the median ratio of
the physics estimates, per (pair, source, precision, runtime) group of at least `--min-rows` configurations.
`log_error` = log(physics ratio / measured ratio): > 0 means the estimate expects B to gain more over A than
it does. The pairing and the summary are `src/evaluate/scaling.py` (tested in tests/evaluate/test_scaling.py).

Writes reports/bench/gpu_pair_scaling.json (+ .csv, + .png: measured vs estimated ratio per group) and logs an
MLflow run `benchmark/gpu_pair_scaling` (experiment cnnperf-bench).

    python benchmarks/gpu_pair_scaling.py [--min-rows 20] [--override physics.kernel_floor_us=3 ...] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT, compose  # noqa: E402
from src.evaluate.scaling import pair_groups, scaling_summary  # noqa: E402
from src.features.baseline import perf_step  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train.fit import make_model, ptx_columns  # noqa: E402


def physics_estimates(overrides: list[str]) -> pd.DataFrame:
    """The dataset's rows with the physics estimate (ms) and its kernel count from the default feature set's
    Pipeline."""
    c = OmegaConf.to_container(compose(["features=physics_ptx", "target=efficiency", *overrides]), resolve=True)
    df = pd.read_parquet(REPO_ROOT / c["data"]["dataset"])
    ptx = ptx_columns(c, df)
    cols = input_columns(c["features"], ptx)
    perf = perf_step(make_model(c, None, ptx).regressor)
    perf.fit(df[cols])
    frame = perf.physics_frame(df[cols])
    df["t_physics_ms"] = frame["t_physics_ms"].to_numpy()
    df["n_kernels"] = frame["n_kernels"].to_numpy()
    return df


def plot(groups: pd.DataFrame, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    hopper = groups["gpu_a"].str.startswith(("H100", "H200")) & groups["gpu_b"].str.startswith(("H100", "H200"))
    for mask, label, color in ((~hopper, "other pairs", "tab:blue"), (hopper, "H100 / H200", "tab:red")):
        g = groups[mask]
        ax.scatter(g["measured_ratio"], g["estimated_ratio"], s=8 + 2 * np.sqrt(g["rows"]), alpha=0.6,
                   color=color, label=label)
    hi = float(max(groups["measured_ratio"].max(), groups["estimated_ratio"].max()) * 1.1)
    return finish_ratio_plot(fig, ax, (1.0, hi), path, xlabel="measured latency ratio (slower / faster GPU)",
                             ylabel="physics estimate's ratio", title="GPU-to-GPU scaling: identical configurations")


def finish_ratio_plot(fig, ax, span: tuple[float, float], path: Path, **labels: str) -> Path:
    """Log-log axes with the y = x diagonal over `span`, a legend, saved to `path` (the measured-vs-estimated
    ratio plots of the benchmarks)."""
    ax.plot(span, span, "k--", lw=1)
    ax.set(xscale="log", yscale="log", **labels)
    return save_with_legend(fig, ax, path)


def save_with_legend(fig, ax, path: Path, dpi: int = 110, legend_size: float | None = None) -> Path:
    """The benchmarks' figure tail: legend, tight layout, saved to `path`, closed (so loops do not pile figures)."""
    import matplotlib.pyplot as plt

    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--min-rows", type=int, default=20)
    ap.add_argument("--override", nargs="*", default=[], help="Hydra overrides of the physics/feature configs")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "gpu_pair_scaling.json"))
    args = ap.parse_args()
    df = physics_estimates(args.override)
    groups = pair_groups(df, min_rows=args.min_rows)
    if groups.empty:
        raise SystemExit(f"no GPU pair ran >= {args.min_rows} identical configurations")
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    groups.to_csv(out_path.with_suffix(".csv"), index=False)
    png = plot(groups, out_path.with_suffix(".png"))
    summary = scaling_summary(groups)
    print(groups.sort_values("log_error").to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in summary.items()})
    c = OmegaConf.to_container(compose(["features=physics_ptx", "target=efficiency", *args.override]), resolve=True)
    record_benchmark({"summary": summary, "overrides": args.override, "min_rows": args.min_rows,
                      "groups": groups.to_dict(orient="records")}, out_path,
                     None if args.no_mlflow else c["mlflow"], "benchmark/gpu_pair_scaling",
                     {"overrides": " ".join(args.override)}, summary, artifacts=[png, out_path.with_suffix(".csv")])
    print(f"-> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
