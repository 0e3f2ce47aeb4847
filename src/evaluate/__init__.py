"""Metrics, importances, plots and the aggregation of per-model reports into reports/metrics.json."""
