"""benchmarks/cost_variants_bench.py: a variant names the parameters it changes, wherever the config holds them."""

import sys

import pytest
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from cost_variants_bench import parse_variant, variant_config  # noqa: E402


def config(model: str) -> dict:
    return OmegaConf.to_container(compose([f"model={model}"]), resolve=True)


def test_a_variant_is_a_name_and_typed_changes():
    assert parse_variant("warm") == ("warm", {})
    assert parse_variant("cheap=n_estimators:50;max_samples:0.3") == ("cheap", {"n_estimators": 50,
                                                                              "max_samples": 0.3})
    with pytest.raises(SystemExit, match="not `warm`"):
        parse_variant("cheap")
    with pytest.raises(SystemExit, match="not `key:value`"):
        parse_variant("cheap=n_estimators50")


def test_changes_go_to_the_warm_start_the_fixed_parameters_or_the_distillation():
    rf = config("rf")
    c, params = variant_config(rf, {"n_estimators": 20, "max_samples": 0.3})
    assert params == {**rf["model"]["warm_start"], "n_estimators": 20}
    assert c["model"]["fixed"]["max_samples"] == 0.3
    assert rf["model"]["fixed"]["max_samples"] == 0.5  # the config itself is not changed
    dt = config("dt")
    c, params = variant_config(dt, {"distill.copies": 1})
    assert c["model"]["distill"]["copies"] == 1 and params == dt["model"]["warm_start"]
    assert dt["model"]["distill"]["copies"] == 3
    with pytest.raises(SystemExit, match="neither a warm-start nor a fixed parameter"):
        variant_config(rf, {"n_neighbours": 3})
    with pytest.raises(SystemExit, match="not distilled"):
        variant_config(rf, {"distill.copies": 2})



def test_the_groupings_are_checked_by_name():
    from training_part_cv import GROUPINGS, check_groupings

    assert check_groupings("gpu,family") == ["gpu", "family"]
    assert set(GROUPINGS) == {"configuration", "gpu", "family"}
    with pytest.raises(SystemExit, match=r"unknown \['cnn'\]"):
        check_groupings("gpu,cnn")
