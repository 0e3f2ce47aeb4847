"""Outer folds trained in worker threads (`sweep.fold_jobs`) give the numbers of one-at-a-time training, and their
MLflow runs (folds, trials) still nest under the protocol run (tiny table, real SQLite stores)."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from src.config import compose
from src.tracking import setup
from src.train.run import Trainer
from tests.train.tiny import overrides


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("fold_jobs")
    return base, overrides(base, n_trials=3, protocols="[leave_gpu_out]")


def run(base, ov: list[str], model: str, jobs: int) -> tuple[dict, pd.DataFrame, dict]:
    c = OmegaConf.to_container(compose([
        *ov, f"model={model}", f"sweep.fold_jobs={jobs}", f"reports_dir={base}/reports-{jobs}",
        f"sweep.storage=sqlite:///{base}/optuna-{model}-{jobs}.db"]), resolve=True)
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    trainer = Trainer(c)
    warm = dict(c["model"].get("warm_start") or {}) or None
    res = trainer.run_protocol("leave_gpu_out", warm)
    pred = pd.read_csv(trainer.out_dir / "leave_gpu_out" / "predictions.csv")
    return res, pred, c


@pytest.mark.parametrize("model", ["dt", "xgb"])
def test_threaded_folds_give_the_same_numbers_and_nested_runs(tiny, model):
    base, ov = tiny
    one, pred_one, _ = run(base, ov, model, 1)
    two, pred_two, c = run(base, ov, model, 2)
    assert one["folds"] == two["folds"] >= 2
    assert np.array_equal(pred_one["predicted"].to_numpy(), pred_two["predicted"].to_numpy())
    assert pred_one["measurement_id"].tolist() == pred_two["measurement_id"].tolist()
    assert one["fold_params"] == two["fold_params"]
    for k in ("mape", "r2", "cv_mape"):
        assert one[k] == two[k]
    client = MlflowClient(c["mlflow"]["tracking_uri"])
    exp = client.get_experiment_by_name(c["mlflow"]["experiment"]).experiment_id
    folds = client.search_runs([exp], f"tags.mlflow.parentRunId = '{two['run_id']}'")
    assert len(folds) == two["folds"]
    assert all(f.data.tags["run_kind"] == "fold" and f.info.status == "FINISHED" for f in folds)
    assert all({"mape", "cv_mape"} <= set(f.data.metrics) for f in folds)
    for f in folds:  # each fold's trials nest under it (3 trials per fold study)
        trials = client.search_runs([exp], f"tags.mlflow.parentRunId = '{f.info.run_id}'")
        assert len(trials) == 3 and all(t.data.tags["run_kind"] == "trial" for t in trials)
    assert mlflow.active_run() is None
