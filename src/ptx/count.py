"""Public entry of the fast analyzer: count_launch() and its result, LaunchCounts.

Fast dynamic analysis: executed-instruction counts of a launch by evaluating only the branch slices
(slicing.py), vectorised with NumPy over the threads of the launch (semantics.py), under SIMT min-PC
scheduling with loop fast-forwarding (driver.py, fastforward.py). This module checks the launch (grid,
block, .reqntid/.maxntid, parameters, policy), runs the driver once (or, with policy='bounds', once per
extreme) and sums the per-block lane and warp counts into per-instruction totals.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from src.ptx.cfg import Program, build_program
from src.ptx.driver import LANES_PER_CHUNK, Runner, run_launch
from src.ptx.errors import AnalysisError
from src.ptx.isa import BYTES_KEYS, CLASSES
from src.ptx.syntax import PtxModule

POLICIES = ("error", "bounds", "taken", "not_taken", "probability")


@dataclass
class LaunchCounts:
    """Executed-instruction counts of one kernel launch.

    thread_instructions: instructions executed summed over threads (guard true; branches always count).
    warp_instructions: warp-level issues under SIMT min-PC scheduling (once per warp and step when any
    lane is at the instruction, guard true or false). predicated_off: thread-level arrivals at a
    non-branch instruction whose guard was false. by_class: thread_instructions by class.
    bytes_by_space: bytes moved by loads/stores/atomics per 'load.global', 'store.shared', ...
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    thread_instructions: int
    warp_instructions: int
    predicated_off: int
    by_class: dict[str, int]
    bytes_by_space: dict[str, int]
    estimate: bool
    unresolved_branches: list[str]
    policy: str
    seconds: float
    bounds: dict[str, dict] | None = None
    notes: list[str] = field(default_factory=list)
    # Share of the grid's blocks evaluated (1.0 = all; less = counts scaled from a stratified sample of blocks).
    block_fraction: float = 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"] = list(self.grid)
        d["block"] = list(self.block)
        return d


# CUDA's launch limits (all compute capabilities the parser targets): grid x, y, z and block x, y, z.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024


def _dims(d, what: str = "launch", limits: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    if isinstance(d, int | np.integer):
        d = (int(d),)
    d = tuple(int(x) for x in d)
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise AnalysisError(f"{what} dimension must be 1-3 positive ints, got {d}")
    d = d + (1,) * (3 - len(d))
    for axis, x, mx in zip("xyz", d, limits or (), strict=False):
        if x > mx:
            raise AnalysisError(f"{what} {axis} dimension {x} exceeds CUDA's limit {mx} (got {what} {d})")
    return d


_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38, "f64": math.inf}


def check_param_value(name: str, ptype: str, v):
    """A parameter value as the kernel sees it, or AnalysisError naming the parameter and its PTX type.

    Integer types: an integer (or an integral float) that fits: .sN signed N-bit; .uN and .bN from -2^(N-1) to
    2^N - 1 (nvcc declares C's signed ints as .u32/.u64 too, so -1 for an `int n` is that int's bit pattern).
    Float types: a finite number the type can hold. .pred: 0 or 1. Byval arrays (`.b8[16]`) are passed through."""
    t = ptype.lstrip(".")
    if "[" in t:
        return v
    where = f"parameter {name} ({ptype})"
    if isinstance(v, bool | np.bool_):
        v = int(v)
    if not isinstance(v, int | float | np.integer | np.floating):
        raise AnalysisError(f"{where}: {v!r} is not a number")
    if t in _FLOAT_MAX:
        f = float(v)
        if not math.isfinite(f) or abs(f) > _FLOAT_MAX[t]:
            raise AnalysisError(f"{where}: {v!r} is not a finite .{t} value")
        return f
    if isinstance(v, float | np.floating):
        if not math.isfinite(v) or v != int(v):
            raise AnalysisError(f"{where}: {v!r} is not an integer")
    v = int(v)
    if t == "pred":
        lo, hi = 0, 1
    else:
        w = int("".join(c for c in t if c.isdigit()) or 32)
        lo = -(1 << (w - 1))
        hi = (1 << (w - 1)) - 1 if t[0] == "s" else (1 << w) - 1
    if not lo <= v <= hi:
        raise AnalysisError(f"{where}: {v} is out of range [{lo}, {hi}]")
    return v


def _parse_policy(policy: str) -> tuple[str, float]:
    if policy.startswith("probability"):
        _, _, p = policy.partition(":")
        try:
            prob = float(p) if p else 0.5
        except ValueError as exc:
            raise AnalysisError(f"bad policy {policy!r}: use probability:P with 0<=P<=1") from exc
        if not 0.0 <= prob <= 1.0:
            raise AnalysisError(f"bad policy {policy!r}: P must be in [0, 1]")
        return "probability", prob
    if policy not in POLICIES:
        raise AnalysisError(f"unknown policy {policy!r}; choose from {POLICIES} (probability as 'probability:P')")
    return policy, 0.5


def _resolve_params(prog: Program, params) -> dict[str, object]:
    """Parameter values by PTX name, each checked against its PTX type (check_param_value); a parameter given
    twice (by index and by name) is an error."""
    kparams = prog.kernel.params
    names = [p[0] for p in kparams]
    types = dict(kparams)
    out: dict[str, object] = {}
    if params is None:
        return out
    if isinstance(params, list | tuple):
        if len(params) > len(kparams):
            raise AnalysisError(f"{len(params)} parameters given, kernel {prog.kernel.name} has {len(kparams)}")
        return {names[i]: check_param_value(names[i], types[names[i]], v) for i, v in enumerate(params)
                if v is not None}
    given: dict[str, object] = {}
    for k, v in dict(params).items():
        key = k
        if isinstance(k, int | np.integer) or (isinstance(k, str) and k.isdigit()):
            idx = int(k)
            if not 0 <= idx < len(names):
                raise AnalysisError(f"parameter index {k} out of range (kernel has {len(names)} parameters)")
            key = names[idx]
        elif k not in names:
            raise AnalysisError(f"unknown parameter {k!r}; kernel {prog.kernel.name} has {names}")
        if key in given:
            raise AnalysisError(f"parameter {key} given twice (as {given[key]!r} and {k!r})")
        given[key] = k
        if v is not None:
            out[key] = check_param_value(key, types[key], v)
    return out


def _totals(prog: Program, runner: Runner) -> dict:
    thread = warp = off = 0
    by_class: dict[str, int] = {}
    by_bytes: dict[str, int] = {}
    for b in prog.blocks:
        lanes, warps = runner.block_lanes[b.index], runner.block_warps[b.index]
        if not lanes:
            continue
        warp += warps * (b.end - b.start)
        for i in range(b.start, b.end):
            ins = prog.instrs[i]
            if ins.pred and not (ins.base == "bra" or (ins.base == "ret" and ins.operands)):
                ex = runner.guard_lanes.get(i, 0)
                off += lanes - ex
            else:
                ex = lanes
            if ex:
                thread += ex
                c = prog.klass[i]
                by_class[c] = by_class.get(c, 0) + ex
                if prog.bytes_key[i]:
                    by_bytes[prog.bytes_key[i]] = by_bytes.get(prog.bytes_key[i], 0) + ex * prog.nbytes[i]
    return {"thread_instructions": thread, "warp_instructions": warp, "predicated_off": off,
            "by_class": {c: by_class.get(c, 0) for c in CLASSES},
            "bytes_by_space": {k: by_bytes.get(k, 0) for k in BYTES_KEYS}}


def _check_block(prog: Program, b: tuple[int, int, int]) -> None:
    """A launch the GPU would refuse (.reqntid / .maxntid of the kernel) is an error, not a count."""
    d = prog.kernel.directives
    if "reqntid" in d:
        req = tuple(d["reqntid"]) + (1,) * (3 - len(d["reqntid"]))
        if req != b:
            raise AnalysisError(f"kernel {prog.kernel.name} requires block {req} (.reqntid), got {b}")
    if "maxntid" in d:
        mx = 1
        for x in d["maxntid"]:
            mx *= x
        if b[0] * b[1] * b[2] > mx:
            raise AnalysisError(f"kernel {prog.kernel.name} allows at most {mx} threads per block (.maxntid), "
                                f"got {b}")


def program_for(module: PtxModule, kernel: str) -> Program:
    """The flattened Program of a kernel, cached on the module so launches of one kernel share it."""
    cache = module.__dict__.setdefault("_programs", {})
    prog = cache.get(kernel)
    if prog is None:
        prog = cache[kernel] = build_program(module, kernel)
    return prog


def count_launch(module: PtxModule, kernel: str, grid, block, params=None, policy: str = "error",
                 max_lanes: int | None = None) -> LaunchCounts:
    """Executed-instruction counts of one launch of `kernel` (see LaunchCounts for the definitions).

    params: scalar parameter values by PTX name, by index, or as a positional list; pointer parameters
    may be left out (they only matter if a branch depends on them, which is then unresolved).
    policy for branches that depend on unknown data: 'error' (raise UnresolvedBranchError), 'bounds'
    (main figures = lower run, `bounds` holds both extremes: every unresolved guard false / true),
    'taken', 'not_taken', or 'probability:P' (each lane takes it with probability P, seeded).
    max_lanes: evaluate at most about this many lanes (threads) and scale the rest of the grid from a stratified
    sample of its blocks (driver.chunk_plan; the first and last blocks always evaluated); None = every block.
    Work grows with the lanes evaluated, so this bounds the cost of huge grids (a 1.8M-block depthwise conv at
    384 px); `block_fraction` of the result says how much was evaluated (benchmarks/ptx_sample_bench.py
    measures the error).
    """
    if max_lanes is not None and max_lanes < 1:
        raise ValueError(f"max_lanes must be positive, got {max_lanes}")
    max_chunks = None if max_lanes is None else max(3, max_lanes // LANES_PER_CHUNK)
    with np.errstate(all="ignore"):  # PTX arithmetic wraps and yields inf/nan silently; so does ours
        return _count_launch(module, kernel, grid, block, params, policy, max_chunks)


def _count_launch(module: PtxModule, kernel: str, grid, block, params, policy: str,
                  max_chunks: int | None) -> LaunchCounts:
    t0 = time.perf_counter()
    g, b = _dims(grid, "grid", MAX_GRID), _dims(block, "block", MAX_BLOCK)
    if b[0] * b[1] * b[2] > MAX_THREADS_PER_BLOCK:
        raise AnalysisError(f"block {b} has more than {MAX_THREADS_PER_BLOCK} threads")
    prog = program_for(module, kernel)
    _check_block(prog, b)
    pol, prob = _parse_policy(policy)
    pvals = _resolve_params(prog, params)
    bounds = None
    notes: list[str] = []
    if pol == "bounds":
        runs = [run_launch(prog, g, b, pvals, pol, prob, f, max_chunks) for f in ("not_taken", "taken")]
        unresolved = {**runs[0].unresolved, **runs[1].unresolved}
        tots = [_totals(prog, r) for r in runs]
        if unresolved:
            div = run_launch(prog, g, b, pvals, pol, prob, "diverge", max_chunks)
            unresolved.update(div.unresolved)
            tots.append(_totals(prog, div))
        keys = ("thread_instructions", "warp_instructions", "predicated_off")
        lower = {k: min(x[k] for x in tots) for k in keys}
        upper = {k: max(x[k] for x in tots) for k in keys}
        lo_i = min(range(2), key=lambda j: tots[j]["thread_instructions"])
        lower["by_class"], upper["by_class"] = tots[lo_i]["by_class"], tots[1 - lo_i]["by_class"]
        bounds = {"lower": lower, "upper": upper}
        tot = dict(tots[lo_i])
        tot.update({k: lower[k] for k in keys})
        if unresolved:
            notes.append("bounds: main figures are the lower bounds; lower/upper come from runs with every "
                         "unresolved guard false, true, and split within every warp; they bound the exact "
                         "counts when the unresolved branches are forward branches (if/else), not loop exits")
    else:
        runs = [run_launch(prog, g, b, pvals, pol, prob, None, max_chunks)]
        tot = _totals(prog, runs[0])
        unresolved = runs[0].unresolved
    fraction = runs[0].blocks_evaluated / max(runs[0].blocks_total, 1)
    if fraction < 1:
        notes.append(f"sampled: {runs[0].blocks_evaluated} of {runs[0].blocks_total} blocks evaluated (first, last "
                     "and a stratified sample of the rest), the counts scaled to the whole grid")
    return LaunchCounts(
        kernel=kernel, grid=g, block=b,
        thread_instructions=tot["thread_instructions"], warp_instructions=tot["warp_instructions"],
        predicated_off=tot["predicated_off"], by_class=tot["by_class"], bytes_by_space=tot["bytes_by_space"],
        estimate=bool(unresolved), unresolved_branches=[unresolved[k] for k in sorted(unresolved)],
        policy=policy, seconds=time.perf_counter() - t0, bounds=bounds if unresolved else None, notes=notes,
        block_fraction=fraction,
    )


__all__ = ["LaunchCounts", "POLICIES", "count_launch", "program_for"]
