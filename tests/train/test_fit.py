"""What the served model accepts: every runtime the physics estimate prices where its fallback can answer one."""

from omegaconf import OmegaConf

from src.config import compose
from src.features.baseline import PhysicsBaselineRegressor
from src.ingest.validate import COMPILE_MODES
from src.train.fit import served_categories

CATEGORIES = {"compile_mode": ["eager", "torch_compile"], "precision": ["amp_fp16", "fp32"]}


def test_the_physics_config_prices_every_runtime_of_the_measurement_schema():
    physics = OmegaConf.to_container(compose([]), resolve=True)["physics"]
    assert sorted(physics["dispatch_us"]) == sorted(physics["fusion"]) == sorted(COMPILE_MODES)


def test_a_model_with_the_unseen_runtime_fallback_accepts_every_priced_runtime():
    fallback = PhysicsBaselineRegressor(regressor=None, unseen_fallback=True)
    got = served_categories(fallback, CATEGORIES, list(COMPILE_MODES))
    assert got["compile_mode"] == sorted(COMPILE_MODES) and "xla_tensorrt" in got["compile_mode"]
    assert got["precision"] == CATEGORIES["precision"]  # other fields keep the data's values
    assert CATEGORIES["compile_mode"] == ["eager", "torch_compile"]  # the input is not changed


def test_a_model_without_it_accepts_only_the_runtimes_it_was_trained_on():
    # a learner alone (target=direct) would one-hot an unseen runtime as nothing: refused, as before
    assert served_categories(PhysicsBaselineRegressor(regressor=None), CATEGORIES, list(COMPILE_MODES)) == CATEGORIES
    assert served_categories(object(), CATEGORIES, list(COMPILE_MODES)) == CATEGORIES
