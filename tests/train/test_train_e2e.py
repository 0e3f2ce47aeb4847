"""A small real training run (DT and LR, all five protocols, 2 trials) into a temporary SQLite store."""

import json

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.train.tiny import trained_store

METRICS = {"mape", "median_ape", "within_10pct", "r2", "adj_r2", "r2_log", "cv_mape", "selection_cv_mape"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return trained_store(tmp_path_factory.mktemp("store"))


def test_logged_metric_names_and_tags(store):
    c = store["cfg"]
    client = MlflowClient(c["mlflow"]["tracking_uri"])
    exp = client.get_experiment_by_name(c["mlflow"]["experiment"])
    runs = client.search_runs([exp.experiment_id], "tags.run_kind = 'study' and tags.model = 'dt'")
    assert len(runs) == 1
    run = runs[0]
    assert METRICS <= set(run.data.metrics)
    assert {"perm_importance/gmacs", "impurity_importance/log_t_roofline_ms"} <= set(run.data.metrics)
    assert run.data.tags["protocol"] == "random" and len(run.data.tags["data_version"]) == 32
    assert "git_commit" in run.data.tags
    trials = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert len(trials) == 2 and all(t.data.tags["run_kind"] == "trial" for t in trials)
    grouped = client.search_runs([exp.experiment_id], "tags.protocol = 'leave_gpu_out' and tags.run_kind = 'protocol'")
    assert len(grouped) == 2
    # Headline metrics are pooled over all held-out rows, with the median and worst group beside them.
    assert {"mape", "adj_r2", "group_median_mape", "group_worst_mape"} <= set(grouped[0].data.metrics)
    assert {"split_fingerprint", "optuna_study", "dataset_version"} <= set(grouped[0].data.tags)
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/predicted_vs_measured.png", "report/residuals_per_gpu.png",
            "report/importance_perm.png", "report/importance_impurity.png"} <= arts


def test_reports_written(store):
    s = store["summaries"]["dt"]
    assert set(s["protocols"]) == {"random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out",
                                   "leave_arch_out"}
    # the tiny table's GPUs: Volta + Ampere -> Ada + Blackwell, and Volta -> Ampere
    assert s["protocols"]["leave_arch_out"]["folds"] == 2
    assert len({r["budget"]["n_trials"] for r in s["protocols"].values()}) == 1  # one budget for every protocol
    split = json.loads((store["tmp"] / "reports" / "dt" / "leave_model_out" / "split.json").read_text())
    assert split["fingerprint"] == s["protocols"]["leave_model_out"]["split_fingerprint"]
    assert len(s["protocols"]["leave_gpu_out"]["per_group"]) == 4
    # every held-out row has one support level, and the levels' MAPEs pool back to the protocol's
    for r in s["protocols"].values():
        levels = [(r[f"{lv}_setting_rows"], r[f"{lv}_setting_mape"]) for lv in ("seen", "other_release", "unseen")]
        assert sum(n for n, _ in levels) == r["test_rows"]
        assert sum(n * m for n, m in levels if n) / r["test_rows"] == pytest.approx(r["mape"])
    # the tiny table measures every setting on every GPU but its few `lambda` rows (RTX 3090 only)
    pred = pd.read_csv(store["tmp"] / "reports" / "dt" / "leave_gpu_out" / "predictions.csv")
    lam = pred["measurement_id"].str.startswith("lambda:").to_numpy()
    assert lam.any() and set(pred["setting_support"][lam]) == {"unseen"}
    assert set(pred["setting_support"][~lam]) == {"seen"}
    path = store["tmp"] / "reports" / "dt" / "metrics.json"
    assert json.loads(path.read_text())["protocols"]["random"]["mape"] == pytest.approx(
        s["protocols"]["random"]["mape"])


def test_committed_reports_hold_no_run_identity(store):
    """metrics.json and trials.csv carry only what code and data determine (issue 15: a rerun writes the same
    bytes); the run ids, model URI, commit and timings are in the run log, and they name the logged runs."""
    text = (store["tmp"] / "reports" / "dt" / "metrics.json").read_text()
    s = store["summaries"]["dt"]
    for key in ("run_id", "model_uri", "timing_s", "wall_seconds", "git_commit", "git_dirty"):
        assert f'"{key}"' not in text
    assert s["protocols"]["random"]["run_id"] not in text
    trials = (store["tmp"] / "reports" / "dt" / "random" / "trials.csv").read_text().splitlines()[0]
    assert "duration" not in trials and "datetime" not in trials and trials.startswith("number,value,params_")
    run_log = json.loads((store["tmp"] / "reports" / "runs" / "dt.json").read_text())
    assert run_log["git_commit"] == s["tags"]["git_commit"] and run_log["wall_seconds"] == s["wall_seconds"]
    for protocol, r in s["protocols"].items():
        assert run_log["protocols"][protocol]["run_id"] == r["run_id"]
        assert run_log["protocols"][protocol]["timing_s"]["total"] > 0
    assert run_log["protocols"]["random"]["model_uri"] == s["protocols"]["random"]["model_uri"]
    client = MlflowClient(store["cfg"]["mlflow"]["tracking_uri"])
    run = client.get_run(run_log["protocols"]["random"]["run_id"])
    assert run.data.tags["model"] == "dt" and run.data.tags["protocol"] == "random"


def test_registered_alias(store):
    c = store["cfg"]
    client = MlflowClient(c["mlflow"]["tracking_uri"])
    dt = client.get_model_version_by_alias("cnnperf-dt", "champion")
    assert dt.run_id == store["registry"]["dt"]["run_id"]
    best = client.get_model_version_by_alias("cnnperf-best", "champion")
    # best = lowest selection CV (same folds over the same rows for both) among dt and lr
    sel = {m: store["summaries"][m]["selection_cv_mape"] for m in ("dt", "lr")}
    assert all(v > 0 for v in sel.values())
    assert store["registry"]["best"]["estimator"] == min(sel, key=sel.get)
    assert store["registry"]["best"]["selection_cv_mape"] == pytest.approx(min(sel.values()))
    assert int(best.version) == store["registry"]["best"]["version"]


def test_selection_cv_scores_every_model_on_the_same_rows_and_folds(store):
    """The selection CV behind the best-model choice uses every training row of the random fold, in configuration
    groups (no twins across its folds), whatever rows a model tuned on; recomputing it gives the logged figure."""
    from omegaconf import OmegaConf

    from src.config import compose
    from src.train.protocols import config_ids, group_labels, outer_folds
    from src.train.run import Trainer
    from src.train.tuning import cv_mape

    base = OmegaConf.to_container(compose([*store["overrides"], "model=dt"]), resolve=True)
    splits = {}
    for rows in (None, 60):
        c = {**base, "model": {**base["model"], "tune_max_rows": rows}}
        t = Trainer(c)
        fold = outer_folds(t.df, "random", c["split"], t.seed)[0][0]
        labels = group_labels(t.df, "random")
        splits[rows] = t.selection_splits(fold, labels)
    assert [(a.tolist(), b.tolist()) for a, b in splits[None]] == [(a.tolist(), b.tolist()) for a, b in splits[60]]
    ids = config_ids(t.df)[fold.train]
    validated = np.sort(np.concatenate([va for _, va in splits[None]]))
    assert validated.tolist() == list(range(len(fold.train)))  # every training row is scored once
    for tr, va in splits[None]:
        assert not set(ids[tr]) & set(ids[va])
    best = store["summaries"]["dt"]["protocols"]["random"]["best_params"]
    again = cv_mape(t.make_model, best, t.X.iloc[fold.train], t.y[fold.train], splits[None])
    assert again == pytest.approx(store["summaries"]["dt"]["selection_cv_mape"], rel=1e-9)
