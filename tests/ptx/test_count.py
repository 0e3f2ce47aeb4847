"""count.py: launch arguments are checked before any work (parameter values against their PTX types, a parameter
given twice, CUDA's grid and block limits) instead of being wrapped, truncated or run for minutes."""

from __future__ import annotations

import math
import time

import pytest

from src.ptx import AnalysisError, count_launch
from src.ptx.count import check_param_value

EXPECTED = 11 * 1024 + 11 * 1000  # vector_add, grid 4 x 256, n = 1000


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (4294968296, "4294968296 is out of range [-2147483648, 4294967295]"),  # used to wrap to 1000
        (99999999999, "out of range"),
        (-(2**31) - 1, "out of range"),
        (1.5, "1.5 is not an integer"),  # used to count as 1
        (1000.9, "1000.9 is not an integer"),  # used to count as 1000
        (math.nan, "nan is not an integer"),  # used to crash (ValueError in regvalues.read_as)
        (math.inf, "inf is not an integer"),  # used to crash (OverflowError)
        ("1000", "'1000' is not a number"),
    ],
)
def test_integer_parameter_value_must_fit_its_type(o3, value, fragment):
    with pytest.raises(AnalysisError) as ei:
        count_launch(o3, "vector_add", (4,), (256,), {3: value})
    assert "parameter vector_add_param_3 (.u32): " in str(ei.value) and fragment in str(ei.value)


def test_float_parameter_must_be_finite(o3):
    for bad in (math.nan, math.inf, -math.inf, 1e39):
        with pytest.raises(AnalysisError, match=r"parameter grid_stride_param_2 \(\.f32\): .* not a finite \.f32"):
            count_launch(o3, "grid_stride", (2,), (64,), {2: bad, 3: 100})


def test_check_param_value_ranges_per_type(o3):
    for value in (1000, 1000.0):  # an integral float means that integer
        assert count_launch(o3, "vector_add", (4,), (256,), {3: value}).thread_instructions == EXPECTED
    assert count_launch(o3, "vector_add", (4,), (256,), [None, None, None, 1000]).thread_instructions == EXPECTED
    # nvcc declares C's `int n` as .u32: -1 is that int's bit pattern (no thread passes i < n)
    assert count_launch(o3, "vector_add", (4,), (256,), {3: -1}).thread_instructions == 11 * 1024
    with pytest.raises(AnalysisError, match=r"parameter vector_add_param_3 \(\.u32\): 1\.5 is not an integer"):
        count_launch(o3, "vector_add", (4,), (256,), [None, None, None, 1.5])
    assert check_param_value("p", ".s32", -(2**31)) == -(2**31)
    with pytest.raises(AnalysisError, match=r"parameter p \(\.s32\): 2147483648 is out of range"):
        check_param_value("p", ".s32", 2**31)
    assert check_param_value("p", ".u64", 2**64 - 1) == 2**64 - 1
    with pytest.raises(AnalysisError, match=r"\(\.u64\)"):
        check_param_value("p", ".u64", 2**64)
    with pytest.raises(AnalysisError, match=r"\(\.u8\)"):
        check_param_value("p", ".u8", 256)
    assert check_param_value("p", ".f64", 1e300) == 1e300
    with pytest.raises(AnalysisError, match=r"\(\.f16\)"):
        check_param_value("p", ".f16", 70000.0)
    assert check_param_value("p", ".b8[16]", b"x") == b"x"  # byval arrays are not scalars


def test_parameter_given_twice_by_index_and_name(o3):
    with pytest.raises(AnalysisError, match="parameter vector_add_param_3 given twice"):
        count_launch(o3, "vector_add", (4,), (256,), {3: 1000, "vector_add_param_3": 5})


@pytest.mark.parametrize(
    ("grid", "block", "fragment"),
    [
        ((1, 70000), (32,), "grid y dimension 70000 exceeds CUDA's limit 65535"),
        ((1, 1, 100000), (32,), "grid z dimension 100000 exceeds CUDA's limit 65535"),
        ((2**31,), (256,), "grid x dimension 2147483648 exceeds CUDA's limit 2147483647"),  # used to hang
        ((1,), (1, 1, 65), "block z dimension 65 exceeds CUDA's limit 64"),
        ((1,), (2048,), "block x dimension 2048 exceeds CUDA's limit 1024"),
    ],
)
def test_launch_limits_are_checked_before_any_work(o3, grid, block, fragment):
    t0 = time.perf_counter()
    with pytest.raises(AnalysisError, match=fragment):
        count_launch(o3, "vector_add", grid, block, {3: 1000})
    assert time.perf_counter() - t0 < 5


def test_launch_at_the_limits_is_accepted_one_beyond_is_not(o3):
    r = count_launch(o3, "vector_add", (1, 65535, 2), (32, 1, 1), {3: 16})
    assert r.grid == (1, 65535, 2) and r.thread_instructions == (11 * 32 + 11 * 16) * 65535 * 2
    with pytest.raises(AnalysisError, match="grid y dimension 65536"):
        count_launch(o3, "vector_add", (1, 65536, 2), (32, 1, 1), {3: 16})
