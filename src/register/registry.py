"""Register the models that `reports/metrics.json` reports, after checking that the file describes them.

The champion is the reported run: the runs registered are exactly those behind the `random` rows of
reports/metrics.json (written by `python -m src.evaluate` in the same pipeline run), never a search of the store,
which also holds older pipeline runs, experiments and ablations. The committed metrics file holds only what code
and data determine; the run behind each row is named by the training job's run log
(reports/train/runs/<model>.json, git-ignored), and every run is checked against its row before anything is
registered.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from src.config import REPO_ROOT
from src.tracking import file_md5, git_commit, run_log_path

log = logging.getLogger("cnnperf.register")

PROTOCOL = "random"  # the protocol whose run holds the served model (fitted on the 70 % training part)
# Keys every `random` row must have: the test MAPE, the model's own tuning CV and the selection CV that ranks the
# models (the same folds over the same rows for every model, src.train.run.Trainer.selection_cv).
ROW_KEYS = ("mape", "cv_mape", "selection_cv_mape")
METRIC_TAGS = ("mape", "r2", "adj_r2")  # per protocol, as `<protocol>.<metric>` model-version tags
RUN_TAGS = ("git_commit", "git_dirty", "data_version", "dataset_version", "split_fingerprint", "optuna_study")
# What differs between two registrations of the same reported runs: kept out of the committed registry.json,
# written to the run log reports/train/runs/registry.json.
RUN_KEYS = ("version", "run_id", "git_commit", "git_dirty")
_PROTOCOL_TAG = re.compile(r"^[a-z][a-z_]*\.(mape|r2|adj_r2)$")


class RegistrationRefused(RuntimeError):
    """The registry is left unchanged: the metrics file, the runs or the working tree are not fit to register."""


@dataclass
class Champion:
    model: str  # estimator key: lr, knn, rf, dt, xgb
    row: dict  # its `random` row of metrics.json
    run: object  # mlflow.entities.Run


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_metrics(path: Path, rel: str) -> dict:
    """{protocol: {model: row}} from `path`; refuses a missing file or one without usable `random` rows."""
    if not path.is_file():
        raise RegistrationRefused(f"{rel} not found: run `dvc repro` (or `python -m src.evaluate`) first")
    try:
        table = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RegistrationRefused(f"{rel} is not valid JSON: {exc}") from exc
    rows = table.get(PROTOCOL) if isinstance(table, dict) else None
    if not rows:
        raise RegistrationRefused(f"{rel} has no '{PROTOCOL}' protocol rows: nothing to register")
    for model, row in rows.items():
        for key in ROW_KEYS:
            if row.get(key) is None:
                raise RegistrationRefused(f"{rel}: row {PROTOCOL}/{model} has no '{key}' (written by an older "
                                          f"src.evaluate?): run dvc repro")
    return table


def reported_run_id(reports_dir: Path, model: str, rel: str, root: Path) -> str:
    """The MLflow run behind row `random`/`model` of the metrics file, from the training job's run log."""
    path = run_log_path(reports_dir, model)
    log_rel = _rel(path, root)
    retrain = f"rerun its training (`dvc repro -f train@{model}`, or `python -m src.train model={model}`)"
    if not path.is_file():
        raise RegistrationRefused(f"{log_rel} not found: it names the MLflow run behind row {PROTOCOL}/{model} of "
                                  f"{rel}; {retrain}")
    try:
        run_id = json.loads(path.read_text())["protocols"][PROTOCOL]["run_id"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RegistrationRefused(f"{log_rel} has no protocols.{PROTOCOL}.run_id ({type(exc).__name__}: {exc}); "
                                  f"{retrain}") from exc
    if not isinstance(run_id, str) or not run_id:
        raise RegistrationRefused(f"{log_rel}: protocols.{PROTOCOL}.run_id is {run_id!r}, not a run id; {retrain}")
    return run_id


def check_run(client: MlflowClient, model: str, run_id: str, row: dict, data_version: str, rel: str,
              data_rel: str):
    """Run `run_id` (the run log's for `model`), after checking that row `random`/`model` of `rel` describes it."""
    what = f"run {run_id} (row {PROTOCOL}/{model} of {rel})"
    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        raise RegistrationRefused(f"{what} does not exist in the tracking store: {rel} comes from another "
                                  f"store or the run was deleted") from exc
    if run.info.lifecycle_stage != "active":
        raise RegistrationRefused(f"{what} is deleted in the tracking store")
    if run.info.status != "FINISHED":
        raise RegistrationRefused(f"{what} is {run.info.status}, not FINISHED")
    tags = run.data.tags
    for key, want in (("model", model), ("protocol", PROTOCOL)):
        if tags.get(key) != want:
            raise RegistrationRefused(f"{what} has tag {key}={tags.get(key)!r}, but the row is for {key} {want!r}")
    for key in ROW_KEYS:
        got, want = run.data.metrics.get(key), float(row[key])
        if got is None or not math.isclose(got, want, rel_tol=1e-9, abs_tol=0.0):
            raise RegistrationRefused(f"{what} has metric {key}={got!r}, but {rel} says {key}={want!r}: the file "
                                      f"does not describe this run")
    if tags.get("data_version") != data_version:
        raise RegistrationRefused(f"{what} was trained on data_version {tags.get('data_version')!r}, but the md5 "
                                  f"of the current {data_rel} is {data_version!r}: {rel} is stale: run dvc repro")
    return run


def choose(table: dict, dt_key: str = "dt") -> tuple[str, str]:
    """(dt model key, best model key): best = lowest `selection_cv_mape` among the `random` rows (ties: first).

    Not the tuning `cv_mape`: models may tune on different rows (a sample, or all of them), and scores on
    different rows do not rank models; the selection CV scores every model's chosen parameters on the same folds.
    """
    rows = table[PROTOCOL]
    if dt_key not in rows:
        raise KeyError(dt_key)
    best = min(rows, key=lambda m: float(rows[m]["selection_cv_mape"]))
    return dt_key, best


def fmt(x) -> str:
    return f"{float(x):.4f}"


def version_tags(champ: Champion, table: dict, metrics_md5: str) -> dict[str, str]:
    """Tags of a registered version: provenance of its run, its validation score and its reported metrics."""
    tags = champ.run.data.tags
    out = {k: str(tags.get(k) or champ.row.get(k) or "") for k in RUN_TAGS}
    out.update({"validation_cv_mape": fmt(champ.row["cv_mape"]),
                "selection_cv_mape": fmt(champ.row["selection_cv_mape"]), "estimator": champ.model,
                "metrics_json_md5": metrics_md5})
    for protocol, rows in table.items():
        row = rows.get(champ.model) if isinstance(rows, dict) else None
        if not row:
            continue
        for k in METRIC_TAGS:
            if row.get(k) is not None:
                out[f"{protocol}.{k}"] = fmt(row[k])
    return out


def describe(name: str, alias: str, champ: Champion, tags: dict[str, str]) -> str:
    head = (f"{name}@{alias}: {champ.model} fitted on the random protocol's training part, run "
            f"{champ.run.info.run_id}, registered from reports/metrics.json by src.register.")
    return "\n".join([head, ""] + [f"{k}: {v}" for k, v in sorted(tags.items())])


def register_version(client: MlflowClient, champ: Champion, name: str, alias: str, tags: dict[str, str]) -> dict:
    """Register the run's served model under `name` (reusing the version if already registered), alias it, tag it."""
    run_id = champ.run.info.run_id
    existing = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    if existing:
        version = max(existing, key=lambda v: int(v.version))
        log.info("%s: run %s is already version %s", name, run_id, version.version)
    else:
        uri = champ.run.data.tags.get("model_uri") or f"runs:/{run_id}/model"
        version = mlflow.register_model(uri, name)
    v = str(version.version)
    current = client.get_model_version(name, v).tags
    for k in current:
        if _PROTOCOL_TAG.match(k) and k not in tags:  # a protocol no longer reported for this model
            client.delete_model_version_tag(name, v, k)
    for k, val in tags.items():
        client.set_model_version_tag(name, v, k, val)
    client.update_model_version(name, v, description=describe(name, alias, champ, tags))
    client.set_registered_model_alias(name, alias, v)
    return {"name": name, "version": int(v), "alias": alias, "uri": f"models:/{name}@{alias}", "run_id": run_id,
            "estimator": champ.model, "validation_cv_mape": float(champ.row["cv_mape"]),
            "selection_cv_mape": float(champ.row["selection_cv_mape"]),
            "test_mape": float(champ.row["mape"]), "git_commit": tags["git_commit"],
            "git_dirty": tags["git_dirty"], "data_version": tags["data_version"],
            "dataset_version": tags["dataset_version"], "split_fingerprint": tags["split_fingerprint"],
            "optuna_study": tags["optuna_study"]}


def public_tracking_uri(uri: str, root: Path) -> str:
    """The tracking URI without this machine's paths or credentials (for committed reports)."""
    parts = urlsplit(uri)
    if parts.scheme in ("sqlite", "file", ""):
        # sqlite:////abs/mlflow.db -> /abs/mlflow.db; sqlite:///rel.db -> rel.db; file:///abs -> /abs
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else parts.path
        try:
            rel = Path(path).resolve().relative_to(root.resolve())
        except ValueError:
            return f"{parts.scheme or 'file'} store outside the repository (path not recorded)"
        return f"{parts.scheme or 'file'}:///{rel} (repo-relative)"
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _commit_known(root: Path, commit: str) -> bool:
    try:
        return subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=root,
                              capture_output=True, timeout=10).returncode == 0
    except (subprocess.SubprocessError, OSError):
        return False


def register_reported(c: dict, root: Path = REPO_ROOT) -> dict:
    """Register the `dt` row and the best `random` row of the metrics file; returns the registry.json content.

    `c`: the composed config (keys `mlflow`, `data`, `register`); `root`: the repository whose metrics file, data
    and git state are checked. Checks everything first, then registers: a refusal leaves the registry unchanged.
    """
    reg = c.get("register") or {}
    allow_dirty = bool(reg.get("allow_dirty", False))
    metrics_path = root / reg.get("metrics", "reports/metrics.json")
    rel = _rel(metrics_path, root)
    data_path = root / c["data"]["measurements"]
    data_rel = _rel(data_path, root)

    commit, dirty = git_commit(root)
    if dirty and not allow_dirty:
        why = ("is not a git repository (or has no commit)" if commit == "none" else
               "has uncommitted changes to tracked files outside reports/, data/processed/ and dvc.lock "
               "(see `git status`)")
        raise RegistrationRefused(f"working tree {root} {why}: commit, rerun `dvc repro` and register again, or pass "
                                  f"register.allow_dirty=true")

    table = load_metrics(metrics_path, rel)
    metrics_md5 = file_md5(metrics_path)
    if not data_path.is_file():
        raise RegistrationRefused(f"{data_rel} not found: cannot check that {rel} is current: run dvc repro")
    data_version = file_md5(data_path)

    uri = c["mlflow"]["tracking_uri"]
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    client = MlflowClient(uri, registry_uri=uri)
    rows = table[PROTOCOL]
    # Every random row, not only the two registered: the best-of-five choice is only as good as all five rows.
    reports_dir = root / c["reports_dir"]
    runs = {m: check_run(client, m, reported_run_id(reports_dir, m, rel, root), row, data_version, rel, data_rel)
            for m, row in rows.items()}
    try:
        dt_key, best_key = choose(table)
    except KeyError as exc:
        raise RegistrationRefused(f"{rel} has no row {PROTOCOL}/dt: the decision tree was not evaluated") from exc

    targets = [("dt", dt_key, c["mlflow"]["dt_model_name"]), ("best", best_key, c["mlflow"]["best_model_name"])]
    for _, model, _name in targets:
        run = runs[model]
        run_dirty = run.data.tags.get("git_dirty", "missing")
        if run_dirty != "False" and not allow_dirty:
            raise RegistrationRefused(
                f"run {run.info.run_id} (row {PROTOCOL}/{model} of {rel}) was trained from a working tree with "
                f"uncommitted changes (tag git_dirty={run_dirty}, git_commit={run.data.tags.get('git_commit')}): "
                f"commit and rerun `dvc repro`, or pass register.allow_dirty=true")
        run_commit = run.data.tags.get("git_commit", "none")
        if run_commit != commit and not _commit_known(root, run_commit):
            log.warning("run %s names git_commit %s, which is not in the history of HEAD %s",
                        run.info.run_id, run_commit, commit)

    alias = c["mlflow"]["alias"]
    out: dict = {}
    for key, model, name in targets:
        champ = Champion(model, rows[model], runs[model])
        out[key] = register_version(client, champ, name, alias, version_tags(champ, table, metrics_md5))
    out.update({"metrics": rel, "metrics_json_md5": metrics_md5, "data_version": data_version,
                "tracking_uri": public_tracking_uri(uri, root)})
    return out


def split_run_log(out: dict) -> tuple[dict, dict]:
    """(registry.json: what the reported rows determine, run log: registry versions, run ids, commit)."""
    stable = {k: v for k, v in out.items() if k not in ("dt", "best")}
    run_log = {}
    for key in ("dt", "best"):
        stable[key] = {k: v for k, v in out[key].items() if k not in RUN_KEYS}
        run_log[key] = {"name": out[key]["name"], **{k: out[key][k] for k in RUN_KEYS}}
    return stable, run_log
