"""Pick the best runs by validation score and register their pyfunc models with an alias."""

from __future__ import annotations

import logging

import mlflow
from mlflow.tracking import MlflowClient

log = logging.getLogger("cnnperf.register")


def best_run(client: MlflowClient, experiment_id: str, data_version: str, target: str, model: str | None = None):
    """Lowest validation cv_mape among random-protocol study runs on this data version (and model)."""
    filt = ["tags.protocol = 'random'", "tags.run_kind = 'study'", f"tags.data_version = '{data_version}'",
            f"tags.target = '{target}'", "attributes.status = 'FINISHED'"]
    if model:
        filt.append(f"tags.model = '{model}'")
    runs = client.search_runs([experiment_id], " and ".join(filt), order_by=["metrics.cv_mape ASC"],
                              max_results=50)
    runs = [r for r in runs if "cv_mape" in r.data.metrics]
    if not runs:
        raise LookupError(f"no finished random-protocol runs for model={model or 'any'} on data {data_version}")
    return runs[0]


def register(client: MlflowClient, run, name: str, alias: str) -> dict:
    """Register runs:/<id>/model under `name` (reusing the version if this run is already registered)."""
    existing = client.search_model_versions(f"name = '{name}' and run_id = '{run.info.run_id}'")
    if existing:
        version = max(existing, key=lambda v: int(v.version))
    else:
        uri = run.data.tags.get("model_uri") or f"runs:/{run.info.run_id}/model"
        version = mlflow.register_model(uri, name)
    client.set_registered_model_alias(name, alias, str(version.version))
    client.set_model_version_tag(name, str(version.version), "validation_cv_mape",
                                 f"{run.data.metrics['cv_mape']:.4f}")
    client.set_model_version_tag(name, str(version.version), "estimator", run.data.tags.get("model", ""))
    return {"name": name, "version": int(version.version), "alias": alias, "run_id": run.info.run_id,
            "estimator": run.data.tags.get("model"), "validation_cv_mape": run.data.metrics["cv_mape"],
            "test_mape": run.data.metrics.get("mape"), "uri": f"models:/{name}@{alias}"}
