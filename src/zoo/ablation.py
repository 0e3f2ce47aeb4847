"""Do PTX counts improve predictions? The five regressors with three feature sets on the same rows.

Sets (all with the run configuration categoricals of conf/features/static.yaml):
- paper: trainable parameters + executed (thread) PTX instructions + memory bandwidth (the paper's features)
- static: our static features (params, GMACs, activations, batch, image size) + all GPU specs
- static_ptx: static + every PTX count column (thread/warp instructions, by class, bytes by space, launches)
Rows: measurements whose (model_key, img_size, batch_size, compute capability) have PTX counts, so the three
sets see the same rows. Runs `python -m src.train` (Hydra multirun over the five models, conf/split's protocols),
logging to MLflow experiment `cnnperf-zoo-ablation`; prints a MAPE/R2 table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

SETS = {
    "paper": ["features=static", "features.use_ptx=true", "features.ptx_prefix=ptx_thread_instructions",
              "features.numeric_inputs=[param_count_m]", "features.gpu_features=[memory_bandwidth_gbs]",
              "features.name=zoo_paper"],
    "static": ["features=static", "features.name=zoo_static"],
    "static_ptx": ["features=static", "features.use_ptx=true", "features.ptx_prefix=ptx_",
                   "features.name=zoo_static_ptx"],
}
MODELS = "lr,knn,rf,dt,xgb"


def restrict_rows(root: Path, out: Path, keep_cc: bool = False) -> int:
    """Measurements restricted to rows with PTX counts (same rows for every feature set).

    keep_cc: keep the GPU's compute capability as a measurement column, for feature sets whose GPU features
    leave it out (the PTX join needs it).
    """
    meas = pd.read_parquet(root / "data/processed/measurements.parquet")
    gpus = pd.read_parquet(root / "data/processed/gpus.parquet")[["gpu", "compute_capability"]]
    ptx = pd.read_parquet(root / "data/processed/ptx_counts.parquet")
    keys = ptx[["model_key", "img_size", "batch_size", "compute_capability"]].drop_duplicates()
    m = meas.merge(gpus, on="gpu", how="left").merge(keys, on=list(keys.columns), how="inner")
    if not keep_cc:
        m = m.drop(columns=["compute_capability"])
    out.parent.mkdir(parents=True, exist_ok=True)
    m.to_parquet(out, index=False)
    return len(m)


def collect(reports: Path) -> pd.DataFrame:
    rows = []
    for set_name in SETS:
        for path in sorted((reports / set_name).glob("*/metrics.json")):
            d = json.loads(path.read_text())
            for protocol, r in d["protocols"].items():
                rows.append({"features": set_name, "model": d["model"], "protocol": protocol,
                             "mape": r.get("mape"), "r2": r.get("r2"), "adj_r2": r.get("adj_r2"),
                             "n_rows": r.get("n_rows"), "n_features": r.get("n_features")})
    return pd.DataFrame(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/cnnperf_zoo_ablation", help="filtered rows and reports go here")
    ap.add_argument("--n-trials", type=int, default=5, help="Optuna trials per model and protocol")
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--collect-only", action="store_true")
    args = ap.parse_args()
    root = Path.cwd()
    work = Path(args.work)
    meas = work / "measurements_with_ptx.parquet"
    meas_cc = work / "measurements_with_ptx_cc.parquet"
    if not args.collect_only:
        n = restrict_rows(root, meas)
        restrict_rows(root, meas_cc, keep_cc=True)
        print(f"[ablation] {n} measurement rows have PTX counts -> {meas}", flush=True)
        for s in args.sets:
            rows = meas_cc if s == "paper" else meas
            cmd = [sys.executable, "-m", "src.train", "-m", f"model={MODELS}", *SETS[s],
                   f"data.measurements={rows}", f"reports_dir={work / 'reports' / s}",
                   "mlflow.experiment=cnnperf-zoo-ablation", f"sweep.n_trials={args.n_trials}",
                   f"sweep.n_trials_slow={max(2, args.n_trials // 2)}", "progress=false"]
            print("[ablation] " + " ".join(cmd), flush=True)
            rc = subprocess.call(cmd)
            if rc != 0:
                print(f"[ablation] feature set {s} failed (exit {rc})", flush=True)
    table = collect(work / "reports")
    if table.empty:
        print("no results")
        return 1
    pivot = table.pivot_table(index=["protocol", "model"], columns="features", values="mape")
    try:
        print(pivot.round(2).to_markdown())
    except ImportError:  # tabulate not installed
        print(pivot.round(2).to_string())
    table.to_csv(work / "ablation.csv", index=False)
    print(f"[ablation] table -> {work / 'ablation.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
