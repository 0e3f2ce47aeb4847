"""The reference interpreter really executes the kernels: outputs in simulated memory are checked."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from src.ptx.interp import Interpreter, Memory

from .conftest import O3, PTX_FILES, load

A, B, C = 0x1000_0000, 0x2000_0000, 0x3000_0000


def put_f32(mem: Memory, addr: int, values) -> None:
    for i, v in enumerate(values):
        mem.write(addr + 4 * i, 4, struct.unpack("<I", struct.pack("<f", float(v)))[0])


def get_f32(mem: Memory, addr: int, n: int) -> np.ndarray:
    return np.array([struct.unpack("<f", struct.pack("<I", mem.read(addr + 4 * i, 4)))[0] for i in range(n)],
                    dtype=np.float32)


def put_i32(mem: Memory, addr: int, values) -> None:
    for i, v in enumerate(values):
        mem.write(addr + 4 * i, 4, int(v) & 0xFFFFFFFF)


def get_i32(mem: Memory, addr: int, n: int) -> np.ndarray:
    return np.array([mem.read(addr + 4 * i, 4) for i in range(n)], dtype=np.uint32).view(np.int32)


DEBUG_AND_OPT = [O3, O3.with_name("kernels_sm_86_G.ptx"), O3.with_name("kernels_sm_80_O0.ptx")]


@pytest.mark.parametrize("path", DEBUG_AND_OPT, ids=lambda p: p.name)
def test_vector_add_writes_sums_only_in_bounds(path):
    m = load(path)
    rng = np.random.default_rng(0)
    n = 150
    a, b = rng.normal(size=n + 10).astype(np.float32), rng.normal(size=n + 10).astype(np.float32)
    mem = Memory()
    put_f32(mem, A, a)
    put_f32(mem, B, b)
    put_f32(mem, C, np.full(n + 10, 7.0))
    Interpreter(m, "vector_add").run(2, 96, [A, B, C, n], memory=mem)
    out = get_f32(mem, C, n + 10)
    np.testing.assert_array_equal(out[:n], (a + b)[:n])
    np.testing.assert_array_equal(out[n:], 7.0)


@pytest.mark.parametrize("path", DEBUG_AND_OPT, ids=lambda p: p.name)
def test_shared_memory_tree_reduction_sums_each_block(path):
    m = load(path)
    x = np.arange(300, dtype=np.float32) % 17
    mem = Memory()
    put_f32(mem, A, x)
    Interpreter(m, "reduce_shared").run(3, 128, [A, B, 300], memory=mem)
    sums = get_f32(mem, B, 3)
    np.testing.assert_allclose(sums, [x[:128].sum(), x[128:256].sum(), x[256:].sum()])


@pytest.mark.parametrize("path", DEBUG_AND_OPT, ids=lambda p: p.name)
def test_warp_shuffle_reduction_and_atomics(path):
    m = load(path)
    x = (np.arange(200, dtype=np.float32) % 5) - 2
    mem = Memory()
    put_f32(mem, A, x)
    put_f32(mem, B, [0.0])
    Interpreter(m, "warp_reduce").run(3, 96, [A, B, 200], memory=mem)
    assert get_f32(mem, B, 1)[0] == pytest.approx(float(x.sum()))


def test_tiled_matmul_matches_numpy():
    m = load(O3)
    M, N, K = 20, 18, 33
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, size=(M, K)).astype(np.float32)
    b = rng.integers(-3, 4, size=(K, N)).astype(np.float32)
    mem = Memory()
    put_f32(mem, A, a.ravel())
    put_f32(mem, B, b.ravel())
    Interpreter(m, "matmul_tiled").run((2, 2), (16, 16), [A, B, C, M, N, K], memory=mem)
    np.testing.assert_array_equal(get_f32(mem, C, M * N).reshape(M, N), a @ b)


def test_direct_convolution_matches_numpy():
    m = load(O3)
    Cc, H, W, Kk, R, pad = 2, 5, 6, 3, 3, 1
    rng = np.random.default_rng(2)
    x = rng.integers(-2, 3, size=(Cc, H, W)).astype(np.float32)
    w = rng.integers(-2, 3, size=(Kk, Cc, R, R)).astype(np.float32)
    mem = Memory()
    put_f32(mem, A, x.ravel())
    put_f32(mem, B, w.ravel())
    Interpreter(m, "conv2d_direct").run(2, 64, [A, B, C, Cc, H, W, Kk, R, pad], memory=mem)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros((Kk, H, W), np.float32)
    for k in range(Kk):
        for y in range(H):
            for xx in range(W):
                ref[k, y, xx] = (xp[:, y:y + R, xx:xx + R] * w[k]).sum()
    np.testing.assert_array_equal(get_f32(mem, C, Kk * H * W).reshape(Kk, H, W), np.maximum(ref, 0))


def test_early_return_and_integer_semantics():
    m = load(O3)
    n, limit = 100, 40
    inp = np.arange(n, dtype=np.int32) * 2
    mem = Memory()
    put_i32(mem, A, inp)
    put_i32(mem, B, np.full(n, -5))
    Interpreter(m, "early_return").run(1, 128, [A, B, n, limit], memory=mem)
    out = get_i32(mem, B, n)
    for i in range(n):
        v, expect = i * 3, None
        if i % 3 != 0:
            for k in range(limit):
                if v > 1000 + k:
                    break
                v += k
            else:
                expect = v + inp[i]
        assert out[i] == (expect if expect is not None else -5), i


@pytest.mark.parametrize("path", PTX_FILES, ids=lambda p: p.name)
def test_stencil_boundaries(path):
    m = load(path)
    w, h = 7, 5
    x = np.arange(w * h, dtype=np.float32).reshape(h, w) ** 1.5
    mem = Memory()
    put_f32(mem, A, x.ravel())
    Interpreter(m, "stencil2d").run((1, 1), (8, 8), [A, B, w, h], memory=mem)
    xp = np.pad(x, 1, mode="edge")
    ref = 4 * x - xp[1:-1, :-2] - xp[1:-1, 2:] - xp[:-2, 1:-1] - xp[2:, 1:-1]
    np.testing.assert_allclose(get_f32(mem, B, w * h).reshape(h, w), ref, rtol=1e-5)
