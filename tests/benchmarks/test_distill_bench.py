"""benchmarks/distill_bench.py: a variant names the Decision Tree config it scores."""

import sys

import pytest
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from distill_bench import variant_config  # noqa: E402


def test_variants_name_the_tree_they_grow():
    c = OmegaConf.to_container(compose(["model=dt"]), resolve=True)
    assert variant_config(c, "plain")["model"]["distill"] is None
    both = variant_config(c, "cnn+gpu:6")["model"]["distill"]
    assert both == {**c["model"]["distill"], "swap": ["cnn", "gpu"], "copies": 6}
    assert variant_config(c, "gpu:3")["model"]["distill"]["swap"] == ["gpu"]
    assert c["model"]["distill"]["copies"] == 3  # the config itself is not changed
    with pytest.raises(SystemExit, match="not `plain`"):
        variant_config(c, "cnn+gpu")


def test_a_variant_may_name_its_donor_rule():
    c = OmegaConf.to_container(compose(["model=dt"]), resolve=True)
    assert variant_config(c, "cnn+gpu:2:distinct")["model"]["distill"] == {
        **c["model"]["distill"], "swap": ["cnn", "gpu"], "copies": 2, "donors": "distinct"}
    # without one, the config's rule
    assert variant_config(c, "cnn+gpu:3")["model"]["distill"]["donors"] == c["model"]["distill"]["donors"] == "rows"
