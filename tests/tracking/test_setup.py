"""src.tracking.setup(): experiments are created / marked as model training (the MLflow experiment-kind tag)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from src.tracking import EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_TRAINING, setup
from tests.scaleout.servers import MlflowServer


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


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def test_tracking_server_reports_experiment_kind(store):
    uri, tmp_path = store
    setup(uri, "cnnperf-ui", artifact_root=str(tmp_path / "art"))
    # The scale-out tests' server helper: its start-up wait (120 s) fits a loaded 2-core CI machine, where
    # `mlflow server` alone has taken over 25 s to answer /health.
    server = MlflowServer(uri, tmp_path / "art", workers=1).wait_ready()
    try:
        q = urllib.parse.urlencode({"experiment_name": "cnnperf-ui"})
        exp = _get_json(f"{server.url}/api/2.0/mlflow/experiments/get-by-name?{q}")["experiment"]
        tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
        assert tags.get(EXPERIMENT_KIND_TAG) == "custom_model_development"
    finally:
        server.stop()
