"""MLflow plumbing: absolute store, experiment creation, reproducibility tags (git commit, data version)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from src.train.config import REPO_ROOT


def file_md5(path: Path) -> str:
    """MD5 of a file's bytes: the same hash DVC records for a single-file output in dvc.lock."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_commit(root: Path = REPO_ROOT) -> tuple[str, bool]:
    """(commit hash or 'none', working tree dirty?) — 'none' before the first commit or outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        commit = "none"
    try:
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (subprocess.SubprocessError, OSError):
        dirty = True
    return commit, dirty


def setup(tracking_uri: str, experiment: str, artifact_root: str | None = None) -> str:
    """Point MLflow at the store and make sure the experiment exists; returns its id.

    Called once per process before any run starts (creating the SQLite DB here, sequentially, avoids the
    migration race of parallel first writers).
    """
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        exp_id = client.create_experiment(experiment, artifact_location=artifact_root)
    else:
        exp_id = exp.experiment_id
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


def slug(name: str) -> str:
    """Metric-name-safe form of a GPU or family name."""
    return re.sub(r"[^0-9A-Za-z_.-]+", "_", str(name)).strip("_")


def outer_run_active() -> bool:
    """True when launched by `mlflow run` (it exports MLFLOW_RUN_ID): our runs then nest under that run."""
    return bool(os.environ.get("MLFLOW_RUN_ID"))
