"""model -> PTX -> counts for one (model, input size, batch size) and a list of CUDA archs, with artifacts."""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from src.zoo.func_cache import FuncCache
from src.zoo.kernel_cache import KernelCache, count_launches, split_cuda
from src.zoo.resolve import Built, build
from src.zoo.tvmgen import (
    TVM_TARGET_ARCH,
    Launch,
    arch_number,
    compile_cuda,
    ptx_arch_for,
    source_digest,
)

# Bump when a change alters counts (schedules, lowering, counting): cached rows of another version are redone.
ZOO_VERSION = "2"
# `schedule_variant` of a result compiled with channel-gate broadcasts materialised (src/zoo/gates.py).
MATERIALISED_GATES = "materialised_gates"
# Scheduled and lowered PrimFuncs live beside the kernels, under the kernel cache root (src/zoo/func_cache.py).
FUNCS_DIR = "tvm"


def ptx_features(source: str, name: str, input_size: int | None, batch: int, archs: list[str],
                 workdir: Path | None = None, built: Built | None = None,
                 nvcc_archs: list[str] | None = None, build_seconds: float = 0.0,
                 kernel_cache: Path | None = None, materialise_gates: bool = False) -> dict[str, Any]:
    """Build, compile (TVM default GPU schedules), nvcc and count every launch through the kernel cache.

    Returns {"by_arch": {arch: counts with `per_kernel`}, "seconds": wall time model -> counts, ...}.
    PTX is compiled once per distinct nvcc arch: by default each requested arch itself (below sm_75, which
    nvcc 13 lacks, sm_75); with `nvcc_archs`, only those, each requested arch taking the highest listed one
    not above it (else the lowest). The arch actually compiled is reported as `ptx_arch`. Kernels already in
    `kernel_cache` (default `<workdir>/kernels`, else a temporary folder) are neither compiled nor counted again
    (src/zoo/kernel_cache.py), and PrimFuncs already there are neither scheduled nor lowered (func_cache.py).
    materialise_gates: compile the variant that does not recompute squeeze-excite gates (src/zoo/gates.py); the
    result then says `schedule_variant` "materialised_gates" and how many gates (`gates_materialised`).
    """
    pick = {a: choose_nvcc_arch(a, nvcc_archs) for a in archs}
    if batch < 1:
        raise ValueError(f"batch size must be >= 1, got {batch}")
    t0 = time.perf_counter() - build_seconds  # a model built by the caller counts with its build time
    if built is None:
        built = build(source, name, input_size)
    stage = {"build": time.perf_counter() - t0}
    with tempfile.TemporaryDirectory(prefix="zoo_kernels_") as tmp:
        root = kernel_cache or (workdir / "kernels" if workdir is not None else Path(tmp))
        compiled = compile_cuda(built, batch, func_cache=FuncCache(root / FUNCS_DIR),
                                materialise_gates=materialise_gates)
        stage.update(compiled.seconds)
        by_ptx_arch, cache_stats = count_through_cache(KernelCache(root), compiled.cuda_source, compiled.launches,
                                                       sorted(set(pick.values()), key=arch_number), stage)
        cache_stats.update(compiled.func_stats)
    seconds = time.perf_counter() - t0
    result = {
        "source": built.spec.source,
        "model": built.spec.name,
        "img_size": built.input_size,
        "batch_size": batch,
        "input_shape": list(compiled.input_shape),
        "tvm_target_arch": TVM_TARGET_ARCH,
        "cuda_sha256_16": source_digest(compiled.cuda_source),
        "zoo_version": ZOO_VERSION,
        "by_arch": {a: {**by_ptx_arch[pick[a]], "ptx_arch": pick[a]} for a in archs},
        "nvcc_archs": sorted(set(pick.values())),
        "non_kernel_calls": compiled.non_kernel_calls,
        "kernel_cache": cache_stats,
        "seconds": seconds,
        "stage_seconds": {k: round(v, 3) for k, v in stage.items()},
    }
    if materialise_gates:
        result["schedule_variant"] = MATERIALISED_GATES
        result["gates_materialised"] = compiled.gates_materialised
    if workdir is not None:
        write_artifacts(workdir, compiled.cuda_source, compiled.launches_json(), result)
    return result


def count_through_cache(cache: KernelCache, cuda_source: str, launches: list[Launch], ptx_archs: list[str],
                        stage: dict[str, float] | None = None, refresh: bool = False
                        ) -> tuple[dict[str, dict], dict[str, int]]:
    """Split the CUDA C into kernels, nvcc the new ones per PTX arch, count every launch (cached per kernel)."""
    stage = {} if stage is None else stage
    t = time.perf_counter()
    preamble, kernels = split_cuda(cuda_source)
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda a: cache.compile(preamble, kernels, a), ptx_archs))
    stage["nvcc"] = time.perf_counter() - t
    t = time.perf_counter()
    out = {pa: count_launches(cache, kernels, launches, pa, refresh=refresh) for pa in ptx_archs}
    stage["count"] = time.perf_counter() - t
    stats = {"distinct_kernels": len({k.digest for k in kernels}), **cache.stats}
    return out, stats


def choose_nvcc_arch(arch: str, nvcc_archs: list[str] | None) -> str:
    """The PTX arch that stands for `arch`: itself (exact), or the highest of nvcc_archs not above it."""
    if not nvcc_archs:
        return ptx_arch_for(arch)
    n = arch_number(arch)
    listed = sorted({ptx_arch_for(a) for a in nvcc_archs}, key=arch_number)
    below = [a for a in listed if arch_number(a) <= n]
    return below[-1] if below else listed[0]


def ptx_body_digest(ptx: str) -> str:
    """Digest of a PTX module without comments and its .version/.target header lines."""
    lines = [ln for ln in ptx.splitlines()
             if not ln.startswith(("//", ".version", ".target", ".address_size"))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def write_artifacts(workdir: Path, cuda: str, launches_json: str, result: dict) -> None:
    """The regenerable part of one model (CUDA C, launch list; its PTX lives in the kernel cache) and the result."""
    workdir.mkdir(parents=True, exist_ok=True)
    with gzip.open(workdir / "kernels.cu.gz", "wt") as f:
        f.write(cuda)
    (workdir / "launches.json").write_text(launches_json)
    write_result(workdir, result)


def read_artifacts(workdir: Path) -> tuple[str, list[Launch]]:
    """(CUDA C, launch list) written by write_artifacts."""
    with gzip.open(workdir / "kernels.cu.gz", "rt") as f:
        cuda = f.read()
    launches = [Launch(x["kernel"], tuple(x["grid"]), tuple(x["block"]), int(x["calls"]), x.get("params") or {})
                for x in json.loads((workdir / "launches.json").read_text())]
    return cuda, launches


def recount_artifacts(workdir: Path, result: dict, kernel_cache: Path) -> dict:
    """Recount a cached model from its CUDA C and launch list after an analyzer change: nvcc only for kernels
    missing from the cache, every launch counted afresh; no TVM."""
    cuda, launches = read_artifacts(workdir)
    t0 = time.perf_counter()
    ptx_archs = sorted({c["ptx_arch"] for c in result["by_arch"].values()}, key=arch_number)
    by_ptx, stats = count_through_cache(KernelCache(kernel_cache), cuda, launches, ptx_archs, refresh=True)
    result["by_arch"] = {a: {**by_ptx[c["ptx_arch"]], "ptx_arch": c["ptx_arch"]} for a, c in result["by_arch"].items()}
    result["kernel_cache"] = stats
    result["stage_seconds"]["recount"] = round(time.perf_counter() - t0, 3)
    return result


def repick_archs(workdir: Path, result: dict, archs: list[str], nvcc_archs: list[str] | None,
                 kernel_cache: Path) -> tuple[dict, bool]:
    """A cached result re-pointed to the PTX archs the current rule picks for `archs` (params ptx.nvcc_archs
    changed): PTX archs it lacks are compiled from the stored CUDA C and launch list, nvcc and counting only the
    kernels the cache lacks, no TVM. Returns (result, changed)."""
    pick = {a: choose_nvcc_arch(a, nvcc_archs) for a in archs}
    have = {c["ptx_arch"]: c for c in result["by_arch"].values()}
    if all(result["by_arch"].get(a, {}).get("ptx_arch") == pa for a, pa in pick.items()):
        return result, False
    missing = sorted(set(pick.values()) - set(have), key=arch_number)
    if missing:
        cuda, launches = read_artifacts(workdir)
        t0 = time.perf_counter()
        by_ptx, _stats = count_through_cache(KernelCache(kernel_cache), cuda, launches, missing)
        have.update(by_ptx)
        result["stage_seconds"]["repick_archs"] = round(time.perf_counter() - t0, 3)
    result["by_arch"] = {a: {**have[pa], "ptx_arch": pa} for a, pa in pick.items()}
    result["nvcc_archs"] = sorted(set(pick.values()), key=arch_number)
    return result, True


def write_result(workdir: Path, result: dict) -> None:
    """result.json (network counts per arch) and per_kernel.json (counts of every launch)."""
    slim = {**result, "by_arch": {a: {k: v for k, v in c.items() if k != "per_kernel"}
                                   for a, c in result["by_arch"].items()}}
    per_kernel = {a: c.get("per_kernel", []) for a, c in result["by_arch"].items()}
    (workdir / "per_kernel.json").write_text(json.dumps(per_kernel))
    (workdir / "result.json").write_text(json.dumps(slim, indent=1))
