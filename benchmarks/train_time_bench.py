"""How long one model's grouped protocol trains, folds one at a time against `sweep.fold_jobs` at once in threads
and in worker processes (`sweep.fold_backend`), and whether the numbers stay the same.

Same dataset (data/processed/dataset.parquet), model, budget, protocol and seed as the pipeline's train stage
(params.yaml `train:`); each setting trains the protocol from scratch into its own temporary MLflow and Optuna
stores (so all pay the same store writes). Prints and records, per model: wall seconds at fold_jobs=1 and at
fold_jobs=N with each backend, the speed-ups, and whether every held-out prediction, fold parameter and metric is
bit-identical. The process backend's time includes starting its workers (once per model run in the pipeline,
here once per protocol: a pessimistic count).
Writes reports/bench/train_time_bench.json and an MLflow run (experiment cnnperf-bench) unless --no-mlflow.
Run it on an otherwise idle machine: it measures wall time.

    python benchmarks/train_time_bench.py [--models lr,knn,dt,xgb] [--protocol leave_family_out] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Report keys and printed lines name the fold backends in the plural.
PLURAL = {"thread": "threads", "process": "processes"}


def pipeline_overrides() -> list[str]:
    """The train stage's Hydra overrides from params.yaml (as dvc.yaml builds them)."""
    from src.config import REPO_ROOT

    t = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["train"]
    return [f"features={t['features']}", f"target={t['target']}", f"seed={t['seed']}",
            f"sweep.n_trials={t['n_trials']}", f"sweep.n_trials_slow={t['n_trials_slow']}",
            f"sweep.cv_folds={t['cv_folds']}", f"sweep.tune_max_rows={t['tune_max_rows']}",
            f"split.leave_gpu_out.n_groups={t['leave_gpu_out_groups']}", f"sweep.perm_repeats={t['perm_repeats']}",
            "progress=false"]


def fresh_trainer(model: str, folder: Path, overrides: list[str]):
    """A Trainer of the train stage's settings plus `overrides`, with its own MLflow and Optuna stores and reports
    under `folder` (so every timed training pays the same store writes)."""
    from src.config import compose
    from src.tracking import setup
    from src.train.run import Trainer

    c = OmegaConf.to_container(compose([
        *pipeline_overrides(), *overrides, f"model={model}",
        f"mlflow.tracking_uri=sqlite:///{folder}/mlflow.db", f"mlflow.artifact_root=file://{folder}/art",
        f"sweep.storage=sqlite:///{folder}/optuna.db", f"reports_dir={folder}/reports"]), resolve=True)
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    return Trainer(c)


def train_protocol(model: str, protocol: str, jobs: int, tmp: Path, extra: list[str],
                   backend: str = "thread") -> tuple[float, dict, pd.DataFrame]:
    """(wall seconds, protocol result, held-out predictions) of one fresh training of `protocol`."""
    trainer = fresh_trainer(model, tmp / f"{model}-{jobs}-{backend}", [
        *extra, f"sweep.fold_jobs={jobs}", f"sweep.fold_backend={backend}", f"split.protocols=[{protocol}]"])
    c = trainer.c
    warm = dict(c["model"].get("warm_start") or {}) or None
    t0 = time.perf_counter()
    try:
        res = trainer.run_protocol(protocol, warm)
    finally:
        trainer.close_pool()
    wall = time.perf_counter() - t0
    return wall, res, pd.read_csv(trainer.out_dir / protocol / "predictions.csv")


def timing_parser(description: str, out: str) -> argparse.ArgumentParser:
    """The arguments every train-timing bench takes: models, fold workers, report path, MLflow off, overrides."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--models", default="lr,knn,rf,dt,xgb")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=out)
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. data.dataset=...)")
    return ap


def main() -> None:
    ap = timing_parser(__doc__.splitlines()[0], "reports/bench/train_time_bench.json")
    ap.add_argument("--protocol", default="leave_family_out")
    a = ap.parse_args()
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    # the store to record in, read before training: each training points MLflow (and MLFLOW_TRACKING_URI, which
    # the config reads) at its temporary store
    mlflow_cfg = benchmark_store(a.no_mlflow)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="train_time_bench_") as tmp:
        for model in a.models.split(","):
            one = train_protocol(model, a.protocol, 1, Path(tmp), a.overrides)
            rows[model] = {"folds": one[1]["folds"], "seconds_one_at_a_time": round(one[0], 2), "mape": one[1]["mape"]}
            line = f"{model:4s} {a.protocol} ({one[1]['folds']} folds): {one[0]:7.1f} s one at a time"
            for backend in ("thread", "process"):
                many = train_protocol(model, a.protocol, a.jobs, Path(tmp), a.overrides, backend)
                same = (np.array_equal(one[2]["predicted"].to_numpy(), many[2]["predicted"].to_numpy())
                        and one[1]["fold_params"] == many[1]["fold_params"]
                        and all(one[1][k] == many[1][k] for k in ("mape", "r2", "adj_r2", "cv_mape")))
                rows[model] |= {f"seconds_{a.jobs}_{PLURAL[backend]}": round(many[0], 2),
                                f"speedup_{PLURAL[backend]}": round(one[0] / many[0], 3),
                                f"identical_results_{PLURAL[backend]}": bool(same)}
                line += f"; {many[0]:6.1f} s in {a.jobs} {PLURAL[backend]} (x{one[0] / many[0]:.2f}, identical: {same})"
            print(line)
    out = {"protocol": a.protocol, "jobs": a.jobs, "cpus": os.cpu_count(), "overrides": pipeline_overrides(),
           "models": rows}
    names = [PLURAL[b] for b in ("thread", "process")]
    record_benchmark(out, REPO_ROOT / a.out, mlflow_cfg, f"train_time/{a.protocol}", {"protocol": a.protocol},
                     {f"{m}_speedup_{n}": r[f"speedup_{n}"] for m, r in rows.items() for n in names}
                     | {f"{m}_identical_{n}": float(r[f"identical_results_{n}"]) for m, r in rows.items()
                        for n in names})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
