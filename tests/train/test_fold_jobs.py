"""Outer folds trained in worker threads or processes (`sweep.fold_jobs`, `sweep.fold_backend`) give the numbers
of one-at-a-time training, and their MLflow runs (folds, trials) still nest under the protocol run (tiny table,
real SQLite stores)."""

from __future__ import annotations

from pathlib import Path

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


def run(base, ov: list[str], model: str, jobs: int, backend: str = "thread", tag: str = "") -> tuple:
    name = f"{model}-{jobs}-{backend}{tag}"  # own reports and study store per call
    c = OmegaConf.to_container(compose([
        *ov, f"model={model}", f"sweep.fold_jobs={jobs}", f"sweep.fold_backend={backend}",
        f"reports_dir={base}/reports-{name}", f"sweep.storage=sqlite:///{base}/optuna-{name}.db"]), resolve=True)
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    trainer = Trainer(c)
    warm = dict(c["model"].get("warm_start") or {}) or None
    try:
        res = trainer.run_protocol("leave_gpu_out", warm)
    finally:
        trainer.close_pool()
    pred = pd.read_csv(trainer.out_dir / "leave_gpu_out" / "predictions.csv")
    return res, pred, c


@pytest.mark.parametrize(("model", "backend"), [("dt", "thread"), ("xgb", "thread"), ("dt", "process"),
                                                ("lr", "process")])
def test_parallel_folds_give_the_same_numbers_and_nested_runs(tiny, model, backend):
    """Two folds at once, in threads or in spawned worker processes (`sweep.fold_backend`)."""
    base, ov = tiny
    one, pred_one, _ = run(base, ov, model, 1, tag=f"-vs-{backend}")
    two, pred_two, c = run(base, ov, model, 2, backend)
    assert one["folds"] == two["folds"] >= 2
    assert np.array_equal(pred_one["predicted"].to_numpy(), pred_two["predicted"].to_numpy())
    assert pred_one["measurement_id"].tolist() == pred_two["measurement_id"].tolist()
    assert one["fold_params"] == two["fold_params"]
    for k in ("mape", "r2", "adj_r2", "cv_mape", "n_features"):
        assert one[k] == two[k]
    assert one["importances"] == two["importances"]
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


def test_single_fold_protocols_side_by_side_give_the_same_numbers(tmp_path, monkeypatch):
    """With fold_jobs >= 2 and worker processes every protocol runs in its own thread (Trainer.concurrent), the
    grouped ones queueing their folds on one shared pool: same predictions, parameters and served model as one
    after the other, each protocol's trials under its own run."""
    ov = overrides(tmp_path, n_trials=2, protocols="[random,random_rows,leave_gpu_out]")

    def summary(jobs: int) -> tuple[Trainer, dict, dict]:
        c = OmegaConf.to_container(compose([
            *ov, "model=dt", f"sweep.fold_jobs={jobs}", f"sweep.fold_backend={'process' if jobs > 1 else 'thread'}",
            f"reports_dir={tmp_path}/reports-{jobs}",
            f"sweep.storage=sqlite:///{tmp_path}/optuna-{jobs}.db"]), resolve=True)
        setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
        trainer = Trainer(c)
        return trainer, trainer.run(), c

    seq_trainer, seq, _ = summary(1)
    par_trainer, par, c = summary(2)
    assert seq_trainer.side_by_side(["random", "random_rows", "leave_gpu_out"]) == []
    assert par_trainer.side_by_side(["random", "random_rows", "leave_gpu_out"]) == ["random", "random_rows"]
    # with worker processes (conf/sweep's default backend) every protocol runs at once, sharing one pool; with
    # fold threads only the single-fold pair does
    assert c["sweep"]["fold_backend"] == "process"
    assert par_trainer.concurrent(["random", "random_rows", "leave_gpu_out"]) == ["random", "random_rows",
                                                                                  "leave_gpu_out"]
    assert seq_trainer.concurrent(["random", "random_rows", "leave_gpu_out"]) == []
    par_trainer.c["sweep"]["fold_backend"] = "thread"
    assert par_trainer.concurrent(["random", "random_rows", "leave_gpu_out"]) == ["random", "random_rows"]
    par_trainer.c["sweep"]["fold_backend"] = "process"
    assert par_trainer.side_by_side(["random", "leave_gpu_out"]) == []
    monkeypatch.setenv("MLFLOW_RUN_ID", "0" * 32)  # under `mlflow run`: no threads (nothing to nest under)
    assert par_trainer.side_by_side(["random", "random_rows"]) == []
    monkeypatch.delenv("MLFLOW_RUN_ID")
    assert list(par["protocols"]) == ["random", "random_rows", "leave_gpu_out"]  # report order kept
    for p in ("random", "random_rows", "leave_gpu_out"):
        a = pd.read_csv(seq_trainer.out_dir / p / "predictions.csv")
        b = pd.read_csv(par_trainer.out_dir / p / "predictions.csv")
        assert np.array_equal(a["predicted"].to_numpy(), b["predicted"].to_numpy())
        assert seq["protocols"][p]["fold_params"] == par["protocols"][p]["fold_params"]
        assert seq["protocols"][p]["mape"] == par["protocols"][p]["mape"]
    assert par["selection_cv_mape"] == seq["selection_cv_mape"]
    client = MlflowClient(c["mlflow"]["tracking_uri"])
    exp = client.get_experiment_by_name(c["mlflow"]["experiment"]).experiment_id
    for p in ("random", "random_rows"):
        run_id = par["protocols"][p]["run_id"]
        assert client.get_run(run_id).info.status == "FINISHED"
        trials = client.search_runs([exp], f"tags.mlflow.parentRunId = '{run_id}'")
        assert len(trials) == 2 and all(t.data.tags["run_kind"] == "trial" for t in trials)
    assert par["protocols"]["random"]["model_uri"].startswith("models:/")
    assert mlflow.active_run() is None


def test_fold_workers_import_the_projects_code_before_a_served_models_copy(tmp_path, monkeypatch):
    """A served model loaded in this process puts its copy of `src` first on sys.path; the pool puts the project's
    code back in front before it spawns workers (which import `src` by sys.path)."""
    import sys

    from src.train import run as run_module

    copy = tmp_path / "code"
    (copy / "src").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(copy), *sys.path])
    run_module.project_code_first()
    assert sys.path[0] == run_module.PROJECT_CODE == str(Path(run_module.__file__).resolve().parents[2])
    assert str(copy) in sys.path and sys.path.count(run_module.PROJECT_CODE) == 1
