"""Fill the `ptx` stage's cache ahead of the stage, in parallel shards, most measured rows per cost first.

Why: the stage (`python -m src.zoo table`) writes the tables in one process; computing hundreds of CNNs takes
hours on 2 cores, so the work is done beforehand by `python -m src.zoo warm --batch B --shard I/N` (one process
per core), each computing its share of the targets into the cache; the stage then assembles the tables from the
cache in minutes. Targets are those whose measured GPU rows a result at batch B would price: at the stage's
batch, every (CNN, size) without rows in the committed tables; at an extra batch (`ptx.extra_batches`), every
(CNN, size) with batch-1 rows some of whose measured batches take B (`targets.batches_needed`). They run in order
of measured rows gained per GMAC at their input size, so a time budget buys as many rows as it can.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from src.zoo.failure_table import MISSING_EXTRA, OUTDATED_BATCH_FAILURES, computed_failures
from src.zoo.plausibility import recomputing_pairs
from src.zoo.target_runner import TargetRunner
from src.zoo.targets import Target, batches_needed, cc_to_arch, compiled_batch_for, select_targets


def rows_gained(keys: pd.DataFrame, meas: pd.DataFrame, target: Target, batch: int, compiled: list[int]) -> int:
    """Measured non-CPU rows of the target that a result at `batch` prices (their compiled batch is `batch`)."""
    mine = keys.loc[(keys["model_key"] == target.model_key) & (keys["img_size"] == target.img_size), "batch_size"]
    taken = {int(b) for b in mine.unique() if compiled_batch_for(int(b), compiled) == batch}
    rows = meas.loc[(meas["model_key"] == target.model_key) & (meas["img_size"] == target.img_size)
                    & meas["batch_size"].isin(taken)]
    return len(rows)


def warm_targets(targets: list[Target], keys: pd.DataFrame, meas: pd.DataFrame, batch: int, base_batch: int,
                 extra_batches: list[int], counted: set[tuple[str, int]],
                 failed: set[tuple[str, int]] = frozenset(), models: list[str] | None = None
                 ) -> list[tuple[Target, int]]:
    """(target, rows gained) to compute at `batch`, most rows per GMAC first.

    `counted`: (CNN, size) pairs the committed tables hold at the base batch; `failed`: pairs the stage lists as
    failed at `batch` (ptx_failures.csv, or ptx_batch_failures.csv at an extra batch) or already holds at it.
    At the base batch: targets neither counted nor failed. At an extra batch: counted targets whose measured
    batches use it, not failed or held at it. `models` (shell patterns on the model key): only those targets,
    computed even if counted or failed (to recompute them after a change in how they are compiled).
    """
    compiled = sorted({base_batch, *extra_batches})
    if batch not in compiled:
        raise ValueError(f"batch {batch} is neither ptx.batch ({base_batch}) nor one of ptx.extra_batches "
                         f"{sorted(extra_batches)}")
    gpu_rows = meas.loc[~meas["is_cpu"].astype(bool)]
    out = []
    for t in targets:
        if t.spec is None:
            continue
        key = (t.model_key, t.img_size)
        if models is not None:
            if not any(fnmatch.fnmatchcase(t.model_key, m) for m in models):
                continue
            if batch != base_batch and batch not in batches_needed(t, keys, list(extra_batches)):
                continue
        elif key in failed or (batch == base_batch and key in counted):
            continue
        elif batch != base_batch and (key not in counted
                                      or batch not in batches_needed(t, keys, list(extra_batches))):
            continue
        out.append((t, rows_gained(keys, gpu_rows, t, batch, compiled)))

    def cost(t: Target) -> float:
        gmacs = t.gmacs if t.gmacs == t.gmacs else 5.0  # unknown GMACs: a mid-sized CNN
        return max(gmacs, 0.05)

    out.sort(key=lambda tr: (-tr[1] / cost(tr[0]), tr[0].model_key, tr[0].img_size))
    return out


def _pairs(df: pd.DataFrame) -> set[tuple[str, int]]:
    return set(zip(df["model_key"].astype(str), df["img_size"].astype(int), strict=True))


def done_or_failed(kernels: Path, listed: Path, batch: int, base_batch: int) -> set[tuple[str, int]]:
    """(CNN, size) pairs warm leaves alone at `batch`: those the kernel table holds at an extra batch, and those
    the failure table `listed` records as failed at it. A pair only named as not compiled yet (NOT_COMPUTED) is
    still to do."""
    failed: set[tuple[str, int]] = set()
    if batch != base_batch and kernels.exists():
        held = pd.read_parquet(kernels, columns=["model_key", "img_size", "batch_size"])
        failed |= _pairs(held.loc[held["batch_size"] == batch])
    if listed.exists() and listed.stat().st_size > 1:
        f = computed_failures(pd.read_csv(listed))
        if batch != base_batch:  # entries an earlier scheduling policy caused are computed again
            f = f.loc[(f["batch_size"] == batch) & ~f["stage"].isin(OUTDATED_BATCH_FAILURES)]
        failed |= _pairs(f)
    return failed


def warm(measurements: Path, gpus_path: Path, cache: Path, counts: Path, kernels: Path, failures_path: Path,
         batch_failures_path: Path, batch: int,
         base_batch: int, extra_batches: list[int], nvcc_archs: list[str] | None, shard: tuple[int, int] = (0, 1),
         time_budget_s: float | None = None, model_timeout_s: float | None = 900.0, limit: int | None = None,
         models: list[str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Compute this shard's targets at `batch` into the cache; returns what was done (no table is written).

    models: only the targets whose model key matches one of these shell patterns, recomputed even where the
    tables or the cache hold them (a cached failure is retried; a cached result of the current scheduling is kept).
    """
    from tqdm import tqdm

    from src.zoo.pipeline import ZOO_VERSION

    meas = pd.read_parquet(measurements)
    targets, keys = select_targets(meas, pd.read_parquet(gpus_path))
    counted: set[tuple[str, int]] = set()
    for path in (kernels, counts):
        if path.exists():
            counted |= _pairs(pd.read_parquet(path, columns=["model_key", "img_size"]))
    failed = done_or_failed(kernels, failures_path if batch == base_batch else batch_failures_path, batch,
                            base_batch)
    recomputing = recomputing_pairs(failures_path)  # compiled straight away as the gate variant (table.py)
    todo = warm_targets(targets, keys, meas, batch, base_batch, extra_batches, counted,
                        failed, models)[shard[0]::shard[1]]
    if limit is not None:
        todo = todo[:limit]
    archs = sorted({cc_to_arch(float(c)) for c in keys["compute_capability"].unique()})
    runner = TargetRunner(model_timeout_s)
    started = time.perf_counter()
    done_rows, seconds, failures, skipped = 0, [], [], 0
    missing_extra = None
    bar = tqdm(todo, desc=f"zoo warm b{batch} {shard[0]}/{shard[1]}", unit="model")
    for t, rows in bar:
        if time_budget_s is not None and time.perf_counter() - started > time_budget_s:
            skipped += 1
            continue
        bar.set_postfix_str(t.slug[:40])
        t0 = time.perf_counter()
        res, _static, fail = runner.run(t, batch, archs, cache, ZOO_VERSION, models is not None, nvcc_archs,
                                        gates_first=(t.model_key, t.img_size) in recomputing)
        if res is not None:
            done_rows += rows
            seconds.append(time.perf_counter() - t0)
            log(f"[zoo warm] {t.slug} b{batch}: {seconds[-1]:.1f} s, {rows} rows")
        elif fail is not None and fail["stage"] == MISSING_EXTRA:
            # Nothing can be computed in this environment: say so once and stop.
            log(f"[zoo warm] stopped: {fail['reason'][:300]}")
            missing_extra = fail["reason"][:300]
            break
        elif fail is not None:
            failures.append({"target": t.slug, "stage": fail["stage"], "reason": fail["reason"][:200]})
            log(f"[zoo warm] {t.slug} b{batch}: FAILED at {fail['stage']}: {fail['reason'][:160]}")
    runner.close()
    secs = pd.Series(seconds, dtype=float)
    return {"batch": batch, "shard": f"{shard[0]}/{shard[1]}", "targets": len(todo), "results": len(seconds),
            "rows_priced": done_rows, "failures": failures, "skipped_time_budget": skipped,
            "missing_extra": missing_extra,
            "median_seconds": float(secs.median()) if len(secs) else math.nan,
            "p90_seconds": float(secs.quantile(0.9)) if len(secs) else math.nan,
            "wall_seconds": time.perf_counter() - started}
