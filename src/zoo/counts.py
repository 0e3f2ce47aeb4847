"""Network-level executed PTX instruction counts of one PTX module: the analyzer over every launch of one inference.

The stage counts through src/zoo/kernel_cache.py (each distinct kernel compiled and counted once); this
whole-module path is the reference it is tested against."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from src.zoo.tvmgen import Launch


def _analyzer() -> tuple[Any, Any, Any]:
    """parse_ptx / count_launch / UnresolvedBranchError from src.ptx (the PTX analyzer package)."""
    from src.ptx import UnresolvedBranchError, count_launch, parse_ptx

    return parse_ptx, count_launch, UnresolvedBranchError


def _add(acc: dict[str, int], part: dict[str, int], times: int) -> None:
    for k, v in part.items():
        acc[k] = acc.get(k, 0) + int(v) * times


def count_network(ptx_text: str, launches: Iterable[Launch], source: str = "network") -> dict[str, Any]:
    """Sum the analyzer's counts over launches (x calls per inference).

    A kernel whose branches depend on data (not the launch) is counted with policy 'bounds' (lower run) and
    the network is flagged `estimate`; with TVM's static-shape kernels this does not happen in practice.
    """
    parse_ptx, count_launch, unresolved_error = _analyzer()
    t0 = time.perf_counter()
    module = parse_ptx(ptx_text, source=source)
    totals = {"thread_instructions": 0, "warp_instructions": 0, "predicated_off": 0}
    by_class: dict[str, int] = {}
    by_space: dict[str, int] = {}
    per_kernel = []
    estimate = False
    n_launches = 0
    launches = list(launches)
    for launch in launches:
        if launch.kernel not in module.kernels:
            raise KeyError(f"{source}: kernel {launch.kernel!r} is launched but not in the PTX")
        try:
            r = count_launch(module, launch.kernel, grid=launch.grid, block=launch.block,
                             params=launch.params or None, policy="error")
        except unresolved_error:
            r = count_launch(module, launch.kernel, grid=launch.grid, block=launch.block,
                             params=launch.params or None, policy="bounds")
        estimate = estimate or bool(r.estimate)
        n = int(launch.calls)
        n_launches += n
        totals["thread_instructions"] += int(r.thread_instructions) * n
        totals["warp_instructions"] += int(r.warp_instructions) * n
        totals["predicated_off"] += int(r.predicated_off) * n
        _add(by_class, r.by_class, n)
        _add(by_space, r.bytes_by_space, n)
        per_kernel.append({"kernel": launch.kernel, "grid": list(launch.grid), "block": list(launch.block),
                           "calls": n, "thread_instructions": int(r.thread_instructions),
                           "warp_instructions": int(r.warp_instructions), "estimate": bool(r.estimate)})
    return {
        **totals,
        "by_class": dict(sorted(by_class.items())),
        "bytes_by_space": dict(sorted(by_space.items())),
        "kernels": len({x.kernel for x in launches}),
        "launches": n_launches,
        "estimate": estimate,
        "count_seconds": time.perf_counter() - t0,
        "per_kernel": per_kernel,
    }
