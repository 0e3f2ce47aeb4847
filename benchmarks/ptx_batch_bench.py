"""How wrong is scaling batch-1 PTX counts linearly to the measured batch sizes, and how much does the PTX arch matter?

The `ptx` stage compiles each CNN at batch 1 and multiplies its counts by the measured batch size
(`count_method` proportional_b1). This benchmark compiles a sample of measured CNNs at several batch sizes
and reports, per CNN and batch b, the error of the linear rule: b * count(1) / count(b) - 1 (positive = the
rule over-estimates), for thread instructions, warp instructions, FMA and global-load bytes. It also counts
batch 1 under each PTX arch nvcc supports for our measured GPUs (sm_75 stands for all of them in the stage) and
reports the difference to sm_75.

Needs the zoo extra and nvcc. Uses the stage's kernel cache (shared kernels are compiled and counted once).
Writes reports/bench/ptx_batch_bench.json and an MLflow run (experiment cnnperf-bench) unless --no-mlflow.

    python benchmarks/ptx_batch_bench.py [--models torchvision:resnet18,...] [--batches 1,8,32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Measured CNNs of several shapes: plain, residual, dense, depthwise, NAS, grouped, from torchvision and timm.
SAMPLE = ("torchvision:alexnet", "torchvision:vgg16", "torchvision:resnet18", "torchvision:resnet50",
          "torchvision:densenet121", "torchvision:squeezenet1_1", "torchvision:mobilenet_v2",
          "torchvision:googlenet", "timm:efficientnet_b0", "timm:mobilenetv3_large_100", "timm:regnetx_002",
          "timm:resnext26ts", "timm:ghostnet_100", "timm:mixnet_s")
METRICS = {"thread": ("thread_instructions",), "warp": ("warp_instructions",), "fma": ("by_class", "fma"),
           "load_global_bytes": ("bytes_by_space", "load.global")}
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_120")


def _get(c: dict, path: tuple[str, ...]) -> float:
    v = c
    for p in path:
        v = v.get(p, 0) if isinstance(v, dict) else 0
    return float(v)


def measure(spec: str, batches: list[int], archs: list[str], size: int, kernel_cache: Path) -> dict:
    from src.zoo.pipeline import ptx_features
    from src.zoo.resolve import build

    source, _, name = spec.partition(":")
    built = build(source, name, size)
    out: dict = {"model": spec, "img_size": size, "linear_error": {}, "arch_vs_sm_75": {}, "seconds": {}}
    by_batch = {}
    for b in batches:
        t = time.perf_counter()
        r = ptx_features(source, name, size, b, ["sm_75"] if b != 1 else archs, built=built,
                         nvcc_archs=None, kernel_cache=kernel_cache)
        out["seconds"][str(b)] = round(time.perf_counter() - t, 2)
        by_batch[b] = r["by_arch"]
    base = by_batch[1]["sm_75"]
    for b in batches[1:]:
        cb = by_batch[b]["sm_75"]
        out["linear_error"][str(b)] = {m: b * _get(base, p) / _get(cb, p) - 1 if _get(cb, p) else None
                                       for m, p in METRICS.items()}
        out["linear_error"][str(b)]["launches_ratio"] = cb["launches"] / base["launches"]
    for a in archs:
        if a != "sm_75":
            out["arch_vs_sm_75"][a] = {m: _get(by_batch[1][a], p) / _get(base, p) - 1 if _get(base, p) else None
                                       for m, p in METRICS.items()}
    return out


def summary(results: list[dict], batches: list[int], archs: list[str]) -> dict:
    out: dict = {"linear_error": {}, "arch_vs_sm_75": {}}
    for b in batches[1:]:
        errs = [r["linear_error"][str(b)]["thread"] for r in results if r["linear_error"].get(str(b))]
        out["linear_error"][str(b)] = {
            "cnns": len(errs), "median": statistics.median(errs), "max_abs": max(abs(e) for e in errs),
            "share_over_2pct": sum(abs(e) > 0.02 for e in errs) / len(errs)}
    for a in archs:
        if a == "sm_75":
            continue
        d = [r["arch_vs_sm_75"][a]["thread"] for r in results if a in r["arch_vs_sm_75"]]
        out["arch_vs_sm_75"][a] = {"cnns": len(d), "median": statistics.median(d),
                                   "max_abs": max(abs(x) for x in d), "identical": sum(x == 0 for x in d)}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(SAMPLE))
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--kernel-cache", default="data/interim/ptx/kernels")
    ap.add_argument("--out", default="reports/bench/ptx_batch_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args(argv)
    batches = sorted({1, *(int(b) for b in args.batches.split(","))})
    archs = [a for a in args.archs.split(",") if a]
    if "sm_75" not in archs:
        archs.insert(0, "sm_75")
    results, failures = [], []
    t0 = time.perf_counter()
    for spec in tqdm([m for m in args.models.split(",") if m], desc="CNNs"):
        try:
            results.append(measure(spec, batches, archs, args.img_size, Path(args.kernel_cache)))
            print(json.dumps(results[-1]), flush=True)
        except Exception as exc:  # reported, not dropped
            failures.append({"model": spec, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            print(json.dumps(failures[-1]), flush=True)
    out = {"protocol": "TVM default schedules, batch 1 vs larger batches at the same input size; error of the "
                       "linear rule = b*count(1)/count(b) - 1", "batches": batches, "archs": archs,
           "summary": summary(results, batches, archs) if results else {}, "results": results,
           "failures": failures, "wall_seconds": time.perf_counter() - t0}
    print(json.dumps(out["summary"], indent=1))
    from omegaconf import OmegaConf

    from src.config import compose
    from src.tracking import record_benchmark

    metrics = {f"linear_error_b{b}_{k}": float(v) for b, s in out["summary"].get("linear_error", {}).items()
               for k, v in s.items()}
    metrics.update({f"arch_{a}_{k}": float(v) for a, s in out["summary"].get("arch_vs_sm_75", {}).items()
                    for k, v in s.items()})
    mlflow_cfg = None if args.no_mlflow else OmegaConf.to_container(compose([]), resolve=True)["mlflow"]
    record_benchmark(out, Path(args.out), mlflow_cfg, "benchmark/ptx_batch", {"models": str(len(results))}, metrics)
    return out


if __name__ == "__main__":
    main()
