"""Where a benchmark records: the composed config's MLflow settings, or nowhere with --no-mlflow."""

from src.tracking import benchmark_store


def test_benchmark_store_is_the_mlflow_group_or_none():
    assert benchmark_store(True) is None
    cfg = benchmark_store(False)
    assert {"tracking_uri", "artifact_root", "experiment"} <= set(cfg)
