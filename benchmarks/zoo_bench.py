"""Seconds per model for model -> PTX -> counts (the paper reports 6.8-60 s per CNN).

Two modes:
  python benchmarks/zoo_bench.py                      # summarise the `ptx` stage's per-model timings (cache)
  python benchmarks/zoo_bench.py --run keras:ResNet50 torchvision:resnet18 --arch sm_86
                                                     # time fresh runs now (build, export, TVM, nvcc, count)
Protocol: wall-clock of one process doing build -> torch.export -> Relax -> dlight schedules -> lowering ->
nvcc (one PTX arch unless several are asked) -> PTX analyzer over every launch, batch 1. The cached timings
were taken by the stage running under `nice -n 10` on a 2-core machine shared with other jobs, so they are
upper bounds for an idle machine. Results are printed and, with --out, written as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def summarise_cache(cache: Path) -> dict:
    rows = []
    for path in sorted(cache.glob("*__b*/result.json")):
        r = json.loads(path.read_text())
        rows.append({"model": f"{r['source']}:{r['model']}@{r['img_size']}", "seconds": r["seconds"],
                     "nvcc_archs": len(r.get("nvcc_archs", [])) or None, **r["stage_seconds"]})
    if not rows:
        raise SystemExit(f"no results under {cache} (run `python -m src.zoo table` first)")
    secs = sorted(x["seconds"] for x in rows)
    stages = sorted({k for x in rows for k in x if k not in ("model", "seconds", "nvcc_archs")})
    out = {
        "models": len(rows),
        "median_s": statistics.median(secs),
        "p10_s": secs[int(0.1 * (len(secs) - 1))],
        "p90_s": secs[int(0.9 * (len(secs) - 1))],
        "min_s": secs[0],
        "max_s": secs[-1],
        "median_stage_s": {k: statistics.median(x.get(k, 0.0) for x in rows) for k in stages},
        "slowest": sorted(rows, key=lambda x: -x["seconds"])[:5],
    }
    return out


def run_fresh(specs: list[str], arch: str, batch: int) -> dict:
    from src.zoo.pipeline import ptx_features

    results = []
    for spec in specs:
        source, _, name = spec.partition(":")
        t0 = time.perf_counter()
        r = ptx_features(source, name, None, batch, [arch])
        wall = time.perf_counter() - t0
        c = r["by_arch"][arch]
        results.append({"model": spec, "wall_s": round(wall, 2), "stage_seconds": r["stage_seconds"],
                        "thread_instructions": c["thread_instructions"], "kernels": c["kernels"],
                        "launches": c["launches"]})
        print(json.dumps(results[-1]), flush=True)
    walls = [x["wall_s"] for x in results]
    return {"arch": arch, "batch": batch, "median_wall_s": statistics.median(walls), "runs": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="data/interim/ptx", help="the ptx stage's cache folder")
    ap.add_argument("--run", nargs="*", default=None, help="source:model to time now (e.g. keras:ResNet50)")
    ap.add_argument("--arch", default="sm_86")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args()
    result = run_fresh(args.run, args.arch, args.batch) if args.run else summarise_cache(Path(args.cache))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
