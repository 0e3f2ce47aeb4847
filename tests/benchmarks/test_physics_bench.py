"""benchmarks/physics_bench.py: each variant's config is the model the pipeline would fit for it."""

import sys

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from physics_bench import config  # noqa: E402


def test_the_distilled_tree_keeps_its_teacher_only_under_the_efficiency_target():
    efficiency = config("dt", "physics_ptx/efficiency", [])
    assert efficiency["model"]["distill"]["teacher"] == "xgb" and efficiency["target"]["baseline"] == "physics"
    latency = config("dt", "paper/latency", [])
    assert latency["model"]["distill"] is None and latency["features"]["name"] == "paper"
    assert config("xgb", "static/latency", [])["target"]["monotone"]["log_flops_step"] == 1
    assert config("dt", "estimate_only", [])["features"]["name"] == "physics"
