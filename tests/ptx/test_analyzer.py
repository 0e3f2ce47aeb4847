"""Fast analyzer == reference interpreter, closed forms, data-dependent branch policies, properties."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from src.ptx import AnalysisError, UnresolvedBranchError, count_launch, interpret
from src.ptx.isa import CLASSES

from .conftest import O3, PTX_FILES, load, named

# kernel -> launches (grid, block, params by index); pointers are left out on purpose
LAUNCHES = {
    "vector_add": [((3,), (100,), {3: 250}), ((2,), (64,), {3: 1000}), ((1,), (40,), {3: 0})],
    "grid_stride": [((3,), (64,), {2: 1.5, 3: 1000}), ((2,), (96,), {2: -1.0, 3: 7})],
    "nested_const": [((2,), (48,), {})],
    "nested_param": [((2,), (64,), {1: 3, 2: 4}), ((1,), (32,), {1: 0, 2: 5}), ((1,), (33,), {1: 2, 2: -1})],
    "triangle": [((2,), (64,), {1: 5}), ((1,), (50,), {1: 2})],
    "stencil2d": [((3, 2), (8, 8), {2: 20, 3: 13}), ((1, 2), (4, 8, 1), {2: 3, 3: 9})],
    "reduce_shared": [((3,), (128,), {2: 300}), ((2,), (64,), {2: 64})],
    "warp_reduce": [((3,), (96,), {2: 200}), ((1,), (40,), {2: 17})],
    "early_return": [((3,), (128,), {2: 300, 3: 400}), ((2,), (64,), {2: 100, 3: 3})],
    "matmul_tiled": [((2, 2), (16, 16), {3: 20, 4: 30, 5: 17})],
    "conv2d_direct": [((3,), (64,), {3: 2, 4: 6, 5: 7, 6: 4, 7: 3, 8: 1}),
                      ((2,), (64,), {3: 1, 4: 5, 5: 5, 6: 3, 7: 1, 8: 0})],
    "mixed_math": [((2,), (64,), {3: 100})],
}


def _both(module, kernel, grid, block, values, **kw):
    params = named(module, kernel, values)
    fast = count_launch(module, kernel, grid, block, params, **kw)
    ref = interpret(module, kernel, grid, block, params)
    return fast, ref


def _nonzero(d):
    return {k: v for k, v in sorted(d.items()) if v}


def _same(fast, ref):
    got = (fast.thread_instructions, fast.warp_instructions, fast.predicated_off, _nonzero(fast.by_class),
           _nonzero(fast.bytes_by_space))
    want = (ref.thread_instructions, ref.warp_instructions, ref.predicated_off,
            dict(sorted(ref.by_class.items())), dict(sorted(ref.bytes_by_space.items())))
    assert got == want


CASES = [(p, k, i) for p in PTX_FILES for k, ls in LAUNCHES.items() for i in range(len(ls))]


@pytest.mark.parametrize(("path", "kernel", "i"), CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_fast_analyzer_equals_interpreter(path, kernel, i):
    m = load(path)
    grid, block, values = LAUNCHES[kernel][i]
    fast, ref = _both(m, kernel, grid, block, values)
    assert not fast.estimate and fast.unresolved_branches == []
    assert list(fast.by_class) == list(CLASSES)
    _same(fast, ref)


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 255, 256, 700, 767, 768, 5000])
@pytest.mark.parametrize(("grid", "block"), [(3, 256), (4, 100), (1, 1), (7, 33)])
def test_vector_add_closed_form(o3, n, grid, block):
    # nvcc -O3 vector_add: 10 instructions up to the bounds check, 11 in the body, 1 ret (see the fixture)
    r = count_launch(o3, "vector_add", grid, block, {3: n})
    total = grid * block
    inside = min(n, total)
    assert r.thread_instructions == 11 * total + 11 * inside
    warps = grid * math.ceil(block / 32)
    warps_inside = sum(1 for b in range(grid) for w in range(math.ceil(block / 32))
                       if b * block + 32 * w < n)
    assert r.warp_instructions == 11 * warps + 11 * warps_inside
    assert r.bytes_by_space["load.global"] == 8 * inside and r.bytes_by_space["store.global"] == 4 * inside
    assert r.by_class["load.param"] == 4 * total and r.predicated_off == 0


@pytest.mark.parametrize(("grid", "block", "n"), [(3, 64, 1000), (10, 256, 10**6), (1000, 128, 12345), (2, 32, 5)])
def test_grid_stride_closed_form(o3, grid, block, n):
    # entry 10, loop preheader 4, loop body 10 per trip, ret 1
    stride = grid * block
    expect = 0
    for i in range(min(stride, n)):
        expect += 4 + 10 * math.ceil((n - i) / stride)
    expect += 11 * stride
    r = count_launch(o3, "grid_stride", grid, block, {3: n})
    assert r.thread_instructions == expect


def test_nested_constant_loops_give_a_constant_per_thread(o3):
    one = count_launch(o3, "nested_const", 1, 1).thread_instructions
    assert count_launch(o3, "nested_const", 5000, 256).thread_instructions == 5000 * 256 * one


def test_uniform_loop_cost_is_linear_in_the_outer_trip_count(o3):
    # nested loops with parameter trip counts: for m >= 1, count(m, k) = count(1, k) + (m - 1) * step(k)
    def per_thread(m, k):
        return count_launch(o3, "nested_param", 1, 1, {1: m, 2: k}).thread_instructions
    for k in (1, 5, 40):
        step = per_thread(2, k) - per_thread(1, k)
        assert step > 0
        for m in (3, 17, 40):
            assert per_thread(m, k) == per_thread(1, k) + (m - 1) * step
    assert per_thread(3, 5) == interpret(o3, "nested_param", 1, 1, named(o3, "nested_param", {1: 3, 2: 5})
                                         ).thread_instructions
    big = count_launch(o3, "nested_param", 1000, 256, {1: 300, 2: 300})
    assert big.thread_instructions == 1000 * 256 * per_thread(300, 300)


def test_data_dependent_branch_is_never_guessed(o3):
    with pytest.raises(UnresolvedBranchError) as ei:
        count_launch(o3, "data_branch", 4, 256, {2: 1000})
    assert len(ei.value.branches) == 1 and "ld.global.f32" in ei.value.branches[0]
    assert ei.value.branches[0].startswith("line ")


@pytest.mark.parametrize("path", [O3, O3.with_name("kernels_sm_86_G.ptx")], ids=lambda p: p.name)
def test_bounds_policy_brackets_every_data_outcome(path):
    m = load(path)
    params = named(m, "data_branch", {2: 700})
    r = count_launch(m, "data_branch", 3, 256, params, policy="bounds")
    assert r.estimate and len(r.unresolved_branches) >= 1
    lo, hi = r.bounds["lower"], r.bounds["upper"]
    assert lo["thread_instructions"] < hi["thread_instructions"]
    rng = random.Random(5)
    fills = [lambda a: 0, lambda a: 0x3F if a % 4 == 3 else 0, lambda a: rng.randrange(256)]
    for fill in fills:
        ref = interpret(m, "data_branch", 3, 256, params, fill=fill)
        for k in ("thread_instructions", "warp_instructions", "predicated_off"):
            assert lo[k] <= getattr(ref, k) <= hi[k], k
    taken = count_launch(m, "data_branch", 3, 256, params, policy="taken")
    not_taken = count_launch(m, "data_branch", 3, 256, params, policy="not_taken")
    half = count_launch(m, "data_branch", 3, 256, params, policy="probability:0.5")
    assert {taken.thread_instructions, not_taken.thread_instructions} == {lo["thread_instructions"],
                                                                          hi["thread_instructions"]}
    assert lo["thread_instructions"] < half.thread_instructions < hi["thread_instructions"]
    assert half.estimate and half.unresolved_branches == r.unresolved_branches


def test_missing_scalar_parameter_is_an_unresolved_branch(o3):
    with pytest.raises(UnresolvedBranchError, match="parameter vector_add_param_3 not given"):
        count_launch(o3, "vector_add", 2, 64)


def test_bad_arguments_are_named(o3):
    with pytest.raises(AnalysisError, match="unknown parameter"):
        count_launch(o3, "vector_add", 2, 64, {"n": 3})
    with pytest.raises(AnalysisError, match="unknown policy"):
        count_launch(o3, "vector_add", 2, 64, {3: 3}, policy="maybe")
    with pytest.raises(AnalysisError, match="1024"):
        count_launch(o3, "vector_add", 2, (64, 32), {3: 3})
    with pytest.raises(KeyError, match="not_a_kernel"):
        count_launch(o3, "not_a_kernel", 1, 1)


def test_positional_and_indexed_parameters_agree(o3):
    a = count_launch(o3, "conv2d_direct", 5, 64, [None, None, None, 3, 8, 8, 4, 3, 1])
    b = count_launch(o3, "conv2d_direct", 5, 64, {3: 3, 4: 8, 5: 8, 6: 4, 7: 3, 8: 1})
    assert a.thread_instructions == b.thread_instructions and a.to_dict()["grid"] == [5, 1, 1]


_RANDOM_KERNELS = {
    "vector_add": lambda d: {3: d.draw(st.integers(-5, 3000))},
    "grid_stride": lambda d: {2: 1.0, 3: d.draw(st.integers(-5, 3000))},
    "triangle": lambda d: {1: d.draw(st.integers(0, 4))},
    "stencil2d": lambda d: {2: d.draw(st.integers(1, 40)), 3: d.draw(st.integers(1, 40))},
    "early_return": lambda d: {2: d.draw(st.integers(0, 500)), 3: d.draw(st.integers(0, 300))},
    "reduce_shared": lambda d: {2: d.draw(st.integers(0, 600))},
    "conv2d_direct": lambda d: {3: d.draw(st.integers(1, 2)), 4: d.draw(st.integers(1, 6)),
                                5: d.draw(st.integers(1, 6)), 6: d.draw(st.integers(1, 3)),
                                7: d.draw(st.integers(1, 3)), 8: d.draw(st.integers(0, 1))},
}


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_launches_agree_with_interpreter(data):
    path = data.draw(st.sampled_from([O3, O3.with_name("kernels_sm_80_O0.ptx"), O3.with_name("kernels_sm_86_G.ptx")]))
    kernel = data.draw(st.sampled_from(sorted(_RANDOM_KERNELS)))
    m = load(path)
    values = _RANDOM_KERNELS[kernel](data)
    if kernel == "stencil2d":
        grid = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
        block = (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 8)))
    elif kernel == "reduce_shared":  # the tree reduction assumes a power-of-two block
        grid, block = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([32, 64, 128]))
    else:
        grid, block = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 160))
    fast, ref = _both(m, kernel, grid, block, values)
    _same(fast, ref)


def test_launch_bounds_of_the_kernel_are_enforced():
    from src.ptx import parse_ptx
    text = (".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() .maxntid 128, 1, 1\n{\n ret;\n}\n"
            ".visible .entry r() .reqntid 64, 2\n{\n ret;\n}\n")
    m = parse_ptx(text)
    assert count_launch(m, "k", 1, 128).thread_instructions == 128
    with pytest.raises(AnalysisError, match="maxntid"):
        count_launch(m, "k", 1, 256)
    assert count_launch(m, "r", 3, (64, 2)).thread_instructions == 3 * 128
    with pytest.raises(AnalysisError, match="reqntid"):
        count_launch(m, "r", 3, 128)


@pytest.fixture
def compact_forms_everywhere(monkeypatch):
    """Force the compact block x thread forms (Aff, CMask) even on the small launches the interpreter can run."""
    from src.ptx import lazy
    monkeypatch.setattr(lazy, "MIN_LANES", 1)


COMPACT_CASES = [(p, k, i) for p in (O3, O3.with_name("kernels_sm_86_G.ptx"), O3.with_name("kernels_sm_80_O0.ptx"))
                 for k, ls in LAUNCHES.items() for i in range(len(ls))]


@pytest.mark.parametrize(("path", "kernel", "i"), COMPACT_CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_compact_block_forms_equal_interpreter(compact_forms_everywhere, path, kernel, i):
    m = load(path)
    grid, block, values = LAUNCHES[kernel][i]
    fast, ref = _both(m, kernel, grid, block, values)
    _same(fast, ref)


def test_compact_forms_are_used_and_agree_with_plain_arrays(o3, monkeypatch):
    from src.ptx import lazy
    created = []
    real = lazy.cmask_threshold

    def spy(*a):
        created.append(1)
        return real(*a)
    monkeypatch.setattr(lazy, "cmask_threshold", spy)
    launches = [("vector_add", 5000, 256, {3: 5000 * 256 - 1000}), ("stencil2d", (40, 30), (16, 16), {2: 630, 3: 470}),
                ("matmul_tiled", (20, 20), (16, 16), {3: 310, 4: 300, 5: 70}),
                ("early_return", 3000, 256, {2: 3000 * 256 - 77, 3: 50})]
    compact = [count_launch(o3, k, g, b, p) for k, g, b, p in launches]
    assert created, "the compact forms were not exercised"
    monkeypatch.setattr(lazy, "MIN_LANES", 1 << 62)
    plain = [count_launch(o3, k, g, b, p) for k, g, b, p in launches]
    for c, p in zip(compact, plain, strict=True):
        assert (c.thread_instructions, c.warp_instructions, c.predicated_off, c.by_class) == (
            p.thread_instructions, p.warp_instructions, p.predicated_off, p.by_class)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_random_launches_with_compact_forms(data):
    from src.ptx import lazy
    old = lazy.MIN_LANES
    lazy.MIN_LANES = 1
    try:
        test_random_launches_agree_with_interpreter.hypothesis.inner_test(data)
    finally:
        lazy.MIN_LANES = old
