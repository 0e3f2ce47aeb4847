"""MLflow plumbing: absolute store, experiment creation, reproducibility tags (git commit, data version)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from src.config import REPO_ROOT


def file_md5(path: Path) -> str:
    """MD5 of a file's bytes: the same hash DVC records for a single-file output in dvc.lock."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_commit(root: Path = REPO_ROOT) -> tuple[str, bool]:
    """(commit hash or 'none', working tree dirty?) — 'none' before the first commit or outside git.

    Dirty = a tracked file under `root` differs from HEAD (staged or not). The pipeline's own outputs do not
    count, or no `dvc repro` could ever be clean: `reports/`, `data/processed/` and `dvc.lock` (relative to
    `root`); `data/own/` (our own measurements, an input) does count.
    Untracked files never count. Renames are split into delete + add (`--no-renames`), so moving a file from
    `src/` into `reports/` (or back) is dirty. Not a git repository (or git failing) counts as dirty.
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        commit = "none"
    try:
        # --no-optional-locks: do not refresh .git/index while other processes use the repository.
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain=v1", "-z", "--no-renames",
                                 "--untracked-files=no", "--ignore-submodules=none", "--", ".",
                                 ":(exclude)reports", ":(exclude)data/processed", ":(exclude)dvc.lock"],
                                cwd=root, capture_output=True, text=True, errors="replace", timeout=10)
        dirty = status.returncode != 0 or bool(status.stdout.strip("\0 \n"))
    except (subprocess.SubprocessError, OSError):
        dirty = True
    return commit, dirty


# MLflow 3's experiment-kind tag and the value the UI itself writes when "Machine learning" is chosen as an
# experiment's type (mlflow/server/js/build: setExperimentTag({key: "mlflow.experimentKind", value: kind});
# the other kind is "genai_development"). The 3.17 UI takes its landing page (GenAI overview or Runs) from its
# sidebar "GenAI / Model training" switch instead: docs/mlflow-ui.md.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING = "custom_model_development"


def setup(tracking_uri: str, experiment: str, artifact_root: str | None = None) -> str:
    """Point MLflow at the store and make sure the experiment exists; returns its id.

    The experiment is created as a model-training experiment (`EXPERIMENT_KIND_TAG`); an existing one without
    the tag gets it here, one with a kind chosen by hand keeps it.
    Called once per process before any run starts (creating the SQLite DB here, sequentially, avoids the
    migration race of parallel first writers). Workers starting together on a tracking server may race to create
    the experiment: the loser uses the winner's. `artifact_root` None: the server's own artifact store.
    """
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        try:
            exp_id = client.create_experiment(experiment, artifact_location=artifact_root or None,
                                              tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND_TRAINING})
        except MlflowException:  # several workers starting at once: another one created it first
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                raise
            exp_id = exp.experiment_id
    else:
        exp_id = exp.experiment_id
        if EXPERIMENT_KIND_TAG not in exp.tags:  # created before the tag: mark it, keep a kind set by hand
            client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_TRAINING)
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


def slug(name: str) -> str:
    """Metric-name-safe form of a GPU or family name."""
    return re.sub(r"[^0-9A-Za-z_.-]+", "_", str(name)).strip("_")


def outer_run_active() -> bool:
    """True when launched by `mlflow run` (it exports MLFLOW_RUN_ID): our runs then nest under that run."""
    return bool(os.environ.get("MLFLOW_RUN_ID"))


# The run log: which MLflow runs a stage made, when, from which commit and how long it took. It changes on every
# run, so it lives beside the reports but outside git and DVC (like mlflow.db): the committed reports and dvc.lock
# stay byte-identical when the same code and data run again (issue 15), and `register` finds the reported runs here.
RUN_LOG_DIR = "runs"


def run_log_path(reports_dir: Path, name: str) -> Path:
    """`<reports_dir>/runs/<name>.json`: the run log of one job (a model's training, the registration)."""
    return Path(reports_dir) / RUN_LOG_DIR / f"{name}.json"


def write_run_log(reports_dir: Path, name: str, record: dict) -> Path:
    path = run_log_path(reports_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=float) + "\n")
    return path


def benchmark_store(no_mlflow: bool) -> dict | None:
    """The MLflow settings a benchmark records in (the composed config's `mlflow` group), None with --no-mlflow.
    Read before the benchmark trains: a training points MLflow (and MLFLOW_TRACKING_URI) at its own store."""
    if no_mlflow:
        return None
    from omegaconf import OmegaConf

    from src.config import compose

    return OmegaConf.to_container(compose([]), resolve=True)["mlflow"]


def record_benchmark(out: dict, path: Path, mlflow_cfg: dict | None, run_name: str, tags: dict[str, str],
                     metrics: dict[str, float], experiment: str = "cnnperf-bench",
                     artifacts: list[Path] | tuple[Path, ...] = ()) -> Path:
    """A benchmark's result: `out` as JSON at `path` (reports/bench/...), and, unless `mlflow_cfg` is None, an
    MLflow run `run_name` in `experiment` with `tags` (run_kind=benchmark added), `metrics`, the JSON file and
    `artifacts` (plots)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=float) + "\n")
    if mlflow_cfg is not None:
        setup(mlflow_cfg["tracking_uri"], experiment, mlflow_cfg["artifact_root"])
        with mlflow.start_run(run_name=run_name):
            mlflow.set_tags({"run_kind": "benchmark", **tags})
            mlflow.log_metrics(metrics)
            mlflow.log_artifact(str(path))
            for extra in artifacts:
                mlflow.log_artifact(str(extra))
    return path
