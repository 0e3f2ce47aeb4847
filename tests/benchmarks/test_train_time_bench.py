"""benchmarks/train_time_bench.py: the benches time the train stage as dvc.yaml runs it."""

import sys

import yaml

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from train_time_bench import pipeline_overrides  # noqa: E402


def test_pipeline_overrides_set_every_setting_the_train_stage_sets():
    cmd = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]["train"]["do"]["cmd"]
    stage_keys = {tok.split("=", 1)[0] for tok in cmd.split() if "=" in tok}
    bench_keys = {ov.split("=", 1)[0] for ov in pipeline_overrides()}
    # the benches set the model and the protocols themselves
    assert stage_keys - {"model", "split.protocols"} == bench_keys
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["train"]
    assert f"sweep.perm_repeats={params['perm_repeats']}" in pipeline_overrides()
