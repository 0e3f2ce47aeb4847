"""How long a model's whole train stage takes with its protocols one after another (each grouped protocol's folds
on the worker pool, random and random_rows side by side: the schedule before cb1ff32) against every protocol at
once on one pool (`Trainer.concurrent`), and whether every number stays the same.

Same dataset, budget, protocols and seed as the pipeline's train stage (params.yaml `train:`); each schedule trains
from scratch into its own temporary MLflow and Optuna stores. Prints and records, per model: wall seconds of each
schedule, the speed-up, and whether every protocol's held-out predictions, fold parameters and metrics are
bit-identical. Writes reports/bench/protocol_schedule_bench.json and an MLflow run (experiment cnnperf-bench)
unless --no-mlflow. Run it on an otherwise idle machine: it measures wall time.

    python benchmarks/protocol_schedule_bench.py [--models lr,knn,rf,dt,xgb] [--jobs 2]   (~25 min on 2 cores)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_time_bench import fresh_trainer, pipeline_overrides, timing_parser  # noqa: E402

SCHEDULES = ("one_after_another", "at_once")


def pipeline_protocols() -> str:
    from src.config import REPO_ROOT

    return str(yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["train"]["protocols"])


def train_run(model: str, schedule: str, jobs: int, tmp: Path, extra: list[str]) -> tuple[float, dict, dict]:
    """(wall seconds, summary, {protocol: held-out predictions}) of one fresh training under `schedule`."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r}: one of {SCHEDULES}")
    trainer = fresh_trainer(model, tmp / f"{model}-{schedule}", [
        *extra, f"sweep.fold_jobs={jobs}", "sweep.fold_backend=process", f"split.protocols={pipeline_protocols()}"])
    if schedule == "one_after_another":
        trainer.concurrent = trainer.side_by_side  # the schedule before: only the single-fold pair at once
    t0 = time.perf_counter()
    summary = trainer.run()
    wall = time.perf_counter() - t0
    preds = {p: pd.read_csv(trainer.out_dir / p / "predictions.csv") for p in summary["protocols"]}
    return wall, summary, preds


def identical(a: tuple, b: tuple) -> bool:
    """Same protocols, held-out predictions, fold parameters and metrics."""
    (_, sa, pa), (_, sb, pb) = a, b
    if list(sa["protocols"]) != list(sb["protocols"]):
        return False
    for p, ra in sa["protocols"].items():
        rb = sb["protocols"][p]
        if not np.array_equal(pa[p]["predicted"].to_numpy(), pb[p]["predicted"].to_numpy()):
            return False
        if ra["fold_params"] != rb["fold_params"] or any(ra[k] != rb[k] for k in ("mape", "r2", "adj_r2")):
            return False
    return sa.get("selection_cv_mape") == sb.get("selection_cv_mape")


def main() -> None:
    a = timing_parser(__doc__.splitlines()[0], "reports/bench/protocol_schedule_bench.json").parse_args()
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    mlflow_cfg = benchmark_store(a.no_mlflow)  # read before training points MLflow at a temporary store
    rows = {}
    with tempfile.TemporaryDirectory(prefix="protocol_schedule_bench_") as tmp:
        for model in a.models.split(","):
            runs = {s: train_run(model, s, a.jobs, Path(tmp), a.overrides) for s in SCHEDULES}
            before, after = runs["one_after_another"][0], runs["at_once"][0]
            same = identical(runs["one_after_another"], runs["at_once"])
            rows[model] = {"seconds_one_after_another": round(before, 2), "seconds_at_once": round(after, 2),
                           "speedup": round(before / after, 3), "identical_results": bool(same),
                           "protocols": list(runs["at_once"][1]["protocols"])}
            print(f"{model:4s} {before:7.1f} s one after another, {after:7.1f} s at once "
                  f"(x{before / after:.2f}, identical: {same})", flush=True)
    out = {"jobs": a.jobs, "cpus": os.cpu_count(), "overrides": pipeline_overrides(),
           "protocols": pipeline_protocols(), "models": rows}
    record_benchmark(out, REPO_ROOT / a.out, mlflow_cfg, "train_time/protocol_schedule", {"jobs": str(a.jobs)},
                     {f"{m}_speedup": r["speedup"] for m, r in rows.items()}
                     | {f"{m}_identical": float(r["identical_results"]) for m, r in rows.items()})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
