"""How far are PTX counts from a stratified sample of a huge grid's blocks from the exact counts?

The analyzer's work grows with the lanes (threads) it evaluates, and a few kernels of the large timm CNNs have
grids of hundreds of millions of threads (a depthwise conv + GELU of focalnet_large at 384 px: 1.8M blocks of
256, 210 s to count exactly). `count_launch(..., max_lanes=N)` evaluates the first and last chunk of blocks and
one chunk per stratum of the rest, scaling each by the blocks it stands for (src/ptx/driver.py::chunk_plan).

This benchmark takes launches whose exact counts are already in the stage's kernel cache and that are larger
than the budget, recounts them under the budget and reports the relative error (sampled / exact - 1) of thread
and warp instructions, FMA, and global/shared bytes, with the seconds and the share of blocks evaluated.
Launches are chosen deterministically: evenly spaced over the candidates sorted by thread count.

Needs nvcc's PTX in the cache (no TVM). Writes reports/bench/ptx_sample_bench.json and an MLflow run
(experiment cnnperf-bench) unless --no-mlflow.

    python benchmarks/ptx_sample_bench.py [--n 24] [--max-lanes 33554432] [--arch sm_75]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METRICS = {"thread": ("thread_instructions",), "warp": ("warp_instructions",), "fma": ("by_class", "fma"),
           "load_global_bytes": ("bytes_by_space", "load.global"),
           "store_global_bytes": ("bytes_by_space", "store.global"),
           "load_shared_bytes": ("bytes_by_space", "load.shared")}
_NAME = re.compile(r"(?P<digest>[0-9a-f]+)__g(?P<grid>\d+x\d+x\d+)__b(?P<block>\d+x\d+x\d+)\.json")


def _get(c: dict, path: tuple[str, ...]) -> float:
    v = c
    for p in path:
        v = v.get(p, 0) if isinstance(v, dict) else 0
    return float(v)


def candidates(counts_dir: Path, min_lanes: int) -> list[dict]:
    """Cached exact launch counts (no scalar parameters) with more than min_lanes threads, smallest first."""
    out = []
    for path in counts_dir.rglob("*.json"):
        m = _NAME.fullmatch(path.name)
        if not m:
            continue
        grid = tuple(int(x) for x in m["grid"].split("x"))
        block = tuple(int(x) for x in m["block"].split("x"))
        lanes = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
        if lanes > min_lanes:
            out.append({"digest": m["digest"], "grid": grid, "block": block, "lanes": lanes, "path": path})
    return sorted(out, key=lambda c: (c["lanes"], c["digest"]))


def pick(cands: list[dict], n: int) -> list[dict]:
    if len(cands) <= n:
        return cands
    return [cands[round(i * (len(cands) - 1) / (n - 1))] for i in range(n)]


def measure(cache, arch: str, cand: dict, max_lanes: int) -> dict:
    from src.ptx import UnresolvedBranchError, count_launch

    exact = json.loads(cand["path"].read_text())
    if exact.get("block_fraction", 1.0) < 1:
        raise ValueError(f"{cand['path']} holds sampled counts, not exact ones")
    module, entry = cache.module(arch, cand["digest"])
    t = time.perf_counter()
    kw = {"grid": cand["grid"], "block": cand["block"], "max_lanes": max_lanes}
    try:
        r = count_launch(module, entry, policy="error", **kw)
    except UnresolvedBranchError:
        r = count_launch(module, entry, policy="bounds", **kw)
    sampled = {"thread_instructions": r.thread_instructions, "warp_instructions": r.warp_instructions,
               "by_class": r.by_class, "bytes_by_space": r.bytes_by_space}
    err = {}
    for k, path in METRICS.items():
        e, s = _get(exact, path), _get(sampled, path)
        if e:
            err[k] = s / e - 1
    return {"digest": cand["digest"], "grid": list(cand["grid"]), "block": list(cand["block"]),
            "lanes": cand["lanes"], "block_fraction": r.block_fraction, "seconds": round(time.perf_counter() - t, 3),
            "estimate": r.estimate, "error": err}


def summary(results: list[dict]) -> dict:
    out: dict = {"launches": len(results)}
    for k in METRICS:
        errs = [abs(r["error"][k]) for r in results if k in r["error"]]
        if errs:
            out[f"abs_error_median_{k}"] = statistics.median(errs)
            out[f"abs_error_max_{k}"] = max(errs)
    out["block_fraction_median"] = statistics.median(r["block_fraction"] for r in results)
    out["seconds_median"] = statistics.median(r["seconds"] for r in results)
    out["seconds_max"] = max(r["seconds"] for r in results)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel-cache", default="data/interim/ptx/kernels")
    ap.add_argument("--arch", default="sm_75")
    ap.add_argument("--max-lanes", type=int, default=1 << 25)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--out", default="reports/bench/ptx_sample_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args(argv)
    from src.zoo.kernel_cache import KernelCache

    cache = KernelCache(Path(args.kernel_cache))
    cands = candidates(Path(args.kernel_cache) / args.arch / "counts", args.max_lanes)
    chosen = pick(cands, args.n)
    results, failures = [], []
    t0 = time.perf_counter()
    for cand in tqdm(chosen, desc="launches"):
        try:
            results.append(measure(cache, args.arch, cand, args.max_lanes))
            print(json.dumps(results[-1]), flush=True)
        except Exception as exc:  # reported, not dropped
            failures.append({"digest": cand["digest"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            print(json.dumps(failures[-1]), flush=True)
    out = {"protocol": f"launches in the kernel cache with more than {args.max_lanes} threads and exact counts, "
                       f"{len(chosen)} of {len(cands)} evenly spaced by thread count, recounted with "
                       f"max_lanes={args.max_lanes}; error = sampled / exact - 1",
           "arch": args.arch, "max_lanes": args.max_lanes, "candidates": len(cands),
           "summary": summary(results) if results else {}, "results": results, "failures": failures,
           "wall_seconds": time.perf_counter() - t0}
    print(json.dumps(out["summary"], indent=1))
    from omegaconf import OmegaConf

    from src.config import compose
    from src.tracking import record_benchmark

    metrics = {k: float(v) for k, v in out["summary"].items()}
    mlflow_cfg = None if args.no_mlflow else OmegaConf.to_container(compose([]), resolve=True)["mlflow"]
    record_benchmark(out, Path(args.out), mlflow_cfg, "benchmark/ptx_sample",
                     {"max_lanes": str(args.max_lanes), "arch": args.arch}, metrics)
    return out


if __name__ == "__main__":
    main()
