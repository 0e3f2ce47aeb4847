"""From-scratch cost of the `ptx` stage, measured on a random sample of its targets (issue 11: <= 10 s median per
new CNN, the whole table in <= 2 h on 2 cores).

The stage's own timings (`zoo_bench.py`) were taken piecemeal over several sessions, beside other jobs and with
a kernel cache that earlier runs had filled, so they neither give a from-scratch figure nor an idle-machine one.
Protocol here: K targets drawn (seeded) among the (CNN, input size) pairs the stage has computed (failures and
pairs never reached stay out), run in a random order by two worker processes (the machine's two cores) through
the stage's own `run_target` (build -> torch.export -> TVM -> nvcc of kernels not in the cache -> PTX analyzer),
params.yaml's `ptx.batch` and `ptx.nvcc_archs`, with a **new, empty cache folder**: the kernel cache starts
empty and fills as the sample runs. The full table shares more kernels between its ~1,000 pairs than a sample of
K does, so the whole-table estimate (mean seconds per pair x pairs / 2 workers) is an upper bound.

    .venv-zoo/bin/python benchmarks/zoo_scratch_bench.py [--sample 24] [--seed 0] [--workers 2] [--no-mlflow]

Needs the zoo extra (torch, torchvision, timm, keras, TVM) and nvcc. Prints and writes
reports/bench/zoo_scratch_bench.json; logs an MLflow run (experiment cnnperf-bench) unless --no-mlflow.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _run_one(target, batch: int, archs: list[str], cache: str, version: str, nvcc_archs: list[str]) -> dict:
    from src.zoo.target_runner import run_target

    t0 = time.perf_counter()
    done, _static, failure = run_target(target, batch, archs, Path(cache), version, nvcc_archs=nvcc_archs)
    wall = time.perf_counter() - t0
    row = {"pair": f"{target.model_key}@{target.img_size}", "definition": f"{target.spec.source}:{target.spec.name}",
           "wall_s": round(wall, 2)}
    if failure is not None:
        return {**row, "failure": f"{failure.get('stage')}: {failure.get('reason', '')[:200]}"}
    kc = done.get("kernel_cache", {})
    return {**row, "stage_seconds": {k: round(v, 2) for k, v in done["stage_seconds"].items()},
            "kernels_needed": kc.get("distinct_kernels"), "kernels_compiled": kc.get("nvcc_kernels"),
            "launches_counted": kc.get("counted"), "launches_reused": kc.get("counts_reused"),
            "primfuncs": kc.get("tvm_funcs"), "primfuncs_reused": kc.get("tvm_funcs_reused")}


def sample_targets(params: dict, k: int, seed: int) -> tuple[list, int, list[str]]:
    """K targets in a random order among those the committed table has counts for, their number, and the
    measured archs. The committed `ptx_kernels` table (not a local cache) names them, so any clone draws the same
    sample."""
    import pandas as pd

    from src.zoo.targets import cc_to_arch, select_targets

    targets, keys = select_targets(pd.read_parquet(params["measurements"]), pd.read_parquet(params["gpus"]))
    # per-kernel rows exist for each (CNN, size) compiled at the stage's batch (ptx_counts holds measured batches)
    kernels = pd.read_parquet(params["kernels"], columns=["model_key", "img_size", "batch_size"]).drop_duplicates()
    kernels = kernels[kernels["batch_size"] == params["batch"]]
    have = set(zip(kernels["model_key"], kernels["img_size"].astype(int), strict=True))
    computed = [t for t in targets if t.spec is not None and (t.model_key, int(t.img_size)) in have]
    if not computed:
        raise SystemExit(f"no target of {params['kernels']} at batch {params['batch']}: run the `ptx` stage first")
    archs = sorted({cc_to_arch(float(c)) for c in keys["compute_capability"].unique()})
    return random.Random(seed).sample(computed, min(k, len(computed))), len(computed), archs


def run_sample(targets: list, params: dict, archs: list[str], cache: str, workers: int, desc: str
               ) -> tuple[list[dict], float]:
    from tqdm import tqdm

    from src.zoo.pipeline import ZOO_VERSION

    runs: list[dict] = []
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_run_one, t, int(params["batch"]), archs, cache, ZOO_VERSION,
                               list(params["nvcc_archs"])) for t in targets]
        for fut in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="model"):
            runs.append(fut.result())
    return runs, time.perf_counter() - t0


def forget_models(cache: Path) -> None:
    """Drop per-model results and static features, keep the kernel (and PrimFunc) cache."""
    from src.zoo.target_runner import KERNELS_DIR

    for path in cache.iterdir():
        if path.name != KERNELS_DIR:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def summarise(runs: list[dict], population: int, workers: int, wall: float) -> dict:
    ok = [r for r in runs if "failure" not in r]
    secs = sorted(r["wall_s"] for r in ok)
    stages: dict[str, float] = {}
    for r in ok:
        for name, s in r["stage_seconds"].items():
            stages[name] = stages.get(name, 0.0) + s
    total = sum(stages.values()) or 1.0
    needed = sum(r["kernels_needed"] or 0 for r in ok)
    compiled = sum(r["kernels_compiled"] or 0 for r in ok)
    mean = statistics.fmean(secs) if secs else float("nan")
    return {
        "pairs": len(runs), "failed": len(runs) - len(ok), "workers": workers, "sample_wall_s": round(wall, 1),
        "median_s": statistics.median(secs) if secs else None,
        "p90_s": secs[int(0.9 * (len(secs) - 1))] if secs else None,
        # model -> PTX counts alone (the stage seconds), without the static features computed beside them
        "ptx_median_s": round(statistics.median(sum(r["stage_seconds"].values()) for r in ok), 2) if ok else None,
        "mean_s": round(mean, 2),
        "stage_share": {k: round(v / total, 3) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
        "kernels_compiled_over_needed": round(compiled / needed, 3) if needed else None,
        "primfuncs_reused_share": round(sum(r.get("primfuncs_reused") or 0 for r in ok)
                                        / max(1, sum(r.get("primfuncs") or 0 for r in ok)), 3),
        "computed_pairs": population,
        "whole_table_upper_bound_h": round(mean * population / workers / 3600, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="reports/bench/zoo_scratch_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--warm-pass", action="store_true",
                    help="then run the same sample again with only the kernel/PrimFunc cache kept: the floor of a "
                         "new CNN whose every kernel is known")
    args = ap.parse_args()
    from omegaconf import OmegaConf

    from src.config import REPO_ROOT, compose
    from src.tracking import record_benchmark

    params = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "params.yaml"), resolve=True)["ptx"]
    targets, population, archs = sample_targets(params, args.sample, args.seed)
    with tempfile.TemporaryDirectory(prefix="zoo_scratch_") as cache:
        runs, wall = run_sample(targets, params, archs, cache, args.workers, "zoo from scratch")
        warm = None
        if args.warm_pass:
            forget_models(Path(cache))
            warm_runs, warm_wall = run_sample(targets, params, archs, cache, args.workers, "zoo, kernels known")
            warm = {**summarise(warm_runs, population, args.workers, warm_wall), "runs": warm_runs}
    result = {"protocol": __doc__.split("\n\n")[1].replace("\n", " "), "seed": args.seed,
              "nvcc_archs": params["nvcc_archs"], "batch": params["batch"],
              **summarise(runs, population, args.workers, wall), "runs": runs}
    if warm is not None:
        result["kernels_known"] = warm
        result["kernels_known_median_s"] = warm["median_s"]
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs", "protocol", "kernels_known")},
                     indent=1))
    mlflow_cfg = None if args.no_mlflow else OmegaConf.to_container(compose([]), resolve=True)["mlflow"]
    record_benchmark(result, Path(args.out), mlflow_cfg, "benchmark/zoo_scratch",
                     {"sample": str(args.sample), "seed": str(args.seed)},
                     {k: float(v) for k, v in result.items() if isinstance(v, int | float)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
