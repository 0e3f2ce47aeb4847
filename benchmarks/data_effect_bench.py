"""What one source's rows change, on the same rows: each model's grouped protocols trained with and without them.

Same dataset (data/processed/dataset.parquet), features, target, seed, budget and folds as the pipeline's train
stage (params.yaml `train:`), once on every row and once without the rows of `--source` (e.g. `own`, our H200
measurements). The grouped protocols assign groups to folds by a hash of the group's name, so both runs hold out
the same families / CNNs / GPUs together: the MAPE on the rows both runs score (all rows but the source's) is a
before/after on the same rows and the same folds. The source's own rows are scored by the run that has them.
Each run trains into its own temporary MLflow and Optuna stores. Writes reports/bench/data_effect_<source>.json
and an MLflow run (experiment cnnperf-bench) unless --no-mlflow.

    python benchmarks/data_effect_bench.py --source own [--models xgb] [--protocols leave_gpu_out,...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.train_time_bench import pipeline_overrides  # noqa: E402


def mape(frame: pd.DataFrame) -> float:
    if frame.empty:
        return float("nan")
    return float(np.mean(np.abs(frame["predicted"] - frame["measured"]) / frame["measured"]) * 100)


def train(model: str, protocol: str, dataset: Path, folder: Path) -> tuple[float, pd.DataFrame, list]:
    """(wall seconds, held-out predictions, fold names and held-out groups) of one fresh training."""
    from src.config import compose
    from src.tracking import setup
    from src.train.run import Trainer

    c = OmegaConf.to_container(compose([
        *pipeline_overrides(), f"model={model}", f"split.protocols=[{protocol}]", f"data.dataset={dataset}",
        f"mlflow.tracking_uri=sqlite:///{folder}/mlflow.db", f"mlflow.artifact_root=file://{folder}/art",
        f"sweep.storage=sqlite:///{folder}/optuna.db", f"reports_dir={folder}/reports"]), resolve=True)
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    trainer = Trainer(c)
    t0 = time.perf_counter()
    trainer.run_protocol(protocol, dict(c["model"].get("warm_start") or {}) or None)
    folds = pd.read_csv(trainer.out_dir / protocol / "folds.csv")[["fold", "held_out"]].values.tolist()
    return time.perf_counter() - t0, pd.read_csv(trainer.out_dir / protocol / "predictions.csv"), folds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="own")
    ap.add_argument("--models", default="xgb")
    ap.add_argument("--protocols", default="leave_model_out,leave_gpu_out,leave_family_out,leave_arch_out")
    ap.add_argument("--no-mlflow", action="store_true")
    a = ap.parse_args()
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    mlflow_cfg = benchmark_store(a.no_mlflow)
    full_path = REPO_ROOT / "data" / "processed" / "dataset.parquet"
    full = pd.read_parquet(full_path)
    mine = full["source"].eq(a.source)
    if not mine.any():
        raise SystemExit(f"no rows of source {a.source!r} in {full_path}")
    out: dict = {"source": a.source, "rows_all": int(len(full)), "rows_source": int(mine.sum()),
                 "overrides": pipeline_overrides(), "results": {}}
    with tempfile.TemporaryDirectory(prefix="data_effect_") as tmp:
        without = Path(tmp) / "dataset_without.parquet"
        full.loc[~mine].reset_index(drop=True).to_parquet(without)
        for model in a.models.split(","):
            for protocol in a.protocols.split(","):
                s_with, p_with, f_with = train(model, protocol, full_path, Path(tmp) / f"{model}-{protocol}-with")
                s_wo, p_wo, f_wo = train(model, protocol, without, Path(tmp) / f"{model}-{protocol}-without")
                theirs = p_with["measurement_id"].str.startswith(f"{a.source}:")
                common = p_with.loc[~theirs].merge(p_wo[["measurement_id", "predicted"]], on="measurement_id",
                                                   suffixes=("", "_without"))
                r = {"rows_compared": int(len(common)),
                     "mape_without_source": mape(common.assign(predicted=common["predicted_without"])),
                     "mape_with_source": mape(common), "mape_on_source_rows": mape(p_with.loc[theirs]),
                     "rows_of_source_scored": int(theirs.sum()),
                     "same_folds": f_with == f_wo, "seconds": [round(s_wo, 1), round(s_with, 1)]}
                out["results"].setdefault(model, {})[protocol] = r
                print(f"{model:4s} {protocol:17s} same rows ({r['rows_compared']}): without "
                      f"{r['mape_without_source']:6.2f} % -> with {r['mape_with_source']:6.2f} %; {a.source} rows "
                      f"({r['rows_of_source_scored']}): "
                      f"{r['mape_on_source_rows']:6.2f} %; same folds: {r['same_folds']}")
    metrics = {f"{m}_{p}_{k}": v[k] for m, ps in out["results"].items() for p, v in ps.items()
               for k in ("mape_without_source", "mape_with_source", "mape_on_source_rows") if v[k] == v[k]}
    target = REPO_ROOT / "reports" / "bench" / f"data_effect_{a.source}.json"
    record_benchmark(out, target, mlflow_cfg, f"data_effect/{a.source}", {"source": a.source}, metrics)
    print(f"wrote {target.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
