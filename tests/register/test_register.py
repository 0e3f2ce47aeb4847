"""src.register on a real SQLite MLflow store, real logged models and a throwaway git repository.

Two "pipeline runs" (A, B) on different measurement tables each log five random-protocol runs (a fitted
DecisionTreeRegressor each) plus one grouped-protocol run per model, and write their own metrics.json (no run ids:
only what data and code determine) and run logs (reports/train/runs/<model>.json: the run behind each row). Each
test puts one pipeline's data, metrics file and run logs into the repository, registers under its own model
names, and checks that the aliases follow the metrics file, not the store.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from sklearn.tree import DecisionTreeRegressor

from src.register.registry import RegistrationRefused, public_tracking_uri, register_reported, split_run_log
from src.tracking import file_md5, git_commit

MODELS = ("lr", "knn", "rf", "dt", "xgb")
DATA = "data/processed/measurements.parquet"
METRICS = "reports/metrics.json"
RUN_LOGS = "reports/train/runs"
# Pipeline A: xgb has the lowest selection CV (the same folds and rows for every model) of anything in the store.
CV_A = {"lr": 20.0, "knn": 22.0, "rf": 17.0, "dt": 21.0, "xgb": 9.0}
SEL_A = {"lr": 19.5, "knn": 21.0, "rf": 16.0, "dt": 18.0, "xgb": 8.5}
MAPE_A = {"lr": 19.0, "knn": 15.0, "rf": 12.0, "dt": 12.5, "xgb": 7.0}
# Pipeline B (new data): every selection CV is above A's xgb; rf has the lowest selection CV, but xgb the lowest
# tuning cv_mape (its own tuning rows) and the lowest test MAPE.
CV_B = {"lr": 21.0, "knn": 23.0, "rf": 13.0, "dt": 20.0, "xgb": 12.0}
SEL_B = {"lr": 20.5, "knn": 22.0, "rf": 12.5, "dt": 15.0, "xgb": 14.5}
MAPE_B = {"lr": 18.0, "knn": 16.0, "rf": 11.0, "dt": 13.0, "xgb": 6.5}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def write_data(root: Path, seed: int) -> str:
    path = root / DATA
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pd.DataFrame({"gpu": ["a", "b", "c"], "latency_ms": rng.uniform(1, 9, 3)}).to_parquet(path, index=False)
    return file_md5(path)


def log_run(env: dict, model: str, protocol: str, data_version: str, mape: float, cv: float | None,
            dirty: str = "False", with_model: bool = True, sel: float | None = None) -> str:
    tags = {"model": model, "protocol": protocol, "run_kind": "study" if protocol == "random" else "protocol",
            "features": "engineered", "target": "latency", "data_version": data_version,
            "dataset_version": "d" * 32, "gpus_version": "g" * 32, "git_commit": env["commit"], "git_dirty": dirty,
            "split_fingerprint": f"sf-{protocol}-{data_version[:6]}",
            "optuna_study": f"cnnperf-{model}-{protocol}-{data_version[:8]}"}
    with mlflow.start_run(experiment_id=env["exp"], run_name=f"{model}/{protocol}") as run:
        mlflow.set_tags(tags)
        mlflow.log_metrics({"mape": mape, "r2": 0.9, "adj_r2": 0.89, **({"cv_mape": cv} if cv is not None else {}),
                            **({"selection_cv_mape": sel} if sel is not None else {})})
        if with_model:
            est = DecisionTreeRegressor(max_depth=2, random_state=0).fit(np.arange(8.0).reshape(-1, 1), np.arange(8.0))
            info = mlflow.sklearn.log_model(est, name="model", serialization_format="cloudpickle",
                                            pip_requirements=["scikit-learn"])
            mlflow.set_tag("model_uri", info.model_uri)
    return run.info.run_id


def pipeline(env: dict, seed: int, cv: dict, sel: dict, mape: dict) -> dict:
    """Log one pipeline run's training runs on a new measurement table; returns its data, metrics.json, run ids."""
    dv = write_data(env["root"], seed)
    table: dict = {"random": {}, "leave_gpu_out": {}}
    run_ids: dict = {}
    for m in MODELS:
        run_ids[m] = log_run(env, m, "random", dv, mape[m], cv[m], sel=sel[m])
        table["random"][m] = {"mape": mape[m], "r2": 0.95, "adj_r2": 0.94, "median_ape": 4.0,
                              "cv_mape": cv[m], "selection_cv_mape": sel[m], "split_fingerprint": f"sf-random-{dv[:6]}",
                              "optuna_study": f"cnnperf-{m}-random-{dv[:8]}"}
        log_run(env, m, "leave_gpu_out", dv, 30.0 + cv[m], None, with_model=False)
        table["leave_gpu_out"][m] = {"mape": 30.0 + cv[m], "r2": 0.5, "adj_r2": -0.25,
                                     "median_ape": 20.0, "split_fingerprint": f"sf-lgo-{dv[:6]}",
                                     "optuna_study": f"cnnperf-{m}-leave_gpu_out-{dv[:8]}"}
    return {"data": (env["root"] / DATA).read_bytes(), "data_version": dv, "table": table, "run_ids": run_ids}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    tmp = tmp_path_factory.mktemp("register")
    root = tmp / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / "reports" / "train").mkdir(parents=True)
    (root / METRICS).write_text("{}\n")
    (root / "dvc.lock").write_text("schema: '2.0'\n")
    git(root, "init", "-q")
    write_data(root, 0)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    uri = f"sqlite:///{tmp}/mlflow.db"
    client = MlflowClient(uri, registry_uri=uri)  # not the process-wide registry URI an earlier test set
    exp = client.create_experiment("cnnperf", artifact_location=f"file://{tmp}/art")
    prev = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    e = {"tmp": tmp, "root": root, "uri": uri, "exp": exp, "client": client, "commit": git(root, "rev-parse", "HEAD")}
    e["A"] = pipeline(e, 1, CV_A, SEL_A, MAPE_A)
    e["B"] = pipeline(e, 2, CV_B, SEL_B, MAPE_B)
    yield e
    mlflow.set_tracking_uri(prev)


def use(env: dict, p: dict, table: dict | None = None, run_ids: dict | None = None) -> None:
    """Put pipeline `p`'s measurement table, metrics.json (or `table`) and run logs (or `run_ids`) into the
    repository, as dvc repro does (run logs as src.train writes them: protocols.random.run_id)."""
    (env["root"] / DATA).write_bytes(p["data"])
    (env["root"] / METRICS).write_text(json.dumps(table or p["table"], indent=2) + "\n")
    logs = env["root"] / RUN_LOGS
    logs.mkdir(parents=True, exist_ok=True)
    for m, rid in (run_ids or p["run_ids"]).items():
        (logs / f"{m}.json").write_text(json.dumps({"model": m, "protocols": {"random": {"run_id": rid}}}) + "\n")


def cfg(env: dict, prefix: str, allow_dirty: bool = False) -> dict:
    return {"mlflow": {"tracking_uri": env["uri"], "dt_model_name": f"{prefix}-dt",
                       "best_model_name": f"{prefix}-best", "alias": "champion"},
            "data": {"measurements": DATA}, "reports_dir": "reports/train",
            "register": {"allow_dirty": allow_dirty, "metrics": METRICS}}


def champion(env: dict, name: str):
    return env["client"].get_model_version_by_alias(name, "champion")


def test_champion_follows_latest_pipeline_run(env):
    client, ra, rb = env["client"], env["A"]["run_ids"], env["B"]["run_ids"]
    use(env, env["A"])
    out_a = register_reported(cfg(env, "follow"), env["root"])
    assert champion(env, "follow-best").run_id == ra["xgb"] == out_a["best"]["run_id"]
    assert champion(env, "follow-dt").run_id == ra["dt"]

    use(env, env["B"])
    out_b = register_reported(cfg(env, "follow"), env["root"])
    # A's xgb run (selection cv 8.5) is still in the store and lower than anything in B: the alias follows B's file.
    best, dt = champion(env, "follow-best"), champion(env, "follow-dt")
    assert best.run_id == rb["rf"] and int(best.version) == out_b["best"]["version"] == 2
    assert dt.run_id == rb["dt"] and int(dt.version) == 2
    assert out_b["best"]["estimator"] == "rf" and out_b["best"]["test_mape"] == MAPE_B["rf"]
    assert out_b["data_version"] == env["B"]["data_version"] != env["A"]["data_version"]

    tags = best.tags
    assert tags["estimator"] == "rf" and tags["validation_cv_mape"] == "13.0000"
    assert tags["selection_cv_mape"] == "12.5000"
    assert tags["data_version"] == env["B"]["data_version"] and tags["git_commit"] == env["commit"]
    assert tags["git_dirty"] == "False" and tags["dataset_version"] == "d" * 32
    assert tags["split_fingerprint"] == f"sf-random-{env['B']['data_version'][:6]}"
    assert tags["optuna_study"] == env["B"]["table"]["random"]["rf"]["optuna_study"]
    assert tags["metrics_json_md5"] == file_md5(env["root"] / METRICS)
    assert tags["random.mape"] == "11.0000" and tags["random.r2"] == "0.9500" and tags["random.adj_r2"] == "0.9400"
    assert tags["leave_gpu_out.mape"] == "43.0000" and tags["leave_gpu_out.adj_r2"] == "-0.2500"
    assert "validation_cv_mape: 13.0000" in best.description and rb["rf"] in best.description

    # registry.json content: no machine path, the tracking URI only in repo-independent form
    text = json.dumps(out_b)
    assert str(env["tmp"]) not in text and "/tmp" not in text
    assert out_b["tracking_uri"] == "sqlite store outside the repository (path not recorded)"
    assert out_b["metrics"] == METRICS
    for k in ("version", "alias", "run_id", "estimator", "validation_cv_mape", "selection_cv_mape", "test_mape",
              "git_commit",
              "data_version", "split_fingerprint"):
        assert k in out_b["dt"] and k in out_b["best"]
    assert len(client.search_model_versions("name = 'follow-best'")) == 2


def test_best_follows_selection_cv_of_rows(env):
    table = copy.deepcopy(env["B"]["table"])
    # Same runs, same test scores: only the file's selection CV matters, not each model's tuning cv_mape (on rows
    # of its own choosing) and not the test MAPE.
    use(env, env["B"], table)
    out = register_reported(cfg(env, "cv"), env["root"])
    assert out["best"]["estimator"] == min(SEL_B, key=SEL_B.get) == "rf"
    assert min(CV_B, key=CV_B.get) == min(MAPE_B, key=MAPE_B.get) == "xgb"
    assert champion(env, "cv-best").run_id == env["B"]["run_ids"]["rf"]


def test_stale_metrics_refused(env):
    use(env, env["A"])
    (env["root"] / DATA).write_bytes(env["B"]["data"])  # data changed, metrics.json not regenerated
    with pytest.raises(RegistrationRefused, match=r"reports/metrics.json is stale: run dvc repro") as exc:
        register_reported(cfg(env, "stale"), env["root"])
    assert env["A"]["run_ids"]["lr"] in str(exc.value) and DATA in str(exc.value)
    assert not env["client"].search_registered_models("name LIKE 'stale-%'")


def test_dirty_tree_refused_unless_allowed(env):
    root = env["root"]
    use(env, env["B"])
    src = root / "src" / "a.py"
    src.write_text("x = 2\n")
    try:
        assert git_commit(root)[1] is True
        with pytest.raises(RegistrationRefused, match=r"uncommitted changes.*register\.allow_dirty=true"):
            register_reported(cfg(env, "dirty"), root)
        assert not env["client"].search_registered_models("name LIKE 'dirty-%'")
        out = register_reported(cfg(env, "dirty", allow_dirty=True), root)
        assert champion(env, "dirty-best").run_id == out["best"]["run_id"]
    finally:
        src.write_text("x = 1\n")
    assert git_commit(root)[1] is False


def test_outputs_do_not_make_the_tree_dirty(env):
    root = env["root"]
    use(env, env["B"])  # rewrites the tracked reports/metrics.json and the committed data table
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (root / "reports" / "train" / "registry.json").write_text("{}\n")  # untracked output
    (root / "scratch.py").write_text("untracked = True\n")
    try:
        assert git(root, "status", "--porcelain", "--untracked-files=no")  # git itself sees changes
        assert git_commit(root) == (env["commit"], False)
        out = register_reported(cfg(env, "outputs"), root)
        assert out["dt"]["git_commit"] == env["commit"]
    finally:
        git(root, "checkout", "-q", "--", "dvc.lock")
        (root / "scratch.py").unlink()


def test_run_trained_dirty_refused_unless_allowed(env):
    p = env["B"]
    table = copy.deepcopy(p["table"])
    rid = log_run(env, "dt", "random", p["data_version"], 12.0, 19.0, dirty="True", sel=18.0)
    table["random"]["dt"].update(mape=12.0, cv_mape=19.0, selection_cv_mape=18.0)
    use(env, p, table, {**p["run_ids"], "dt": rid})
    with pytest.raises(RegistrationRefused, match=rf"run {rid} \(row random/dt of reports/metrics.json\) was "
                                                  r"trained from a working tree with uncommitted changes"):
        register_reported(cfg(env, "rundirty"), env["root"])
    register_reported(cfg(env, "rundirty", allow_dirty=True), env["root"])
    mv = champion(env, "rundirty-dt")
    assert mv.run_id == rid and mv.tags["git_dirty"] == "True"


def test_register_twice_reuses_version(env):
    client = env["client"]
    use(env, env["B"])
    first = register_reported(cfg(env, "twice"), env["root"])
    second = register_reported(cfg(env, "twice"), env["root"])
    assert first == second
    for name in ("twice-dt", "twice-best"):
        assert len(client.search_model_versions(f"name = '{name}'")) == 1
        assert int(champion(env, name).version) == 1


@pytest.mark.parametrize("case, pattern", [
    ("mape", r"has metric mape=11\.0, but reports/metrics.json says mape=11\.5"),
    ("tag", r"has tag model='xgb', but the row is for model 'rf'"),
    ("running", r"is RUNNING, not FINISHED"),
    ("missing", r"does not exist in the tracking store"),
    ("no_cv_mape", r"row random/rf has no 'cv_mape'"),
    ("no_selection_cv", r"row random/rf has no 'selection_cv_mape'"),
    ("selection_cv", r"has metric selection_cv_mape=12\.5, but reports/metrics.json says selection_cv_mape=9\.0"),
    ("no_run_log", r"reports/train/runs/rf.json not found: it names the MLflow run behind row random/rf of "
                   r"reports/metrics.json; rerun its training \(`dvc repro -f train@rf`"),
    ("bad_run_log", r"reports/train/runs/rf.json has no protocols.random.run_id \(KeyError"),
])
def test_inconsistent_metrics_refused(env, case, pattern):
    p = env["B"]
    table, run_ids = copy.deepcopy(p["table"]), dict(p["run_ids"])
    row = table["random"]["rf"]
    if case == "mape":
        row["mape"] = 11.5
    elif case == "tag":
        run_ids["rf"] = run_ids["xgb"]
        row.update(mape=MAPE_B["xgb"], cv_mape=CV_B["xgb"], selection_cv_mape=SEL_B["xgb"])
    elif case == "running":
        run_ids["rf"] = env["client"].create_run(env["exp"], tags={"model": "rf", "protocol": "random"}).info.run_id
    elif case == "missing":
        run_ids["rf"] = "0" * 32
    elif case == "no_cv_mape":
        del row["cv_mape"]
    elif case == "no_selection_cv":
        del row["selection_cv_mape"]
    elif case == "selection_cv":
        row["selection_cv_mape"] = 9.0
    use(env, p, table, run_ids)
    log = env["root"] / RUN_LOGS / "rf.json"
    if case == "no_run_log":
        log.unlink()
    elif case == "bad_run_log":
        log.write_text(json.dumps({"model": "rf", "protocols": {"leave_gpu_out": {"run_id": "x"}}}))
    with pytest.raises(RegistrationRefused, match=pattern) as exc:
        register_reported(cfg(env, f"bad{case}"), env["root"])
    assert "reports/metrics.json" in str(exc.value) or "reports/train/runs" in str(exc.value)
    assert not env["client"].search_registered_models(f"name LIKE 'bad{case}-%'")


def test_registry_json_splits_into_stable_and_run_log(env):
    """The committed registry.json holds no version, run id or commit (they go to the run log), so registering the
    same reported runs into a fresh store writes the same bytes."""
    use(env, env["B"])
    out = register_reported(cfg(env, "split"), env["root"])
    stable, run_log = split_run_log(out)
    for key in ("dt", "best"):
        assert not set(stable[key]) & {"version", "run_id", "git_commit", "git_dirty"}
        assert run_log[key] == {"name": f"split-{key}", "version": out[key]["version"],
                                "run_id": out[key]["run_id"], "git_commit": env["commit"], "git_dirty": "False"}
        assert stable[key]["uri"] == f"models:/split-{key}@champion"
    assert stable["metrics_json_md5"] == out["metrics_json_md5"] and stable["data_version"] == out["data_version"]


def test_public_tracking_uri(tmp_path):
    assert public_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db", tmp_path) == "sqlite:///mlflow.db (repo-relative)"
    assert public_tracking_uri("sqlite:////elsewhere/mlflow.db", tmp_path).startswith("sqlite store outside")
    assert public_tracking_uri("http://u:pw@host:5000", tmp_path) == "http://host:5000"
