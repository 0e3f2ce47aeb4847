"""Uniform-loop closed form, non-terminating loops, and the TVM ResNet50 kernels (nvcc 13, sm_86)."""

from __future__ import annotations

import json

import pytest

from src.ptx import AnalysisError, UnresolvedBranchError, count_launch, interpret, parse_ptx

from .conftest import FIXTURES, load, named

LOOPS = """
.version 8.0
.target sm_80
.address_size 64

// countdown loop with a parameter step, a thread-dependent early exit and a nested uniform loop
.visible .entry countdown(.param .u64 out, .param .u32 start, .param .u32 step, .param .u32 inner)
{
    .reg .pred %p<6>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<3>;
    ld.param.u32 %r1, [start];
    ld.param.u32 %r2, [step];
    ld.param.u32 %r3, [inner];
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, 0;
$L_outer:
    setp.le.s32 %p1, %r1, 0;
    @%p1 bra $L_done;
    mov.u32 %r6, 0;
$L_inner:
    setp.ge.u32 %p2, %r6, %r3;
    @%p2 bra $L_inner_done;
    add.s32 %r5, %r5, %r6;
    add.s32 %r6, %r6, 1;
    bra.uni $L_inner;
$L_inner_done:
    setp.eq.s32 %p3, %r4, %r1;
    @%p3 bra $L_done;
    sub.s32 %r1, %r1, %r2;
    bra.uni $L_outer;
$L_done:
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r5;
    ret;
}

// a loop whose exit depends on memory
.visible .entry spin(.param .u64 flag)
{
    .reg .pred %p<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
$L_wait:
    ld.volatile.global.u32 %r1, [%rd1];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $L_wait;
    ret;
}
"""


@pytest.fixture(scope="module")
def loops():
    return parse_ptx(LOOPS, "loops.ptx")


@pytest.mark.parametrize(("start", "step", "inner", "block"),
                         [(20, 3, 4, 40), (7, 1, 0, 32), (0, 1, 5, 8), (50, 7, 9, 70), (-3, 2, 3, 16)])
def test_handwritten_loops_equal_interpreter(loops, start, step, inner, block):
    params = {"start": start, "step": step, "inner": inner}
    fast = count_launch(loops, "countdown", 2, block, params)
    ref = interpret(loops, "countdown", 2, block, params)
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)


def test_long_uniform_loops_take_the_closed_form(loops):
    # 10^6 outer x 10^3 inner iterations would be 10^9 block steps if iterated
    def run(start, inner):
        return count_launch(loops, "countdown", 1, 1, {"start": start, "step": 1, "inner": inner,
                                                        }).thread_instructions
    per_outer = run(2, 1000) - run(1, 1000)
    assert run(1_000_000, 1000) == run(1, 1000) + (1_000_000 - 1) * per_outer
    # a thread leaves the countdown early when tid == counter (a thread-varying exit: iterated, vectorised)
    params = {"start": 300, "step": 1, "inner": 2}
    big = count_launch(loops, "countdown", 3, 64, params)
    ref = interpret(loops, "countdown", 3, 64, params)
    assert big.thread_instructions == ref.thread_instructions and big.warp_instructions == ref.warp_instructions
    assert count_launch(loops, "countdown", 1000, 256, {**params, "start": 3000}).thread_instructions > 0


def test_memory_dependent_loop_policies(loops):
    with pytest.raises(UnresolvedBranchError, match="ld.volatile.global.u32"):
        count_launch(loops, "spin", 1, 32)
    r = count_launch(loops, "spin", 1, 32, policy="not_taken")
    assert r.estimate and r.thread_instructions == 32 * 5
    with pytest.raises(AnalysisError, match="never exits"):
        count_launch(loops, "spin", 1, 32, policy="taken")


def test_fixture_long_uniform_loop(o3):
    step = (count_launch(o3, "nested_param", 1, 1, {1: 2, 2: 3}).thread_instructions
            - count_launch(o3, "nested_param", 1, 1, {1: 1, 2: 3}).thread_instructions)
    one = count_launch(o3, "nested_param", 1, 1, {1: 1, 2: 3}).thread_instructions
    r = count_launch(o3, "nested_param", 100, 256, {1: 1_000_000, 2: 3})
    assert r.thread_instructions == 100 * 256 * (one + (1_000_000 - 1) * step)


TVM = FIXTURES / "tvm"


@pytest.fixture(scope="module")
def resnet50():
    meta = json.loads((TVM / "resnet50_launches.json").read_text())
    return load(TVM / "resnet50_sm_86.ptx"), meta["launches"]


def test_every_resnet50_launch_is_exact(resnet50):
    module, launches = resnet50
    assert len(module.kernels) == 44 and sum(x["calls"] for x in launches) == 128
    for lw in launches:
        r = count_launch(module, lw["kernel"], lw["grid"], lw["block"], lw["params"] or None)
        assert not r.estimate, (lw["kernel"], r.unresolved_branches)
        assert r.thread_instructions > 0 and r.warp_instructions * 32 >= r.thread_instructions


SMALL = ["fused_pad_transpose_kernel", "max_pool2d_kernel", "fused_transpose4_kernel", "conv2d1_kernel",
         "mean_kernel", "fused_matmul_add19_kernel", "softmax_kernel", "transpose37_kernel"]


@pytest.mark.parametrize("kernel", SMALL)
def test_resnet50_kernels_equal_interpreter_on_reduced_grids(resnet50, kernel):
    module, launches = resnet50
    lw = next(x for x in launches if x["kernel"] == kernel)
    grid = (2, 1, 1) if lw["grid"][1] == 1 else (1, 2, 1)
    fast = count_launch(module, kernel, grid, lw["block"])
    ref = interpret(module, kernel, grid, lw["block"])
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
    assert {k: v for k, v in fast.by_class.items() if v} == ref.by_class


def test_named_helper_is_used(o3):
    assert named(o3, "vector_add", {3: 5}) == {"vector_add_param_3": 5}


BITS = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry bits(.param .u32 sel)
{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    ld.param.u32 %r1, [sel];
    mov.u32 %r2, %tid.x;
    bfe.u32 %r3, %r2, 2, 3;
    bfe.s32 %r4, %r2, 1, 4;
    lop3.b32 %r5, %r2, %r1, %r3, 0x96;
    and.b32 %r6, %r5, 1;
    setp.eq.u32 %p1, %r6, 0;
    @%p1 bra $L_a;
    add.s32 %r7, %r4, 1;
$L_a:
    setp.lt.s32 %p2, %r4, -2;
    @%p2 add.s32 %r8, %r3, %r3;
    setp.gt.u32 %p3, %r3, 4;
    @%p3 bra $L_b;
    mul.lo.s32 %r9, %r3, 3;
$L_b:
    ret;
}
"""


@pytest.mark.parametrize("sel", [0, 5, 0xFFFF])
def test_bit_field_and_lop3_decisions_are_modelled(sel):
    m = parse_ptx(BITS, "bits.ptx")
    fast = count_launch(m, "bits", 1, 64, {"sel": sel})
    ref = interpret(m, "bits", 1, 64, {"sel": sel})
    assert not fast.estimate
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
    assert fast.predicated_off > 0


@pytest.fixture
def batch_spy(monkeypatch):
    """Records whether loop batching (several iterations as extra lanes) was applied."""
    from src.ptx import driver
    applied = []
    real = driver.Runner._try_batch

    def spy(self, *args):
        ok = real(self, *args)
        applied.append(ok)
        return ok
    monkeypatch.setattr(driver.Runner, "_try_batch", spy)
    return applied


@pytest.mark.parametrize("name", ["kernels_sm_86_O3.ptx", "kernels_sm_80_O0.ptx", "kernels_sm_86_G.ptx"])
def test_batched_loop_iterations_equal_interpreter(batch_spy, name):
    m = load(FIXTURES / name)
    params = named(m, "triangle", {1: 60})
    fast = count_launch(m, "triangle", 2, 64, params)
    ref = interpret(m, "triangle", 2, 64, params)
    assert any(batch_spy), "no loop was batched"
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)


def test_batched_tvm_convolution_equals_interpreter(batch_spy, resnet50):
    module, _ = resnet50
    # 3x3 convolution: padding checks use div/mod of the loop counter, so the loop is batched, not skipped
    fast = count_launch(module, "conv2d2_kernel", (1, 1, 1), (8, 16, 1))
    ref = interpret(module, "conv2d2_kernel", (1, 1, 1), (8, 16, 1))
    assert any(batch_spy)
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
    assert {k: v for k, v in fast.by_class.items() if v} == ref.by_class


def test_batching_does_not_change_counts_at_full_size(batch_spy, resnet50, monkeypatch):
    from src.ptx import fastforward
    module, launches = resnet50
    picks = [x for x in launches if x["kernel"] in ("conv2d6_kernel", "conv2d11_kernel", "conv2d16_kernel")]
    batched = [count_launch(module, x["kernel"], x["grid"], x["block"]).to_dict() for x in picks]
    assert any(batch_spy)
    monkeypatch.setattr(fastforward, "BATCH_LOOPS", False)
    plain = [count_launch(module, x["kernel"], x["grid"], x["block"]).to_dict() for x in picks]
    for a, b in zip(batched, plain, strict=True):
        for key in ("thread_instructions", "warp_instructions", "predicated_off", "by_class", "bytes_by_space"):
            assert a[key] == b[key], key


DIVERGENT_BODY = """
.version 8.0
.target sm_80
.address_size 64
// uniform loop whose body diverges on the thread and the counter; x (last iteration) decides after the loop
.visible .entry div_loop(.param .u32 n)
{
    .reg .pred %p<6>;
    .reg .b32 %r<12>;
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, 0;
    mov.u32 %r4, 0;
$L_head:
    setp.ge.s32 %p1, %r3, %r1;
    @%p1 bra $L_after;
    and.b32 %r5, %r2, 1;
    setp.eq.s32 %p2, %r5, 0;
    @%p2 bra $L_even;
    rem.u32 %r6, %r3, 7;
    mul.lo.s32 %r4, %r6, %r2;
    bra.uni $L_next;
$L_even:
    rem.u32 %r7, %r3, 5;
    add.s32 %r4, %r7, %r2;
$L_next:
    rem.u32 %r8, %r3, 3;
    setp.lt.u32 %p3, %r8, %r5;
    @%p3 add.s32 %r9, %r8, 1;
    add.s32 %r3, %r3, 1;
    bra.uni $L_head;
$L_after:
    setp.gt.s32 %p4, %r4, 50;
    @%p4 bra $L_big;
    add.s32 %r10, %r4, 1;
    add.s32 %r10, %r10, 1;
$L_big:
    ret;
}
"""


@pytest.mark.parametrize("n", [0, 3, 40, 123])
def test_batched_divergent_loop_keeps_last_iteration_values(batch_spy, n):
    m = parse_ptx(DIVERGENT_BODY, "div_loop.ptx")
    fast = count_launch(m, "div_loop", 3, 40, {"n": n})
    ref = interpret(m, "div_loop", 3, 40, {"n": n})
    if n >= 40:
        assert any(batch_spy)
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
        ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
