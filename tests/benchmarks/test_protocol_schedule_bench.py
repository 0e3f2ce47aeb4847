"""benchmarks/protocol_schedule_bench.py: a schedule is only faster if every number it writes is the same."""

import sys

import pandas as pd
import pytest

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from protocol_schedule_bench import identical, pipeline_protocols, train_run  # noqa: E402


def _run(pred: list[float], mape: float = 10.0, depth: int = 8, selection: float = 9.0) -> tuple:
    summary = {"protocols": {"random": {"fold_params": {"random": {"max_depth": depth}}, "mape": mape, "r2": 0.9,
                                        "adj_r2": 0.89}},
               "selection_cv_mape": selection}
    return 1.0, summary, {"random": pd.DataFrame({"predicted": pred})}


def test_identical_compares_predictions_parameters_and_metrics():
    base = _run([1.0, 2.0])
    assert identical(base, _run([1.0, 2.0]))
    assert not identical(base, _run([1.0, 2.0000001]))
    assert not identical(base, _run([1.0, 2.0], mape=10.01))
    assert not identical(base, _run([1.0, 2.0], depth=9))
    assert not identical(base, _run([1.0, 2.0], selection=9.5))


def test_the_bench_trains_the_pipelines_protocols(tmp_path):
    assert "leave_arch_out" in pipeline_protocols() and "random" in pipeline_protocols()
    with pytest.raises(ValueError, match="one of"):
        train_run("lr", "sideways", 2, tmp_path, [])
