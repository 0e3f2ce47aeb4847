"""One target's cached PTX count (src/zoo/target_runner.py): when a cached result is computed again, and when the
gate variant is compiled. Build and PTX generation are replaced, so these run without the zoo extra."""

from __future__ import annotations

from src.zoo.pipeline import MATERIALISED_GATES
from src.zoo.target_runner import run_target
from src.zoo.targets import Target


def _fake_compiler(monkeypatch, fma_default: float):
    """run_target with build and ptx_features replaced: the default schedule executes `fma_default` FMAs, the
    variant 1.2e9 (1.2 per MAC of a 1 GMAC CNN). Returns the list of `materialise_gates` flags compiled."""
    from src.zoo import pipeline

    compiled = []

    def ptx_features(*args, materialise_gates=False, **kwargs):
        compiled.append(materialise_gates)
        r = {"zoo_version": "2", "batch_size": 1, "seconds": 1.0, "non_kernel_calls": {},
             "by_arch": {"sm_75": {"ptx_arch": "sm_75", "by_class": {"fma": 1.2e9 if materialise_gates
                                                                             else fma_default}}}}
        if materialise_gates:
            r["schedule_variant"] = MATERIALISED_GATES
        return r

    monkeypatch.setattr("src.zoo.resolve.build", lambda *a, **kw: object())
    monkeypatch.setattr(pipeline, "ptx_features", ptx_features)
    return compiled


def _target(tmp_path):
    import json

    from src.zoo.names import ModelSpec

    target = Target("dm_nfnet_f0", "dm_nfnet_f0", "timm", 192, 5, ModelSpec("timm", "dm_nfnet_f0", 192))
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{target.slug}__static.json").write_text(json.dumps({"macs": 1e9}))
    return target


def test_run_target_compiles_the_variant_after_a_default_that_recomputes(tmp_path, monkeypatch):
    compiled = _fake_compiler(monkeypatch, fma_default=246e9)
    res, _static, fail = run_target(_target(tmp_path), 1, ["sm_75"], tmp_path, "2")
    assert fail is None and compiled == [False, True] and res["schedule_variant"] == MATERIALISED_GATES


def test_run_target_keeps_a_plausible_default_and_compiles_a_listed_pair_as_the_variant_first(tmp_path, monkeypatch):
    compiled = _fake_compiler(monkeypatch, fma_default=1.2e9)
    res, _static, _fail = run_target(_target(tmp_path), 1, ["sm_75"], tmp_path, "2")
    assert compiled == [False] and "schedule_variant" not in res
    compiled.clear()
    res, _static, _fail = run_target(_target(tmp_path / "listed"), 1, ["sm_75"], tmp_path / "listed", "2",
                                     gates_first=True)
    assert compiled == [True] and res["schedule_variant"] == MATERIALISED_GATES


def test_a_cached_result_of_the_module_wide_fallback_is_recomputed(tmp_path, monkeypatch):
    """run_target: a cached result scheduled under the module-wide fallback is computed again (functions alone);
    kept where this environment cannot build the model."""
    import json

    from src.zoo import pipeline
    from src.zoo.names import ModelSpec
    from src.zoo.resolve import MissingFrameworkError

    target = Target("inception_v3", "inception_v3", "torchvision", 299, 1,
                    ModelSpec("torchvision", "inception_v3", 299))
    work = tmp_path / f"{target.slug}__b32"
    work.mkdir(parents=True)
    old = {"zoo_version": "2", "by_arch": {"sm_75": {"ptx_arch": "sm_75"}},
           "non_kernel_calls": {"schedule_without_matmul": 1}, "seconds": 1.0}
    (work / "result.json").write_text(json.dumps(old))
    (tmp_path / f"{target.slug}__static.json").write_text("{}")
    built = []

    def no_zoo(*a, **kw):
        raise MissingFrameworkError("no torchvision here")

    monkeypatch.setattr("src.zoo.resolve.build", no_zoo)
    res, _static, fail = run_target(target, 32, ["sm_75"], tmp_path, "2")
    assert fail is None and res["non_kernel_calls"] == {"schedule_without_matmul": 1}

    monkeypatch.setattr("src.zoo.resolve.build", lambda *a, **kw: built.append(a) or object())
    monkeypatch.setattr(pipeline, "ptx_features", lambda *a, **kw: {**old, "non_kernel_calls": {}})
    res, _static, fail = run_target(target, 32, ["sm_75"], tmp_path, "2")
    assert fail is None and res["non_kernel_calls"] == {} and len(built) == 1
