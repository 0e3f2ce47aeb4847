"""Schedule and lower each distinct TVM PrimFunc once across all CNNs.

After TVM's "zero" pipeline (legalise, fuse) a model is a Relax `main` calling PrimFuncs. Most of them recur in
other CNNs (the same 3x3 convolution shape in every ResNet, the same fused add+relu) under other names. Before
this cache every model ran dlight's default GPU schedules and TIR lowering on all of them, about a third of the
`ptx` stage's time per CNN. Here a PrimFunc's identity is its structural hash (TVM's: names of variables do not
enter it) plus the name order of its parameters (CUDA kernels list their buffer arguments by name, and the
kernel cache numbers arguments by position), under one TVM version, TVM target and dlight rule set. A PrimFunc
seen before gives its device kernels (CUDA text with names replaced by position, grid and block) from here; only
new ones are scheduled, lowered and code-generated. Each function is scheduled alone (src/zoo/schedule.py), so its
record does not depend on the other functions of the CNN; it names the dlight rules it was scheduled without.

Layout under the kernel cache root: `tvm/<dd>/<key>.json.gz`, one record per PrimFunc:
{"preamble": CUDA preamble it was generated with, "kernels": [{"suffix", "canonical", "grid", "block"}],
"without": [dlight rules it was scheduled without]} ("without" absent: none; records written before per-function
scheduling were all scheduled with every rule, since a module where a rule failed wrote no record under this key).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from src.zoo.kernel_cache import KERNEL_PLACEHOLDER, _atomic_write, split_cuda

# Bump when what a record holds, or how it is made, changes: older records are then ignored.
FUNC_CACHE_VERSION = "1"


@dataclass(frozen=True)
class FuncKernel:
    """One device kernel of a PrimFunc: name suffix (`_kernel`, `_kernel_1`), CUDA text, launch geometry."""

    suffix: str
    canonical: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


@dataclass(frozen=True)
class FuncRecord:
    preamble: str
    kernels: tuple[FuncKernel, ...]
    without: tuple[str, ...] = ()


def func_key(func: Any, target_arch: str) -> str:
    """Identity of an unscheduled PrimFunc for the cache (see the module docstring)."""
    import tvm
    import tvm_ffi

    names = [str(p.name) for p in func.params]
    rank = sorted(range(len(names)), key=lambda i: (names[i], i))
    # [] held the rules dropped for the whole module before functions were scheduled alone (always [] now; kept so
    # that the keys of existing records stay the same)
    payload = json.dumps([FUNC_CACHE_VERSION, tvm.__version__, target_arch, [],
                          str(tvm_ffi.structural_hash(func)), rank])
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def records_from_cuda(source: str, kernels_of: dict[str, list[str]], geometry: dict[str, tuple],
                      without: dict[str, tuple[str, ...]] | None = None) -> dict[str, FuncRecord]:
    """CUDA C of some PrimFuncs -> one record per PrimFunc (kernels_of: func name -> its kernel names; without:
    func name -> dlight rules it was scheduled without)."""
    preamble, kernels = split_cuda(source)
    by_name = {k.name: k for k in kernels}
    out = {}
    for func, names in kernels_of.items():
        ks = []
        for name in names:
            if name not in by_name:
                raise KeyError(f"kernel {name!r} of PrimFunc {func!r} is not in the generated CUDA C")
            g, b = geometry[name]
            ks.append(FuncKernel(name[len(func):], by_name[name].canonical, tuple(g), tuple(b)))
        out[func] = FuncRecord(preamble, tuple(ks), tuple((without or {}).get(func, ())))
    return out


def superset_preamble(preambles: list[str]) -> str | None:
    """The preamble a whole module would get: TVM emits optional blocks (warp-shuffle macros, fp16 headers) when
    any kernel needs them, so it is the one whose lines contain every other's; None when no one does."""
    distinct = sorted(set(preambles), key=len, reverse=True)
    if not distinct:
        return None
    top = distinct[0]
    lines = set(top.splitlines())
    return top if all(set(p.splitlines()) <= lines for p in distinct[1:]) else None


def assemble(preamble: str, funcs: list[tuple[str, FuncRecord]]) -> str:
    """A module's CUDA C from its PrimFuncs' records: the preamble, then each kernel under its real name."""
    parts = [preamble]
    for func, rec in funcs:
        for k in rec.kernels:
            parts.append(k.canonical.replace(KERNEL_PLACEHOLDER, func + k.suffix))
    return "\n\n".join(parts) + "\n"


class FuncCache:
    """Records of scheduled and lowered PrimFuncs, on disk (written atomically: parallel workers share it)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.last: dict[str, int] = {}  # PrimFuncs of the last module looked up, and how many were found

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json.gz"

    def get(self, key: str) -> FuncRecord | None:
        path = self._path(key)
        if not path.exists():
            return None
        with gzip.open(path, "rt") as f:
            data = json.load(f)
        kernels = tuple(FuncKernel(k["suffix"], k["canonical"], tuple(k["grid"]), tuple(k["block"]))
                        for k in data["kernels"])
        return FuncRecord(data["preamble"], kernels, tuple(data.get("without", ())))

    def put(self, key: str, rec: FuncRecord) -> None:
        data = {"preamble": rec.preamble,
                "kernels": [{"suffix": k.suffix, "canonical": k.canonical, "grid": list(k.grid),
                             "block": list(k.block)} for k in rec.kernels]}
        if rec.without:
            data["without"] = list(rec.without)
        _atomic_write(self._path(key), gzip.compress(json.dumps(data).encode(), mtime=0))
