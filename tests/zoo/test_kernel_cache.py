"""Each distinct kernel compiled and counted once across CNNs; per-kernel rows sum exactly to the network counts.

The TVM/nvcc cases need the zoo extra (torch, apache-tvm) and nvcc, and skip with the reason otherwise (CI has them).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest

from src.zoo.kernel_cache import operators, split_cuda
from src.zoo.kernel_table import kernel_frame, network_from_kernels
from src.zoo.tvmgen import PtxGenerationError

HAS_TVM = all(importlib.util.find_spec(m) is not None for m in ("torch", "tvm")) and (
    shutil.which("nvcc") is not None or Path("/usr/local/bin/nvcc").exists())
needs_tvm = pytest.mark.skipif(not HAS_TVM, reason="needs torch + apache-tvm (zoo extra) and nvcc")

SOURCE = """#include <cuda_fp16.h>
#define X 1
extern "C" __global__ void __launch_bounds__(64) fused_conv2d3_add_kernel(float* out_ptr, float* lv7_ptr);
extern "C" __global__ void __launch_bounds__(64) fused_conv2d3_add_kernel(float* out_ptr, float* lv7_ptr) {
  out_ptr[threadIdx.x] = lv7_ptr[threadIdx.x] + 1.0f;
}

extern "C" __global__ void __launch_bounds__(32) relu_kernel(float* __restrict__ T_ptr) {
  T_ptr[threadIdx.x] = max(T_ptr[threadIdx.x], 0.0f);
}
"""


def test_split_names_and_digest_ignore_kernel_and_argument_names():
    head, kernels = split_cuda(SOURCE)
    assert [k.name for k in kernels] == ["fused_conv2d3_add_kernel", "relu_kernel"]
    assert "#define X 1" in head and "__global__" not in head  # prototypes dropped, preamble kept
    renamed = SOURCE.replace("fused_conv2d3_add_kernel", "fused_conv2d9_add4_kernel").replace("lv7_ptr", "lv2_ptr")
    assert [k.digest for k in split_cuda(renamed)[1]] == [k.digest for k in kernels]
    # A different body, or the same body under another preamble, is another kernel.
    changed = SOURCE.replace("+ 1.0f", "+ 2.0f")
    assert split_cuda(changed)[1][0].digest != kernels[0].digest
    assert split_cuda(changed)[1][1].digest == kernels[1].digest
    assert split_cuda(SOURCE.replace("#define X 1", "#define X 2"))[1][1].digest != kernels[1].digest


def test_split_rejects_an_unterminated_kernel():
    with pytest.raises(PtxGenerationError, match="relu_kernel: no closing brace"):
        split_cuda(SOURCE.rstrip().removesuffix("}"))


@pytest.mark.parametrize("kernel, ops", [
    ("fused_conv2d1_add_relu_kernel", "conv2d+add+relu"),
    ("fused_batch_norm_relu_kernel", "batch_norm+relu"),
    ("fused_conv2d2_add1_kernel_1", "conv2d+add"),
    ("adaptive_avg_pool2d3_kernel", "adaptive_avg_pool2d"),
    ("fused_matmul_add2_kernel", "matmul+add"),
    ("reshape2_kernel", "reshape"),
    ("fused_conv2d_transpose1_add_kernel", "conv2d_transpose+add"),
])
def test_operators_from_tvm_names(kernel, ops):
    assert operators(kernel) == ops


def _launch(order, kernel, digest, calls, thread, fma, load):
    return {"order": order, "kernel": kernel, "kernel_digest": digest, "operators": operators(kernel),
            "grid": [4, 1, 1], "block": [64, 1, 1], "calls": calls, "thread_instructions": thread,
            "warp_instructions": thread // 32, "predicated_off": 0, "estimate": False,
            "by_class": {"fma": fma}, "bytes_by_space": {"load.global": load}}


def test_network_rows_are_per_call_counts_times_calls():
    per = [_launch(0, "fused_conv2d_add_kernel", "d1", 3, 6400, 4000, 100),
           _launch(1, "relu_kernel", "d2", 2, 640, 0, 0)]
    res = {"source": "torchvision", "model": "m", "batch_size": 1, "seconds": 2.0, "zoo_version": "2",
           "by_arch": {"sm_86": {"ptx_arch": "sm_75", "per_kernel": per},
                       "sm_89": {"ptx_arch": "sm_75", "per_kernel": per}}}
    k = kernel_frame("m", 224, res)
    assert len(k) == 2 and set(k["nvcc_arch"]) == {"sm_75"}  # one PTX arch, however many archs it stands for
    assert k.loc[0, "operators"] == "conv2d+add" and k.loc[0, "bytes_load_global"] == 100
    net = network_from_kernels(k.fillna(0)).iloc[0]
    assert net["thread_instructions"] == 3 * 6400 + 2 * 640
    assert net["class_fma"] == 12000 and net["bytes_load_global"] == 300
    assert net["launches"] == 5 and net["kernels"] == 2 and not net["estimate"]


def test_linear_rule_error_compares_batch_32_with_32_times_batch_1():
    from src.zoo.kernel_table import linear_rule_errors

    def frame(batch, per):
        res = {"source": "torchvision", "model": "m", "batch_size": batch, "seconds": 2.0, "zoo_version": "2",
               "by_arch": {"sm_86": {"ptx_arch": "sm_75", "per_kernel": per}}}
        return kernel_frame("m", 224, res)

    one = frame(1, [_launch(0, "fused_conv2d_add_kernel", "d1", 3, 6400, 4000, 100)])
    # at batch 32 the tiles fill up: 32 x 3 x 6400 = 614,400 thread instructions by the rule, 512,000 counted
    big = frame(32, [_launch(0, "fused_conv2d_add_kernel", "d3", 2, 256000, 128000, 3200)])
    other = frame(1, [_launch(0, "relu_kernel", "d2", 1, 640, 0, 0)]).assign(model_key="only_b1")
    err = linear_rule_errors(pd.concat([one, big, other], ignore_index=True).fillna(0), 32)
    assert len(err) == 1 and err.loc[0, "model_key"] == "m"  # a CNN without batch-32 rows has no error
    assert err.loc[0, "thread"] == pytest.approx(32 * 3 * 6400 / 512000 - 1)
    assert err.loc[0, "fma"] == pytest.approx(32 * 12000 / 256000 - 1)
    assert err.loc[0, "launches_ratio"] == pytest.approx(2 / 3)

def tiny_pair():
    """Two small CNNs sharing a stem (same conv, BN, ReLU, depthwise kernels), unlike heads (16 -> 10 / 100)."""
    import torch

    from src.zoo.names import ModelSpec
    from src.zoo.resolve import Built
    from tests.zoo.test_static import Tiny

    class TinyWide(Tiny):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(16, 100)

    def built(module, name):
        return Built(ModelSpec("torch", name, 32), 32, "torch", (1, 3, 32, 32), module=module.eval())

    return built(Tiny(), "tiny"), built(TinyWide(), "tiny_wide")


@pytest.fixture(scope="module")
def compiled_pair():
    from src.zoo.tvmgen import compile_cuda

    return tuple(compile_cuda(b, 1) for b in tiny_pair())


@needs_tvm
def test_per_kernel_counts_equal_whole_module_counts(compiled_pair, tmp_path):
    """Compiling each kernel alone (renamed) gives the counts of compiling the model's CUDA C whole."""
    from src.zoo.counts import count_network
    from src.zoo.kernel_cache import KernelCache, count_launches
    from src.zoo.tvmgen import cuda_to_ptx

    c = compiled_pair[0]
    head, kernels = split_cuda(c.cuda_source)
    cache = KernelCache(tmp_path)
    cache.compile(head, kernels, "sm_86")
    mine = count_launches(cache, kernels, c.launches, "sm_86")
    whole = count_network(cuda_to_ptx(c.cuda_source, "sm_86"), c.launches)
    for key in ("thread_instructions", "warp_instructions", "predicated_off", "by_class", "bytes_by_space",
                "kernels", "launches", "estimate"):
        assert mine[key] == whole[key], key
    assert len(mine["per_kernel"]) == len(c.launches)


@needs_tvm
def test_a_kernel_compiled_once_is_reused_by_another_cnn(compiled_pair, tmp_path):
    from src.zoo.kernel_cache import KernelCache
    from src.zoo.pipeline import count_through_cache

    tiny, wide = compiled_pair
    cache = KernelCache(tmp_path)
    first, _ = count_through_cache(cache, tiny.cuda_source, tiny.launches, ["sm_75"])
    compiled_first = cache.stats["nvcc_kernels"]
    second, stats = count_through_cache(cache, wide.cuda_source, wide.launches, ["sm_75"])
    shared = ({x["kernel_digest"] for x in first["sm_75"]["per_kernel"]}
              & {x["kernel_digest"] for x in second["sm_75"]["per_kernel"]})
    assert len(shared) >= 3  # conv + BN/ReLU + depthwise/pointwise kernels are the same code
    assert stats["nvcc_reused"] == len(shared)
    assert stats["nvcc_kernels"] - compiled_first == stats["distinct_kernels"] - len(shared)
    assert stats["counts_reused"] >= len(shared)  # same kernel, same grid/block: counted once
    ptx_files = list(tmp_path.glob("sm_75/ptx/*.ptx.gz"))
    assert len(ptx_files) == 2  # one nvcc run per model, the second with the new kernels only


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/bin/nvcc").exists(), reason="needs nvcc")
def test_a_huge_launch_is_counted_on_a_sample_and_recounted_under_another_budget(tmp_path, monkeypatch):
    """A guarded relu over 100,000 blocks of 32 threads (7 chunks) under a 3-chunk budget: sampled, flagged in
    the cache and the table row, reused under the same budget, recounted under another."""
    from src.ptx.driver import LANES_PER_CHUNK
    from src.zoo import kernel_cache as kc
    from src.zoo.tvmgen import Launch

    guarded = SOURCE.replace("T_ptr[threadIdx.x] = max(", "if (blockIdx.x * 32 + threadIdx.x < 3199000) "
                             "T_ptr[blockIdx.x * 32 + threadIdx.x] = max(")
    head, kernels = split_cuda(guarded)
    relu = next(k for k in kernels if k.name == "relu_kernel")
    cache = kc.KernelCache(tmp_path)
    cache.compile(head, kernels, "sm_75")
    launch = Launch("relu_kernel", (100_000, 1, 1), (32, 1, 1), 1)
    exact = cache.count("sm_75", relu.digest, launch)  # the default budget (2^25 threads) covers 3.2M threads
    assert "block_fraction" not in exact

    monkeypatch.setattr(kc, "COUNT_MAX_LANES", 3 * LANES_PER_CHUNK)
    sampled = cache.count("sm_75", relu.digest, launch, refresh=True)
    assert 0 < sampled["block_fraction"] < 1 and sampled["max_lanes"] == 3 * LANES_PER_CHUNK
    assert sampled["thread_instructions"] == exact["thread_instructions"]  # every block alike
    counted = cache.stats["counted"]
    assert cache.count("sm_75", relu.digest, launch) == sampled and cache.stats["counted"] == counted
    monkeypatch.setattr(kc, "COUNT_MAX_LANES", 4 * LANES_PER_CHUNK)
    assert cache.count("sm_75", relu.digest, launch)["max_lanes"] == 4 * LANES_PER_CHUNK
    assert cache.stats["counted"] == counted + 1

    rows = kernel_frame("m", 32, {"model": "m", "source": "torch", "batch_size": 1, "seconds": 1.0,
                                  "zoo_version": "2", "by_arch": {"sm_75": {"ptx_arch": "sm_75", "per_kernel": [
                                      {"order": 0, "kernel": "relu_kernel", "kernel_digest": relu.digest,
                                       "operators": "relu", "grid": [100_000, 1, 1], "block": [32, 1, 1],
                                       "calls": 1, **sampled}]}}})
    assert rows["block_fraction"].iloc[0] == sampled["block_fraction"]
