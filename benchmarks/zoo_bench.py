"""Seconds per model for model -> PTX -> counts (the paper reports 6.8-60 s per CNN).

Two modes:
  python benchmarks/zoo_bench.py                      # summarise the `ptx` stage's per-model timings (cache)
  python benchmarks/zoo_bench.py --run keras:ResNet50 torchvision:resnet18 --arch sm_86
                                                     # time fresh runs now (build, export, TVM, nvcc, count)
Protocol: wall-clock of one process doing build -> torch.export -> Relax -> dlight schedules -> lowering ->
nvcc of the kernels not yet in the kernel cache (one PTX arch unless several are asked) -> PTX analyzer over
every launch not yet counted, batch 1. The cached timings were taken by the stage under `nice` on a 2-core machine
running two models at a time, so they are upper bounds for an idle machine. The summary also gives how much the
kernel cache saved: models that compiled no kernel of their own, and (from ptx_kernels.parquet) distinct
kernels over kernels summed per CNN and over launches across all CNNs. Printed, written to
reports/bench/zoo_bench.json and logged as an MLflow run (experiment cnnperf-bench) unless --no-mlflow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def summarise_cache(cache: Path) -> dict:
    rows = []
    for path in sorted(cache.glob("*__b*/result.json")):
        r = json.loads(path.read_text())
        kc = r.get("kernel_cache", {})
        rows.append({"model": f"{r['source']}:{r['model']}@{r['img_size']}", "seconds": r["seconds"],
                     "nvcc_archs": len(r.get("nvcc_archs", [])) or None, **r["stage_seconds"],
                     "kernels_needed": kc.get("distinct_kernels"), "kernels_compiled": kc.get("nvcc_kernels"),
                     "launches_counted": kc.get("counted"), "launches_reused": kc.get("counts_reused")})
    if not rows:
        raise SystemExit(f"no results under {cache} (run `python -m src.zoo table` first)")
    secs = sorted(x["seconds"] for x in rows)
    extra = ("model", "seconds", "nvcc_archs", "kernels_needed", "kernels_compiled", "launches_counted",
             "launches_reused")
    stages = sorted({k for x in rows for k in x if k not in extra})
    out = {
        "models": len(rows),
        "median_s": statistics.median(secs),
        "p10_s": secs[int(0.1 * (len(secs) - 1))],
        "p90_s": secs[int(0.9 * (len(secs) - 1))],
        "min_s": secs[0],
        "max_s": secs[-1],
        "median_stage_s": {k: statistics.median(x.get(k, 0.0) for x in rows) for k in stages},
        # Per model: kernels it needed (one arch) and nvcc'd (all archs of that run); the exact dedup ratio
        # across CNNs is the kernel table's (`kernel_table` below).
        "models_compiling_no_kernel": sum(1 for x in rows if x["kernels_compiled"] == 0),
        "slowest": sorted(rows, key=lambda x: -x["seconds"])[:5],
    }
    return out


def kernel_table_summary(path: Path) -> dict:
    import pandas as pd

    from src.zoo.kernel_table import dedup_summary

    if not path.exists():
        return {}
    k = pd.read_parquet(path)
    return {"cnns": int(k[["model_key", "img_size"]].drop_duplicates().shape[0]), **dedup_summary(k)}


def run_fresh(specs: list[str], arch: str, batch: int) -> dict:
    from src.zoo.pipeline import ptx_features

    results = []
    for spec in specs:
        source, _, name = spec.partition(":")
        t0 = time.perf_counter()
        r = ptx_features(source, name, None, batch, [arch])
        wall = time.perf_counter() - t0
        c = r["by_arch"][arch]
        results.append({"model": spec, "wall_s": round(wall, 2), "stage_seconds": r["stage_seconds"],
                        "thread_instructions": c["thread_instructions"], "kernels": c["kernels"],
                        "launches": c["launches"]})
        print(json.dumps(results[-1]), flush=True)
    walls = [x["wall_s"] for x in results]
    return {"arch": arch, "batch": batch, "median_wall_s": statistics.median(walls), "runs": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="data/interim/ptx", help="the ptx stage's cache folder")
    ap.add_argument("--run", nargs="*", default=None, help="source:model to time now (e.g. keras:ResNet50)")
    ap.add_argument("--arch", default="sm_86")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--kernels", default="data/processed/ptx_kernels.parquet", help="the per-kernel table")
    ap.add_argument("--out", default="reports/bench/zoo_bench.json", help="write the result as JSON here")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args()
    if args.run:
        result = run_fresh(args.run, args.arch, args.batch)
    else:
        result = {**summarise_cache(Path(args.cache)), "kernel_table": kernel_table_summary(Path(args.kernels))}
    print(json.dumps(result, indent=1))
    from omegaconf import OmegaConf

    from src.config import compose
    from src.tracking import record_benchmark

    metrics = {k: float(v) for k, v in result.items() if isinstance(v, int | float)}
    metrics.update({f"kernel_table_{k}": float(v) for k, v in result.get("kernel_table", {}).items()
                    if isinstance(v, int | float)})
    mlflow_cfg = None if args.no_mlflow else OmegaConf.to_container(compose([]), resolve=True)["mlflow"]
    record_benchmark(result, Path(args.out), mlflow_cfg, "benchmark/zoo", {"mode": "run" if args.run else "cache"},
                     metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
