"""record_benchmark: the JSON report and its MLflow run in a real SQLite store."""

import json

from mlflow.tracking import MlflowClient

from src.tracking import record_benchmark


def test_writes_json_and_logs_run(tmp_path):
    cfg = {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "artifact_root": f"file://{tmp_path}/art"}
    path = record_benchmark({"mape": 7.5, "rows": 3}, tmp_path / "bench" / "b.json", cfg, "benchmark/x",
                            {"model": "xgb"}, {"random/mape": 7.5})
    assert json.loads(path.read_text()) == {"mape": 7.5, "rows": 3}
    client = MlflowClient(cfg["tracking_uri"])
    [run] = client.search_runs([client.get_experiment_by_name("cnnperf-bench").experiment_id])
    assert run.data.tags["run_kind"] == "benchmark" and run.data.tags["model"] == "xgb"
    assert run.data.metrics == {"random/mape": 7.5} and run.info.run_name == "benchmark/x"
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["b.json"]


def test_without_mlflow_only_writes(tmp_path):
    path = record_benchmark({"a": 1}, tmp_path / "b.json", None, "r", {}, {})
    assert json.loads(path.read_text()) == {"a": 1} and not (tmp_path / "mlflow.db").exists()


def test_logs_plots_beside_the_json(tmp_path):
    cfg = {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "artifact_root": f"file://{tmp_path}/art"}
    png = tmp_path / "bench" / "b.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG")
    record_benchmark({"a": 1}, tmp_path / "bench" / "b.json", cfg, "benchmark/x", {}, {"m": 1.0}, artifacts=[png])
    client = MlflowClient(cfg["tracking_uri"])
    [run] = client.search_runs([client.get_experiment_by_name("cnnperf-bench").experiment_id])
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["b.json", "b.png"]
