"""Config composition: every model group composes, resolves and names a real estimator and search space."""

import optuna
import pytest
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose
from src.features.kernels import LAYER_COLUMNS, kernel_profiles
from src.features.layer_physics import ProfileIndex
from src.features.ptx_lookup import load_ptx_index
from src.train.estimators import build_model, estimator_class, suggest

MODELS = ["lr", "knn", "rf", "dt", "xgb"]


@pytest.mark.parametrize("model", MODELS)
def test_each_model_composes(model):
    c = OmegaConf.to_container(compose([f"model={model}"]), resolve=True)
    assert c["model"]["name"] == model
    est = estimator_class(c["model"]["estimator"])
    assert hasattr(est, "fit") and hasattr(est, "predict")
    assert c["model"]["search_space"], f"{model}: empty search space"
    # Every parameter of the space is accepted by the estimator.
    params = suggest(optuna.trial.FixedTrial(_first_values(c["model"]["search_space"])), c["model"]["search_space"])
    import pandas as pd

    layers = pd.read_parquet(REPO_ROOT / "data" / "processed" / "layers.parquet", columns=LAYER_COLUMNS,
                             filters=[("model_key", "==", "resnet18")])
    ptx = load_ptx_index(str(REPO_ROOT / c["data"]["ptx_counts"]), c["features"]["ptx_prefix"])
    physics = ProfileIndex(kernel_profiles(layers))
    teacher = None
    if c["model"].get("distill"):  # a distilled model (dt) is built with its teacher, at the teacher's warm start
        t = OmegaConf.to_container(compose([f"model={c['model']['distill']['teacher']}"]), resolve=True)["model"]
        teacher = build_model(t, c["features"], ptx.columns, t["warm_start"], target_cfg=c["target"],
                              physics=physics, physics_constants=c["physics"], ptx=ptx)
    built = build_model(c["model"], c["features"], ptx.columns, params, target_cfg=c["target"],
                        physics=physics, physics_constants=c["physics"], ptx=ptx, teacher=teacher)
    assert built.regressor.named_steps["model"].get_params()  # constructs without error
    assert (getattr(built, "teacher", None) is not None) == bool(c["model"].get("distill"))
    # the defaults: the physics estimate, PTX counts looked up by the Pipeline, the efficiency target
    assert c["features"]["name"] == "physics_ptx" and c["features"]["use_ptx"] and c["features"]["physics"]
    assert c["target"]["baseline"] == "physics"


def _first_values(space: dict) -> dict:
    return {k: (v["choices"][0] if v["type"] == "categorical" else v["low"]) for k, v in space.items()}


def test_uris_are_absolute_and_chdir_off(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose(["model=dt"])
    c = OmegaConf.to_container(cfg, resolve=True)
    assert c["mlflow"]["tracking_uri"] == f"sqlite:///{REPO_ROOT}/mlflow.db"
    assert c["sweep"]["storage"] == f"sqlite:///{REPO_ROOT}/optuna.db"
    assert c["mlflow"]["artifact_root"] == f"file://{REPO_ROOT}/mlartifacts"
    assert c["split"]["protocols"] == ["random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out",
                                             "leave_arch_out", "leave_runtime_out"]


def test_tracking_uri_env_override(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/elsewhere.db")
    c = OmegaConf.to_container(compose([]), resolve=True)
    assert c["mlflow"]["tracking_uri"] == "sqlite:////tmp/elsewhere.db"


@pytest.mark.parametrize("fs,ptx,eng", [("engineered", False, True), ("static", False, False),
                                         ("static_ptx", True, True), ("paper", True, False)])
def test_feature_sets(fs, ptx, eng):
    c = OmegaConf.to_container(compose([f"features={fs}"]), resolve=True)
    assert c["features"]["use_ptx"] is ptx and c["features"]["engineered"] is eng
    assert c["features"]["require_static"] is True


@pytest.mark.parametrize("model", MODELS)
def test_warm_start_lies_in_search_space(model):
    c = OmegaConf.to_container(compose([f"model={model}"]), resolve=True)
    space, warm = c["model"]["search_space"], c["model"]["warm_start"]
    assert set(warm) == set(space)
    for k, v in warm.items():
        spec = space[k]
        if spec["type"] == "categorical":
            assert v in spec["choices"]
        else:
            assert spec["low"] <= v <= spec["high"]
            if spec.get("step"):
                assert (v - spec["low"]) % spec["step"] == 0


def test_tuning_rows_are_the_sweep_default_unless_the_model_sets_its_own():
    """A model's own `tune_max_rows` (null = every training row) overrides the sweep's sample; dt (distilled, one
    trial) follows the sweep's."""
    from types import SimpleNamespace

    import numpy as np

    from src.train.protocols import subsample
    from src.train.run import Trainer

    def budget(overrides):
        return Trainer.budget(SimpleNamespace(c=OmegaConf.to_container(compose(overrides), resolve=True)))

    assert budget(["model=dt"])["tune_max_rows"] == 3000
    assert budget(["model=dt", "sweep.tune_max_rows=500"])["tune_max_rows"] == 500
    assert budget(["model=dt", "model.tune_max_rows=null"])["tune_max_rows"] is None
    assert budget(["model=xgb"])["tune_max_rows"] == 3000
    assert budget(["model=lr", "sweep.tune_max_rows=500"])["tune_max_rows"] == 500
    assert budget(["model=xgb", "+model.tune_max_rows=null"])["tune_max_rows"] is None
    assert budget(["model=dt", "sweep.tune_max_rows=500", "model.tune_max_rows=800"])["tune_max_rows"] == 800
    idx = np.arange(5000)
    assert len(subsample(idx, None, 0)) == 5000 and len(subsample(idx, 3000, 0)) == 3000


@pytest.mark.parametrize("model", MODELS)
def test_selection_rule_names_numeric_parameters_of_the_search_space(model):
    """A model's `selection` (default: lowest CV MAPE) is checked against its own search space; dt uses CART's
    one-standard-error rule, xgb and rf keep their warm start unless a trial beats it beyond noise (`incumbent`)."""
    from src.train.tuning import check_selection

    c = OmegaConf.to_container(compose([f"model={model}"]), resolve=True)
    sel = check_selection(c["model"].get("selection"), c["model"]["search_space"])
    assert sel["rule"] == {"dt": "one_se", "xgb": "incumbent", "rf": "incumbent"}.get(model, "best")


@pytest.mark.parametrize("model", MODELS)
def test_only_the_linear_model_sees_every_gpu_speed(model):
    """The physics sets give the learner the GPU's architecture and sizes; lr overrides that for itself (a line
    extrapolates log speeds, a tree cannot). The override changes columns only, never the rows."""
    from src.train.estimators import model_features

    c = OmegaConf.to_container(compose([f"model={model}"]), resolve=True)
    assert c["features"]["spec_features"] == ["compute_capability", "l2_cache_mb", "memory_size_gb"]
    seen = model_features(c["model"], c["features"])
    assert seen["spec_features"] is (True if model == "lr" else seen["spec_features"])
    if model != "lr":
        assert seen == c["features"]
    assert {k: v for k, v in seen.items() if k != "spec_features"} == {
        k: v for k, v in c["features"].items() if k != "spec_features"}


def test_a_model_cannot_override_feature_keys_that_change_rows():
    from src.train.estimators import model_features

    c = OmegaConf.to_container(compose(["model=lr"]), resolve=True)
    with pytest.raises(ValueError, match=r"model lr: feature_overrides \['require_static'\] cannot be set per model"):
        model_features({**c["model"], "feature_overrides": {"require_static": False}}, c["features"])


def test_compose_from_many_threads_at_once():
    """Concurrent protocols compose configs in threads (a distilled tree composes its teacher's): Hydra's one
    GlobalHydra must not be initialised twice or cleared under another thread."""
    from concurrent.futures import ThreadPoolExecutor

    from src.config import compose

    models = ["lr", "knn", "rf", "dt", "xgb"] * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        names = list(pool.map(lambda m: compose([f"model={m}"]).model.name, models))
    assert names == models


@pytest.mark.parametrize(("model", "threads"), [("knn", 2), ("rf", 1), ("xgb", 1)])
def test_tree_ensembles_keep_one_thread_whatever_sweep_n_jobs(model, threads):
    """rf and xgb split their sums by thread (predictions would move in the last digits), so they pin one thread;
    knn follows sweep.n_jobs."""
    fixed = OmegaConf.to_container(compose([f"model={model}", "sweep.n_jobs=2"]), resolve=True)["model"]["fixed"]
    assert fixed["n_jobs"] == threads
