"""dlight rule fallbacks per function: a CNN whose default GPU schedules fail on a function still compiles, only that
function goes without the failing rule, and the result says how many did.

Needs torch + apache-tvm (zoo extra; CI has them) and skips with the reason otherwise.
"""

from __future__ import annotations

from tests.zoo.test_kernel_cache import needs_tvm


def _split_attention():
    """ResNeSt's split-attention block in small: a grouped 1x1 conv on a pooled (1x1) map.

    With every dlight rule, Reduction schedules that grouped conv as a cross-thread reduction that TVM cannot
    lower; without Reduction, GEMV claims it and asserts. It compiles with both left out (timm resnest50d_*).
    """
    import torch
    from torch import nn

    class SplitAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 96, 3, padding=1)
            self.fc1 = nn.Conv2d(48, 24, 1)
            self.fc2 = nn.Conv2d(24, 96, 1, groups=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv(x)
            b, c, h, w = x.shape
            pooled = x.view(b, 2, c // 2, h, w).sum(1).mean((2, 3), keepdim=True)
            attn = self.fc2(torch.relu(self.fc1(pooled))).view(b, 2, c // 2, 1, 1).softmax(1).reshape(b, c, 1, 1)
            return (x * attn).sum((2, 3))

    return SplitAttention().eval()


def _gated(mid: int, tail, **extra):
    """A conv (3 -> 32) and a squeeze-excite gate (1x1 convs 32 -> `mid` -> 32 on the pooled map), then
    `tail(module, x, gate)`; `extra` modules are registered after the conv (their order is the graph's)."""
    import torch
    from torch import nn

    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 32, 3, padding=1)
            for name, module in extra.items():
                self.add_module(name, module)
            self.fc1 = nn.Conv2d(32, mid, 1)
            self.fc2 = nn.Conv2d(mid, 32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.conv(x))
            gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))
            return tail(self, x, gate)

    return Gated().eval()


def _squeeze_excite():
    """A conv, a squeeze-excite gate (1x1 convs on the pooled map: matmuls at batch > 1), and another conv."""
    from torch import nn

    return _gated(8, lambda m, x, gate: m.conv2(x * gate).mean((2, 3)), conv2=nn.Conv2d(32, 32, 3, padding=1))


def _built(name, module):
    from src.zoo.names import ModelSpec
    from src.zoo.resolve import Built

    return Built(ModelSpec("torch", name, 32), 32, "torch", (1, 3, 32, 32), module=module)


@needs_tvm
def test_only_the_function_a_rule_cannot_schedule_goes_without_it():
    """At batch 32, dlight's Matmul asserts on the squeeze-excite matmul: that function alone goes without Matmul
    (before: the whole module was scheduled again without it, every conv with it)."""
    from src.zoo.tvmgen import compile_cuda

    compiled = compile_cuda(_built("se", _squeeze_excite()), 32)
    notes = {k: v for k, v in compiled.non_kernel_calls.items() if "without" in k}
    assert notes == {"funcs_scheduled_without_matmul": 1}
    assert len({x.kernel for x in compiled.launches}) >= 5
    # at batch 1 the same module needs no fallback
    assert not [k for k in compile_cuda(_built("se", _squeeze_excite()), 1).non_kernel_calls if "without" in k]


@needs_tvm
def test_a_function_whose_schedule_does_not_lower_is_scheduled_again_without_that_rule():
    from src.zoo.tvmgen import compile_cuda

    compiled = compile_cuda(_built("split_attention", _split_attention()), 1)
    # GEMV asserts on the grouped 1x1 conv, Reduction's schedule of it does not lower: that one function goes
    # without both; the others keep every rule.
    notes = {k: v for k, v in compiled.non_kernel_calls.items() if "without" in k}
    assert notes == {"funcs_scheduled_without_gemv": 1, "funcs_scheduled_without_reduction": 1}
    assert len(compiled.launches) >= 5 and "__global__" in compiled.cuda_source
    # failed lowering is timed too
    assert compiled.seconds["schedule"] > 0 and compiled.seconds["lower"] > 0


@needs_tvm
def test_per_function_scheduling_equals_dlights_pass_where_no_rule_fails():
    """Functions no rule fails on get exactly what ApplyDefaultSchedule gives them (cached records stay valid)."""
    import tvm
    import tvm.s_tir.dlight as dl

    from src.zoo.schedule import schedule_func
    from src.zoo.tvmgen import _zero_pipeline

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_86"})
    mod, _ = _zero_pipeline(_built("se", _squeeze_excite()), 1, target, {})
    # taken first: dlight's pass writes the scheduled functions into the module it is given
    prims = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    with target:
        whole = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                        dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
    assert len(prims) >= 4
    rules = set()
    for gv, f in prims:
        alone = schedule_func(f, target)
        assert alone.without == ()
        rules.add(alone.rule)
        tvm.ir.assert_structural_equal(alone.func, whole[gv])
    assert len(rules) >= 2  # not one rule taking everything


@needs_tvm
def test_a_function_no_rule_lowers_names_itself(monkeypatch):
    import pytest
    import tvm

    from src.zoo import tvmgen

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_86"})
    mod, _ = tvmgen._zero_pipeline(_built("se", _squeeze_excite()), 1, target, {})
    prims = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    victim = sorted(gv.name_hint for gv in prims)[0]
    real = tvmgen.lower_prims

    def lower_prims(funcs, tgt):
        if any(gv.name_hint == victim for gv in funcs):
            raise tvmgen.PtxGenerationError("lower", "injected")
        return real(funcs, tgt)

    monkeypatch.setattr(tvmgen, "lower_prims", lower_prims)
    with pytest.raises(tvmgen.PtxGenerationError, match=f"injected .*{victim} fail to lower under every rule"):
        tvmgen.schedule_and_lower(prims, target, {})


@needs_tvm
def test_a_rule_that_raises_any_error_declines_and_one_no_rule_schedules_is_named(monkeypatch):
    """dlight's Matmul raises AttributeError on some index maps (timm ecaresnet*_pruned at batch 32): that rule
    declines the function like an assertion does. A function every rule fails on is a schedule error naming it."""
    import pytest

    from src.zoo import schedule
    from src.zoo.tvmgen import PtxGenerationError, compile_cuda

    real = schedule._rule

    def rule(name, failing=("matmul",)):
        if name in failing:
            class Broken:
                def apply(self, *a):
                    raise AttributeError("'FloorDiv' object has no attribute 'value'")
            return Broken()
        return real(name)

    monkeypatch.setattr(schedule, "_rule", rule)
    compiled = compile_cuda(_built("se", _squeeze_excite()), 1)
    funcs = len({x.kernel.split("_kernel")[0] for x in compiled.launches})
    assert compiled.non_kernel_calls["funcs_scheduled_without_matmul"] == funcs >= 4
    monkeypatch.setattr(schedule, "_rule", lambda name: rule(name, schedule.RULES))
    with pytest.raises(PtxGenerationError, match=r"^schedule: \w+: AttributeError: 'FloorDiv'"):
        compile_cuda(_built("se", _squeeze_excite()), 1)


@needs_tvm
def test_a_module_the_default_rules_handle_records_no_fallback():
    from src.zoo.tvmgen import compile_cuda
    from tests.zoo.test_static import Tiny

    compiled = compile_cuda(_built("tiny", Tiny().eval()), 1)
    assert not [k for k in compiled.non_kernel_calls if "without" in k]


def test_notes_count_functions_per_dropped_rule():
    from src.zoo.schedule import RULES, rules_dropped

    assert RULES[0] == "matmul" and RULES[-1] == "fallback"
    assert rules_dropped({"a": (), "b": ("gemv", "reduction"), "c": ("gemv",)}) == {
        "funcs_scheduled_without_gemv": 2, "funcs_scheduled_without_reduction": 1}



def _position_head(resize: bool):
    """An attention-pool-like head: a learnt positional embedding added to the feature map; with `resize`, it is
    4x4 and resized to the map (16x16 for a 32x32 input) with torch's anti-aliased bicubic filter, as timm's CLIP
    ResNets do."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class PositionHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.pos = nn.Parameter(torch.randn(1, 16, 4, 4) if resize else torch.randn(1, 16, 16, 16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv(x)
            pos = self.pos
            if resize:
                pos = F.interpolate(pos, size=x.shape[-2:], mode="bicubic", antialias=True, align_corners=False)
            return (x + pos).mean((2, 3))

    return PositionHead().eval()


@needs_tvm
def test_an_antialiased_bicubic_resize_imports_as_tvms_bicubic_resize(monkeypatch):
    import pytest
    import torch

    from src.zoo import tvmgen

    module = _position_head(resize=True)
    ep = torch.export.export(module, (torch.randn(1, 3, 32, 32),))
    ops = {str(n.target) for n in ep.run_decompositions().graph.nodes if n.op == "call_function"}
    assert "aten._upsample_bicubic2d_aa.default" in ops  # the operator timm's CLIP ResNets failed to import on
    built = _built("position_head", module)
    compiled = tvmgen.compile_cuda(built, batch=2)
    reference = tvmgen.compile_cuda(_built("position_head", _position_head(resize=False)), batch=2)
    # the resize of a constant is folded at compile time: the same kernels as an embedding stored at the map's size
    assert [(lc.kernel, lc.grid, lc.block, lc.calls) for lc in compiled.launches] == \
        [(lc.kernel, lc.grid, lc.block, lc.calls) for lc in reference.launches]
    monkeypatch.setattr(tvmgen, "CUSTOM_CONVERTERS", {})
    with pytest.raises(tvmgen.PtxGenerationError, match="_upsample_bicubic2d_aa"):
        tvmgen.compile_cuda(built, batch=2)


def _group_norm_head(bias: bool):
    """A conv and a one-group group norm with an affine weight and, without `bias`, no bias (timm's PoolFormerV2
    `GroupNorm1NoBias`); with `bias`, a zero bias, which is what the missing one means."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class GroupNormHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.weight = nn.Parameter(torch.randn(16))
            self.bias = nn.Parameter(torch.zeros(16)) if bias else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.group_norm(self.conv(x), 1, self.weight, self.bias, 1e-6)

    return GroupNormHead().eval()


@needs_tvm
def test_a_group_norm_without_bias_imports_as_one_with_a_zero_bias(monkeypatch):
    import pytest

    from src.zoo import tvmgen

    compiled = tvmgen.compile_cuda(_built("gn_no_bias", _group_norm_head(bias=False)), batch=2)
    reference = tvmgen.compile_cuda(_built("gn_zero_bias", _group_norm_head(bias=True)), batch=2)
    assert [(lc.kernel, lc.grid, lc.block, lc.calls) for lc in compiled.launches] == \
        [(lc.kernel, lc.grid, lc.block, lc.calls) for lc in reference.launches]
    monkeypatch.setattr(tvmgen, "CUSTOM_CONVERTERS", {})
    with pytest.raises(tvmgen.PtxGenerationError, match="null pointer"):
        tvmgen.compile_cuda(_built("gn_no_bias", _group_norm_head(bias=False)), batch=2)
