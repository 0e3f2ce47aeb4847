"""model -> PTX -> counts for one (model, input size, batch size) and a list of CUDA archs, with artifacts."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from src.zoo.counts import count_network
from src.zoo.resolve import Built, build
from src.zoo.tvmgen import (
    TVM_TARGET_ARCH,
    arch_number,
    compile_cuda,
    cuda_to_ptx,
    ptx_arch_for,
    source_digest,
)

# Bump when a change alters counts (schedules, lowering, counting): cached rows of another version are redone.
ZOO_VERSION = "1"


def ptx_features(source: str, name: str, input_size: int | None, batch: int, archs: list[str],
                 workdir: Path | None = None, built: Built | None = None,
                 nvcc_archs: list[str] | None = None, build_seconds: float = 0.0) -> dict[str, Any]:
    """Build, compile (TVM default GPU schedules), nvcc per arch, count every launch; optional artifacts.

    Returns {"by_arch": {arch: counts}, "seconds": wall time model -> counts, "stage_seconds": {...}}.
    PTX is compiled once per distinct nvcc arch: by default each requested arch itself (below sm_75, which
    nvcc 13 lacks, sm_75); with `nvcc_archs`, only those, each requested arch taking the highest listed one
    not above it (else the lowest). The arch actually compiled is reported as `ptx_arch`.
    """
    pick = {a: choose_nvcc_arch(a, nvcc_archs) for a in archs}
    if batch < 1:
        raise ValueError(f"batch size must be >= 1, got {batch}")
    t0 = time.perf_counter() - build_seconds  # a model built by the caller counts with its build time
    if built is None:
        built = build(source, name, input_size)
    stage = {"build": time.perf_counter() - t0}
    compiled = compile_cuda(built, batch)
    stage.update(compiled.seconds)
    by_ptx_arch: dict[str, dict] = {}
    t = time.perf_counter()
    ptx_archs = sorted(set(pick.values()), key=lambda a: int(a[3:]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        ptx_text = dict(zip(ptx_archs, pool.map(lambda a: cuda_to_ptx(compiled.cuda_source, a), ptx_archs),
                            strict=True))
    stage["nvcc"] = time.perf_counter() - t
    t = time.perf_counter()
    by_body: dict[str, dict] = {}
    for pa in ptx_archs:
        # PTX for different archs is often identical but for its header: count each distinct body once.
        body = ptx_body_digest(ptx_text[pa])
        if body not in by_body:
            by_body[body] = count_network(ptx_text[pa], compiled.launches, source=f"{built.spec.name}:{pa}")
        by_ptx_arch[pa] = {**by_body[body], "ptx_body_sha256_16": body}
    stage["count"] = time.perf_counter() - t
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
        "seconds": seconds,
        "stage_seconds": {k: round(v, 3) for k, v in stage.items()},
    }
    if workdir is not None:
        write_artifacts(workdir, compiled.cuda_source, compiled.launches_json(), ptx_text, result)
    return result


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


def write_artifacts(workdir: Path, cuda: str, launches_json: str, ptx: dict[str, str], result: dict) -> None:
    """The bulky, regenerable part (CUDA C, PTX per arch, launch list) plus the result as JSON."""
    workdir.mkdir(parents=True, exist_ok=True)
    with gzip.open(workdir / "kernels.cu.gz", "wt") as f:
        f.write(cuda)
    for arch, text in ptx.items():
        with gzip.open(workdir / f"{arch}.ptx.gz", "wt") as f:
            f.write(text)
    (workdir / "launches.json").write_text(launches_json)
    write_result(workdir, result)


def write_result(workdir: Path, result: dict) -> None:
    """result.json (network counts per arch) and per_kernel.json (counts of every launch)."""
    slim = {**result, "by_arch": {a: {k: v for k, v in c.items() if k != "per_kernel"}
                                   for a, c in result["by_arch"].items()}}
    per_kernel = {a: c.get("per_kernel", []) for a, c in result["by_arch"].items()}
    (workdir / "per_kernel.json").write_text(json.dumps(per_kernel))
    (workdir / "result.json").write_text(json.dumps(slim, indent=1))
