"""PrimFuncs scheduled and lowered once across CNNs: a cached PrimFunc gives the same launches and counts.

The TVM/nvcc cases need the zoo extra (torch, apache-tvm) and nvcc, and skip with the reason otherwise (CI has them).
"""

from __future__ import annotations

import pytest

from src.zoo.func_cache import FuncCache, FuncKernel, FuncRecord, assemble, superset_preamble
from src.zoo.kernel_cache import split_cuda
from tests.zoo.test_kernel_cache import needs_tvm, tiny_pair

BASE = "#include <cstdint>\n#define uint unsigned int\n"
SHFL = "#define __shfl_sync(mask, var, lane, width) __shfl((var), (lane), (width))\n"
FP16 = "#include <cuda_fp16.h>\n"


def test_superset_preamble_is_the_one_containing_every_other():
    assert superset_preamble([BASE, BASE + SHFL, BASE]) == BASE + SHFL
    assert superset_preamble([BASE]) == BASE
    # Neither holds the other's block: a whole module would have both, which no record has.
    assert superset_preamble([BASE + SHFL, BASE + FP16]) is None
    assert superset_preamble([]) is None


def test_assemble_names_each_kernel_after_its_primfunc_and_splits_back():
    body = ('extern "C" __global__ void __launch_bounds__(32) cnnperf_kernel(float* __restrict__ cnnperf_p0) {\n'
            "  cnnperf_p0[threadIdx.x] = 0.0f;\n}")
    rec = FuncRecord(BASE, (FuncKernel("_kernel", body, (2, 1, 1), (32, 1, 1)),
                            FuncKernel("_kernel_1", body.replace("0.0f", "1.0f"), (1, 1, 1), (32, 1, 1))))
    source = assemble(BASE, [("fused_add3", rec), ("relu", FuncRecord(BASE, rec.kernels[:1]))])
    head, kernels = split_cuda(source)
    assert head.strip() == BASE.strip()
    assert [k.name for k in kernels] == ["fused_add3_kernel", "fused_add3_kernel_1", "relu_kernel"]
    # Same text under another name: the same digest, so nvcc and counting run once.
    assert kernels[0].digest == kernels[2].digest != kernels[1].digest


def test_records_round_trip_through_disk(tmp_path):
    cache = FuncCache(tmp_path)
    rec = FuncRecord(BASE, (FuncKernel("_kernel", "text", (4, 2, 1), (64, 1, 1)),))
    assert cache.get("ab" * 12) is None
    cache.put("ab" * 12, rec)
    assert FuncCache(tmp_path).get("ab" * 12) == rec
    # a function scheduled without some rules keeps saying so
    partial = FuncRecord(BASE, rec.kernels, ("gemv", "reduction"))
    cache.put("cd" * 12, partial)
    assert FuncCache(tmp_path).get("cd" * 12) == partial != rec


@pytest.fixture(scope="module")
def tiny_models():
    return tiny_pair()


def _launches(compiled):
    return [(x.kernel, x.grid, x.block, x.calls) for x in compiled.launches]


@needs_tvm
def test_func_key_ignores_names_but_not_structure_or_target(tiny_models):
    import tvm

    from src.zoo.func_cache import func_key
    from src.zoo.tvmgen import _zero_pipeline

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_86"})
    mods = [_zero_pipeline(b, 1, target, {})[0] for b in tiny_models]
    keys = [{func_key(f, "sm_86") for f in m.functions.values() if isinstance(f, tvm.tirx.PrimFunc)}
            for m in mods]
    shared, only_wide = keys[0] & keys[1], keys[1] - keys[0]
    assert shared and only_wide  # the stem recurs, the wider head does not
    f = next(f for f in mods[0].functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    assert func_key(f, "sm_86") != func_key(f, "sm_80")


@needs_tvm
def test_cached_primfuncs_give_the_launches_and_counts_of_a_full_compile(tiny_models, tmp_path):
    from src.zoo.kernel_cache import KernelCache, count_launches
    from src.zoo.tvmgen import compile_cuda

    tiny, wide = tiny_models
    cache = FuncCache(tmp_path / "tvm")
    cold = compile_cuda(tiny, 1, func_cache=cache)
    assert cold.func_stats["tvm_funcs_reused"] == 0 and cold.func_stats["tvm_funcs"] > 0
    warm = compile_cuda(wide, 1, func_cache=cache)
    assert 0 < warm.func_stats["tvm_funcs_reused"] < warm.func_stats["tvm_funcs"]
    again = compile_cuda(wide, 1, func_cache=cache)
    assert again.func_stats["tvm_funcs_reused"] == again.func_stats["tvm_funcs"]
    assert again.cuda_source == warm.cuda_source and "schedule" in again.seconds

    full_tiny, full_wide = compile_cuda(tiny, 1), compile_cuda(wide, 1)
    # From an empty cache the kernels are TVM's own, digest for digest.
    def digests(c):
        return {k.name: k.digest for k in split_cuda(c.cuda_source)[1]}

    assert digests(cold) == digests(full_tiny)
    kernels = KernelCache(tmp_path / "kernels")
    for full, cached in ((full_tiny, cold), (full_wide, warm)):
        assert _launches(cached) == _launches(full)
        counts = []
        for c in (full, cached):
            head, ks = split_cuda(c.cuda_source)
            kernels.compile(head, ks, "sm_75")
            counts.append([{k: v for k, v in x.items() if k != "kernel_digest"}
                           for x in count_launches(kernels, ks, c.launches, "sm_75")["per_kernel"]])
        assert counts[0] == counts[1]


@needs_tvm
def test_device_codegen_alone_gives_the_full_build_source(tiny_models):
    """lower_prims code-generates only the device module: the same CUDA C as TVM's full (host + device) build."""
    import tvm
    from tvm import relax
    from tvm.tirx.build import split_host_device_mods, tir_to_runtime

    from src.zoo.schedule import schedule_func
    from src.zoo.tvmgen import _zero_pipeline, lower_prims

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_86"})
    mod, _ = _zero_pipeline(tiny_models[0], 1, target, {})
    for gv, f in list(mod.functions.items()):
        if isinstance(f, tvm.tirx.PrimFunc):
            mod[gv] = schedule_func(f, target).func
    mod = relax.transform.AttachGlobalSymbol()(mod)
    prims = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    source, geometry = lower_prims(prims, target)
    host_target = tvm.target.Target("llvm")
    tir_mod = tvm.tirx.transform.BindTarget(target.with_host(host_target))(tvm.IRModule(prims))
    pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    with tvm.transform.PassContext(opt_level=3):
        lowered = pipeline(tir_mod)
    host_mod, device_mods = split_host_device_mods(lowered)
    device_mods = {t: finalize_device()(m) for t, m in device_mods.items()}
    runtime = tir_to_runtime(finalize_host()(host_mod), device_mods, host_target)
    full = next(m for m in runtime.imports if m.kind == "cuda").inspect_source()
    assert source == full and len(geometry) >= 3
