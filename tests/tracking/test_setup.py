"""src.tracking.setup(): experiments are created / marked as model training (the MLflow experiment-kind tag)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from src.serve.processes import stop_process_group
from src.tracking import EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_TRAINING, setup

MLFLOW_CLI = Path(sys.executable).with_name("mlflow")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh SQLite store; MLflow's process-wide URIs and active experiment are restored afterwards."""
    import mlflow.tracking._model_registry.utils as registry_utils
    import mlflow.tracking._tracking_service.utils as tracking_utils
    import mlflow.tracking.fluent as fluent

    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)
    monkeypatch.setattr(registry_utils, "_registry_uri", registry_utils._registry_uri)
    monkeypatch.setattr(fluent, "_active_experiment_id", fluent._active_experiment_id)
    return f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path


def test_setup_creates_training_experiment_and_marks_existing(store):
    uri, tmp_path = store
    exp_id = setup(uri, "cnnperf-test", artifact_root=str(tmp_path / "art"))
    client = MlflowClient(uri)
    exp = client.get_experiment(exp_id)
    assert exp.name == "cnnperf-test"
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND_TRAINING == "custom_model_development"
    assert mlflow.get_tracking_uri() == uri

    # An experiment created before this change (no kind tag) is marked by the next setup() call ...
    old_id = client.create_experiment("cnnperf-old", tags={"team": "perf"})
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old_id).tags
    assert setup(uri, "cnnperf-old") == old_id
    old = client.get_experiment(old_id)
    assert old.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND_TRAINING and old.tags["team"] == "perf"
    with mlflow.start_run() as run:  # ... and setup() made it the active experiment
        pass
    assert run.info.experiment_id == old_id

    # setup() is idempotent, and a kind someone chose by hand is left alone.
    assert setup(uri, "cnnperf-test") == exp_id
    client.set_experiment_tag(old_id, EXPERIMENT_KIND_TAG, "genai_development")
    setup(uri, "cnnperf-old")
    assert client.get_experiment(old_id).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def test_tracking_server_reports_experiment_kind(store):
    uri, tmp_path = store
    setup(uri, "cnnperf-ui", artifact_root=str(tmp_path / "art"))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [str(MLFLOW_CLI), "server", "--backend-store-uri", uri, "--default-artifact-root", str(tmp_path / "art"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,  # own process group: children die with it
        env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    try:
        deadline = time.monotonic() + 25
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not come up:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)
        q = urllib.parse.urlencode({"experiment_name": "cnnperf-ui"})
        exp = _get_json(f"{base}/api/2.0/mlflow/experiments/get-by-name?{q}")["experiment"]
        tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
        assert tags.get(EXPERIMENT_KIND_TAG) == "custom_model_development"
    finally:
        stop_process_group(proc, grace_s=15.0)  # the group's children (job consumers, uvicorn workers) too
        log.close()
