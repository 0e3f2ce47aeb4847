"""Channel-gate broadcasts materialised (src/zoo/gates.py) and the table's recompile of a recomputing CNN.

The TVM tests need torch + apache-tvm (zoo extra; CI has them) and skip with the reason otherwise; the rules that
decide when the variant is compiled are pure and always run.
"""

from __future__ import annotations

import pandas as pd

from src.zoo.gates import gate_side
from src.zoo.kernel_table import MAX_FMA_PER_MAC
from src.zoo.pipeline import MATERIALISED_GATES
from src.zoo.table import fma_per_mac, recomputes_gates, recomputing_pairs
from tests.zoo.test_kernel_cache import needs_tvm
from tests.zoo.test_tvmgen import _built, _gated


def _nf_gate():
    """A conv and an NFNet-style squeeze-excite block: gate (32 -> 32 -> 32), gain, scale and a residual add.

    With only `x * gate` TVM's fused kernel computes the gate once per thread block; with the chain after it (as in
    dm_nfnet) dlight schedules the fused function element-wise and every output element recomputes the gate."""
    return _gated(32, lambda m, x, gate: (x * gate * 2.0 * 0.2 + x).mean((2, 3)))


def _constant_scale():
    """A conv whose output is scaled per channel by a parameter (a layer scale): a constant, not a gate."""
    import torch
    from torch import nn

    class LayerScale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 32, 3, padding=1)
            self.gamma = nn.Parameter(torch.full((1, 32, 1, 1), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.conv(x) * self.gamma).mean((2, 3))

    return LayerScale().eval()


def test_a_gate_is_a_per_channel_operand_of_a_larger_map():
    assert gate_side([1, 32, 8, 8], [1, 32, 1, 1])
    assert gate_side([4, 32, 8, 8], [4, 1, 1, 1])  # one gate for every channel
    assert not gate_side([1, 32, 1, 1], [1, 32, 1, 1])  # nothing is broadcast
    assert not gate_side([1, 32, 8, 8], [1, 32, 8, 8])
    assert not gate_side([1, 32, 8, 8], [1, 16, 1, 1])  # channels that do not broadcast
    assert not gate_side(None, [1, 32, 1, 1])  # unknown (symbolic) shape


def _result(fma: float, batch: int = 1, variant: str | None = None) -> dict:
    r = {"batch_size": batch,
         "by_arch": {"sm_75": {"by_class": {"fma": fma}}, "sm_120": {"by_class": {"fma": 0.9 * fma}}}}
    if variant:
        r["schedule_variant"] = variant
    return r


def test_a_default_result_with_too_many_fmas_per_mac_is_compiled_again_as_the_variant():
    static = {"macs": 1e9}
    assert fma_per_mac(_result(2.4e9, batch=2), static) == 1.2  # per sample, the most over the archs
    assert not recomputes_gates(_result(1.2e9), static)
    assert recomputes_gates(_result((MAX_FMA_PER_MAC + 1) * 1e9), static)
    # a variant is judged by the table (`implausible_results`), never compiled again
    assert not recomputes_gates(_result(246e9, variant=MATERIALISED_GATES), static)
    # without the CNN's MACs nothing is judged
    assert fma_per_mac(_result(246e9), None) is None and not recomputes_gates(_result(246e9), {"macs": 0})


def test_pairs_the_failure_table_lists_as_recomputing_are_compiled_as_the_variant_first(tmp_path):
    path = tmp_path / "ptx_failures.csv"
    assert recomputing_pairs(path) == set()
    pd.DataFrame([
        {"model_key": "dm_nfnet_f0", "img_size": 192, "stage": "implausible", "error": "RecomputingSchedule"},
        {"model_key": "dm_nfnet_f0", "img_size": 256, "stage": "implausible", "error": "RecomputingSchedule"},
        {"model_key": "convnext_tiny_hnfd", "img_size": 224, "stage": "build", "error": "UnknownModelError"},
    ]).to_csv(path, index=False)
    assert recomputing_pairs(path) == {("dm_nfnet_f0", 192), ("dm_nfnet_f0", 256)}


@needs_tvm
def test_the_variant_computes_the_gate_once_instead_of_per_pixel():
    """Default: TVM fuses the gate's 1x1 conv into the full-size multiply (kernel `..._sigmoid_multiply`), so every
    output element recomputes it. Variant: the gate kernel ends at the sigmoid, a broadcast-multiply kernel scales
    the map, and the executed instructions drop."""
    from src.zoo.pipeline import ptx_features
    from src.zoo.tvmgen import compile_cuda

    default = compile_cuda(_built("gate", _nf_gate()), 1)
    variant = compile_cuda(_built("gate", _nf_gate()), 1, materialise_gates=True)
    assert default.gates_materialised == 0 and variant.gates_materialised == 1
    fused = {x.kernel for x in default.launches}
    split = {x.kernel for x in variant.launches}
    assert any("sigmoid_multiply" in k for k in fused)
    assert not any("sigmoid_multiply" in k for k in split)
    assert any(k.startswith("fused_broadcast_to_multiply") for k in split)

    counts = {}
    for flag in (False, True):
        r = ptx_features("torch", "gate", 32, 1, ["sm_75"], built=_built("gate", _nf_gate()),
                         materialise_gates=flag)
        counts[flag] = r["by_arch"]["sm_75"]
        assert r.get("schedule_variant") == (MATERIALISED_GATES if flag else None)
    # 32 x 32 pixels x 32 channels each recomputing a 32-input dot product: ~1M FMAs the network does not have
    # (measured: 3.25M -> 2.18M)
    assert counts[True]["by_class"]["fma"] < counts[False]["by_class"]["fma"] - 0.5e6
    assert counts[True]["thread_instructions"] < counts[False]["thread_instructions"]


@needs_tvm
def test_a_constant_per_channel_scale_is_not_a_gate():
    from src.zoo.tvmgen import compile_cuda

    assert compile_cuda(_built("scale", _constant_scale()), 1, materialise_gates=True).gates_materialised == 0


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

    from src.zoo import table
    from src.zoo.names import ModelSpec

    target = table.Target("dm_nfnet_f0", "dm_nfnet_f0", "timm", 192, 5, ModelSpec("timm", "dm_nfnet_f0", 192))
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{target.slug}__static.json").write_text(json.dumps({"macs": 1e9}))
    return target


def test_run_target_compiles_the_variant_after_a_default_that_recomputes(tmp_path, monkeypatch):
    from src.zoo import table

    compiled = _fake_compiler(monkeypatch, fma_default=246e9)
    res, _static, fail = table.run_target(_target(tmp_path), 1, ["sm_75"], tmp_path, "2")
    assert fail is None and compiled == [False, True] and res["schedule_variant"] == MATERIALISED_GATES


def test_run_target_keeps_a_plausible_default_and_compiles_a_listed_pair_as_the_variant_first(tmp_path, monkeypatch):
    from src.zoo import table

    compiled = _fake_compiler(monkeypatch, fma_default=1.2e9)
    res, _static, _fail = table.run_target(_target(tmp_path), 1, ["sm_75"], tmp_path, "2")
    assert compiled == [False] and "schedule_variant" not in res
    compiled.clear()
    res, _static, _fail = table.run_target(_target(tmp_path / "listed"), 1, ["sm_75"], tmp_path / "listed", "2",
                                           gates_first=True)
    assert compiled == [True] and res["schedule_variant"] == MATERIALISED_GATES
