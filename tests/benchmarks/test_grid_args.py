"""benchmarks/grid_args.py: the shared command line of the warm-start grid benchmarks."""

import sys

import pytest

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from grid_args import DEFAULT_OVERRIDES, grid_parser, listed, protocols_and_overrides  # noqa: E402


def test_defaults_are_the_pipelines_grid():
    args = grid_parser("doc", "x.json").parse_args([])
    assert args.model == "xgb" and args.out.endswith("reports/bench/x.json")
    protocols, overrides = protocols_and_overrides(args)
    assert protocols == ["random", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out"]
    assert overrides == list(DEFAULT_OVERRIDES) == ["split.leave_gpu_out.n_groups=8"]
    given = grid_parser("doc", "x.json").parse_args(["--protocols", "random,", "seed=1"])
    assert protocols_and_overrides(given) == (["random"], ["seed=1"])


def test_unknown_names_stop_the_run_naming_them():
    with pytest.raises(SystemExit, match=r"unknown protocol\(s\) \['leave_one_out'\]"):
        protocols_and_overrides(grid_parser("doc", "x.json").parse_args(["--protocols", "random,leave_one_out"]))
    with pytest.raises(SystemExit, match=r"unknown rule\(s\) \['mean'\]; one of \['none', '632'\]"):
        listed("none,mean", ("none", "632"), "rule")
    assert listed("a,,b", None, "variant") == ["a", "b"]
