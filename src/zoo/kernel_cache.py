"""Compile and count each distinct kernel once across all CNNs.

TVM's CUDA C of one model is a preamble (headers, macros) plus one `extern "C" __global__` function per kernel.
Many CNNs share kernels (the same conv shape and schedule in ResNet-50 and ResNeXt, the same pointwise add in
every residual net), but under other names (`fused_conv2d3_add2_kernel`) and argument names (`lv17_ptr`). A
kernel's identity here is the digest of the preamble plus its text with the kernel and parameter names replaced
by position: identical digests compile to identical PTX, so

- nvcc runs once per (digest, PTX arch): a model's new kernels go to nvcc together, renamed `k_<digest>`;
- the PTX analyzer runs once per (digest, PTX arch, grid, block, scalar params);

and a new CNN costs only its new kernels. Layout under the cache root (written atomically, so parallel stage
shards can share it):

    <arch>/ptx/<batch digest>.ptx.gz       one nvcc output (the kernels new at that time)
    <arch>/index/<dd>/<digest>.json        which PTX file holds the kernel, its entry name
    <arch>/counts/<dd>/<digest>__<geometry>.json   executed-instruction counts of one launch
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.zoo.tvmgen import Launch, PtxGenerationError, cuda_to_ptx, ptx_arch_for

KERNEL_PLACEHOLDER = "cnnperf_kernel"
PARAM_PLACEHOLDER = "cnnperf_p"
_DEFINITION = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*)\) \{$')
_PROTOTYPE = re.compile(r'^extern "C" __global__ void .*\);$')
_KERNEL_NAME = re.compile(r"(.+)_kernel(?:_\d+)?")

# Relax operator names that contain underscores, so that `fused_conv2d1_add_relu` reads conv2d + add + relu and
# `fused_batch_norm_relu` reads batch_norm + relu. Longest first; other tokens are operator names of their own.
MULTI_TOKEN_OPS = sorted([
    "batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "conv2d_transpose", "strided_slice", "dynamic_strided_slice",
    "expand_dims", "broadcast_to", "permute_dims", "collapse_sum_like", "full_like", "zeros_like", "ones_like",
    "hard_sigmoid", "hard_swish", "hard_tanh", "leaky_relu", "log_softmax", "gelu_tanh", "scatter_elements",
    "take_along_axis", "image_resize2d", "resize2d",
], key=lambda s: -s.count("_"))


@dataclass(frozen=True)
class CudaKernel:
    """One kernel of a model's CUDA C: its name there, its text with names replaced by position, its digest."""

    name: str
    canonical: str
    digest: str

    @property
    def entry(self) -> str:
        return f"k_{self.digest}"


def _params(arglist: str, kernel: str) -> list[str]:
    names = []
    for arg in (a.strip() for a in arglist.split(",") if a.strip()):
        m = re.search(r"(\w+)\s*$", arg)
        if not m:
            raise PtxGenerationError("split", f"kernel {kernel}: cannot read parameter {arg!r}")
        names.append(m.group(1))
    return names


def _canonical(lines: list[str], name: str, params: list[str]) -> str:
    text = "\n".join(lines)
    text = re.sub(rf"\b{re.escape(name)}\b", KERNEL_PLACEHOLDER, text)
    for i, p in enumerate(params):
        text = re.sub(rf"\b{re.escape(p)}\b", f"{PARAM_PLACEHOLDER}{i}", text)
    return text


def split_cuda(source: str) -> tuple[str, list[CudaKernel]]:
    """TVM's CUDA C -> (preamble, kernels in source order). Prototypes are dropped (each kernel is defined before
    use); any other top-level text stays in the preamble, which is part of every kernel's digest."""
    preamble: list[str] = []
    kernels: list[CudaKernel] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _DEFINITION.match(line)
        if m is None:
            if not _PROTOTYPE.match(line):
                preamble.append(line)
            i += 1
            continue
        name = m.group(1)
        j = i + 1
        while j < len(lines) and lines[j] != "}":
            j += 1
        if j == len(lines):
            raise PtxGenerationError("split", f"kernel {name}: no closing brace at column 0")
        kernels.append(CudaKernel(name, _canonical(lines[i:j + 1], name, _params(m.group(2), name)), ""))
        i = j + 1
    head = "\n".join(ln for ln in preamble).strip() + "\n"
    digests = [hashlib.sha256((head + "\n" + k.canonical).encode()).hexdigest()[:20] for k in kernels]
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise PtxGenerationError("split", f"duplicate kernel names in the CUDA C: {sorted(names)}")
    return head, [CudaKernel(k.name, k.canonical, d) for k, d in zip(kernels, digests, strict=True)]


def operators(kernel: str) -> str:
    """The graph operators a TVM kernel implements, read from its PrimFunc name (`fused_conv2d1_add_relu_kernel`
    -> `conv2d+add+relu`): TVM names a fused function after its operators, numbering repeats."""
    m = _KERNEL_NAME.fullmatch(kernel)
    func = m.group(1) if m else kernel
    func = func.removeprefix("fused_")
    tokens = func.split("_")
    ops: list[str] = []
    i = 0
    while i < len(tokens):
        for op in MULTI_TOKEN_OPS:
            n = op.count("_") + 1
            if re.fullmatch(re.escape(op) + r"\d*", "_".join(tokens[i:i + n])):
                ops.append(op)
                i += n
                break
        else:
            ops.append(_base_op(tokens[i]))
            i += 1
    return "+".join(ops)


def _base_op(token: str) -> str:
    """conv2d1 -> conv2d, add12 -> add, reshape -> reshape (TVM numbers repeated function names)."""
    m = re.fullmatch(r"(.*\dd)\d+", token) or re.fullmatch(r"(.*[A-Za-z])\d+", token)
    return m.group(1) if m else token


# Threads a launch is counted on exactly; larger grids are counted on a stratified sample of their blocks that
# evaluates about this many (src/ptx/driver.py::chunk_plan). Measured by benchmarks/ptx_sample_bench.py.
COUNT_MAX_LANES = 1 << 25


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _geometry_key(launch: Launch) -> str:
    key = f"g{'x'.join(map(str, launch.grid))}__b{'x'.join(map(str, launch.block))}"
    if launch.params:
        key += "__" + hashlib.sha256(json.dumps(launch.params, sort_keys=True).encode()).hexdigest()[:12]
    return key


class KernelCache:
    """nvcc PTX and launch counts per distinct kernel (see the module docstring for the layout)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._modules: dict[Path, Any] = {}
        self.stats = {"nvcc_kernels": 0, "nvcc_reused": 0, "counted": 0, "counts_reused": 0}

    def _index(self, arch: str, digest: str) -> Path:
        return self.root / arch / "index" / digest[:2] / f"{digest}.json"

    def _counts(self, arch: str, digest: str, launch: Launch) -> Path:
        return self.root / arch / "counts" / digest[:2] / f"{digest}__{_geometry_key(launch)}.json"

    def compile(self, preamble: str, kernels: list[CudaKernel], arch: str) -> list[str]:
        """nvcc the kernels not yet cached for this PTX arch (one nvcc run); returns the digests compiled now."""
        arch = ptx_arch_for(arch)
        seen: set[str] = set()
        new = []
        for k in kernels:
            if k.digest in seen or self._index(arch, k.digest).exists():
                continue
            seen.add(k.digest)
            new.append(k)
        self.stats["nvcc_reused"] += len({k.digest for k in kernels}) - len(new)
        if not new:
            return []
        body = "\n\n".join(k.canonical.replace(KERNEL_PLACEHOLDER, k.entry) for k in new)
        ptx = cuda_to_ptx(preamble + "\n" + body + "\n", arch)
        batch = hashlib.sha256("".join(k.digest for k in new).encode()).hexdigest()[:20]
        rel = Path(arch) / "ptx" / f"{batch}.ptx.gz"
        _atomic_write(self.root / rel, gzip.compress(ptx.encode(), mtime=0))
        for k in new:
            if f".entry {k.entry}(" not in ptx and f".entry {k.entry} (" not in ptx:
                raise PtxGenerationError("nvcc", f"kernel {k.name}: entry {k.entry} missing from nvcc's PTX")
            _atomic_write(self._index(arch, k.digest),
                          json.dumps({"ptx": str(rel), "entry": k.entry, "kernel": k.name}).encode())
        self.stats["nvcc_kernels"] += len(new)
        return [k.digest for k in new]

    def module(self, arch: str, digest: str) -> tuple[Any, str]:
        """(parsed PTX module holding the kernel, its entry name)."""
        from src.ptx import parse_ptx

        idx = self._index(ptx_arch_for(arch), digest)
        if not idx.exists():
            raise KeyError(f"kernel {digest} has no PTX for {arch} in {self.root}: compile it first")
        meta = json.loads(idx.read_text())
        path = self.root / meta["ptx"]
        if path not in self._modules:
            with gzip.open(path, "rt") as f:
                self._modules[path] = parse_ptx(f.read(), source=str(meta["ptx"]))
        return self._modules[path], meta["entry"]

    def ptx_text(self, arch: str, digest: str) -> str:
        meta = json.loads(self._index(ptx_arch_for(arch), digest).read_text())
        with gzip.open(self.root / meta["ptx"], "rt") as f:
            return f.read()

    def count(self, arch: str, digest: str, launch: Launch, refresh: bool = False) -> dict[str, Any]:
        """Executed-instruction counts of one launch of the kernel (cached; `refresh` recounts).

        Launches of more than COUNT_MAX_LANES threads are counted on a stratified sample of their blocks
        (`block_fraction` < 1 in the result); a cached sample taken under another budget is recounted.
        """
        from src.ptx import UnresolvedBranchError, count_launch

        arch = ptx_arch_for(arch)
        path = self._counts(arch, digest, launch)
        if path.exists() and not refresh:
            cached = json.loads(path.read_text())
            if cached.get("block_fraction", 1.0) >= 1 or cached.get("max_lanes") == COUNT_MAX_LANES:
                self.stats["counts_reused"] += 1
                return cached
        module, entry = self.module(arch, digest)
        kw = {"grid": launch.grid, "block": launch.block, "params": launch.params or None,
              "max_lanes": COUNT_MAX_LANES}
        try:
            r = count_launch(module, entry, policy="error", **kw)
        except UnresolvedBranchError:
            r = count_launch(module, entry, policy="bounds", **kw)
        out = {"thread_instructions": int(r.thread_instructions), "warp_instructions": int(r.warp_instructions),
               "predicated_off": int(r.predicated_off), "estimate": bool(r.estimate),
               "by_class": {k: int(v) for k, v in sorted(r.by_class.items())},
               "bytes_by_space": {k: int(v) for k, v in sorted(r.bytes_by_space.items())}}
        if r.block_fraction < 1:
            out.update(block_fraction=float(r.block_fraction), max_lanes=COUNT_MAX_LANES)
        _atomic_write(path, json.dumps(out, sort_keys=True).encode())
        self.stats["counted"] += 1
        return out

    def files(self) -> int:
        return sum(1 for _ in self.root.rglob("*.json")) if self.root.exists() else 0


def count_launches(cache: KernelCache, kernels: list[CudaKernel], launches: list[Launch], arch: str,
                   refresh: bool = False) -> dict[str, Any]:
    """Per-launch and network counts of one inference on one PTX arch, every launch priced by the cache.

    Network totals are the per-launch counts times calls, summed: the same arithmetic the table stage uses
    to derive network rows from per-kernel rows.
    """
    by_name = {k.name: k for k in kernels}
    per_kernel = []
    for order, launch in enumerate(launches):
        k = by_name.get(launch.kernel)
        if k is None:
            raise KeyError(f"kernel {launch.kernel!r} is launched but not in the CUDA C")
        c = cache.count(arch, k.digest, launch, refresh=refresh)
        per_kernel.append({"order": order, "kernel": launch.kernel, "kernel_digest": k.digest,
                           "operators": operators(launch.kernel), "grid": list(launch.grid),
                           "block": list(launch.block), "calls": int(launch.calls), **c})
    return {**network_totals(per_kernel), "per_kernel": per_kernel}


def network_totals(per_kernel: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum of per-launch counts x calls (thread/warp instructions, classes, bytes); kernels = distinct kernels."""
    totals = {"thread_instructions": 0, "warp_instructions": 0, "predicated_off": 0}
    by_class: dict[str, int] = {}
    by_space: dict[str, int] = {}
    for x in per_kernel:
        n = int(x["calls"])
        for k in totals:
            totals[k] += int(x[k]) * n
        for k, v in x["by_class"].items():
            by_class[k] = by_class.get(k, 0) + int(v) * n
        for k, v in x["bytes_by_space"].items():
            by_space[k] = by_space.get(k, 0) + int(v) * n
    return {**totals, "by_class": dict(sorted(by_class.items())), "bytes_by_space": dict(sorted(by_space.items())),
            "kernels": len({x["kernel"] for x in per_kernel}), "launches": sum(int(x["calls"]) for x in per_kernel),
            "estimate": any(bool(x["estimate"]) for x in per_kernel)}
