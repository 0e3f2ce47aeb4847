"""DVC stage `ptx`: static features and executed-PTX counts for every measured CNN the zoo can build.

Incremental: each (definition, input size, compiled batch) keeps its result under the cache folder
(`<cache>/<source>__<model>__<size>__b<batch>/result.json` or `failure.json`, src/zoo/target_runner.py); rows of the
committed tables are reused as well (src/zoo/committed_tables.py), so a fresh clone with the committed tables
recomputes nothing. Models run in order of the number of GPUs they were measured on (most first,
src/zoo/targets.py), with a progress bar and per-model timing. This module assembles and writes the tables.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from src.zoo.committed_tables import committed_static_row, from_other_definition, previous_tables, rows_of
from src.zoo.failure_table import (
    BATCH_FAILURE_COLUMNS,
    FAILURE_COLUMNS,
    MISSING_EXTRA,
    NOT_COMPUTED,
    OUTDATED_BATCH_FAILURES,
    batch_failure_row,
    batch_failures_by_key,
    computed_failures,
    failure_row,
    not_computed_row,
)
from src.zoo.kernel_table import as_results, column, dedup_summary, finish, kernel_frame, network_from_kernels
from src.zoo.pipeline import choose_nvcc_arch
from src.zoo.plausibility import drop_implausible, module_fallback, recomputing_pairs
from src.zoo.target_runner import TargetRunner, has_cached_result
from src.zoo.targets import Target, batches_needed, cc_to_arch, compiled_batch_for, select_targets

COUNT_COLUMNS = ("thread_instructions", "warp_instructions", "predicated_off", "kernels", "launches")


def class_columns(results: list[dict]) -> tuple[list[str], list[str]]:
    """The instruction classes and state spaces any of the results executes: the count table's class columns."""
    classes, spaces = set(), set()
    for r in results:
        for c in r["by_arch"].values():
            classes.update(c.get("by_class", {}))
            spaces.update(c.get("bytes_by_space", {}))
    return sorted(classes), sorted(spaces)


def count_rows(target: Target, results: dict[int, dict], keys: pd.DataFrame, classes: list[str],
               spaces: list[str], nvcc_archs: list[str] | None = None) -> list[dict]:
    """One row per measured (batch size, compute capability) of this target.

    `results` holds the counts compiled at one or more batch sizes; each measured batch takes the largest
    compiled batch not above it and scales proportionally from it (count_method 'proportional_b<compiled>';
    'compiled' when they are equal). docs/zoo.md gives the error of the proportional rule.
    """
    mine = keys.loc[(keys["model_key"] == target.model_key) & (keys["img_size"] == target.img_size)]
    rows = []
    for batch, cc in mine[["batch_size", "compute_capability"]].drop_duplicates().itertuples(index=False):
        b0 = compiled_batch_for(int(batch), sorted(results))
        result = results[b0]
        arch = cc_to_arch(float(cc))
        # The same PTX arch rule for every model, also for results cached with more archs than now asked.
        want = choose_nvcc_arch(arch, nvcc_archs)
        have = {v["ptx_arch"]: v for v in result["by_arch"].values()}
        # Counts carried from a table built with other nvcc archs: the nearest PTX arch it has (column nvcc_arch).
        c = have.get(want) or have[choose_nvcc_arch(arch, sorted(have))]
        f = int(batch) / b0
        row: dict[str, Any] = {
            "model_key": target.model_key, "img_size": target.img_size, "batch_size": int(batch),
            "compute_capability": float(cc), "arch": arch, "nvcc_arch": c["ptx_arch"],
            "zoo_source": result["source"], "zoo_model": result["model"],
            "count_method": "compiled" if int(batch) == b0 else f"proportional_b{b0}",
            "counts_estimate": bool(c["estimate"]), "zoo_seconds": float(result["seconds"]),
            "zoo_version": result["zoo_version"],
        }
        for k in COUNT_COLUMNS:
            scale = 1.0 if k in ("kernels", "launches") else f
            row[f"ptx_{k}"] = float(c[k]) * scale
        for k in classes:
            row[f"ptx_class_{column(k)}"] = float(c["by_class"].get(k, 0)) * f
        for k in spaces:
            row[f"ptx_bytes_{column(k)}"] = float(c["bytes_by_space"].get(k, 0)) * f
        rows.append(row)
    return rows


def static_row(target: Target, static: dict) -> dict:
    """Static-features row of one (model_key, input size): MACs and activations depend on the resolution, so every
    measured size gets its own row (`static_img_size`), which is how the features stage joins them."""
    row = {"model_key": target.model_key, "static_img_size": target.img_size,
           "zoo_source": static["source"], "zoo_model": static["model"]}
    skip = {"source", "model", "img_size", "framework"}
    row.update({k: v for k, v in static.items() if k not in skip})
    return row


def canonical(df: pd.DataFrame, keys: list[str], sort_columns: bool = True) -> pd.DataFrame:
    """The table in one canonical order: rows sorted by `keys` then every other column (ties cannot depend on the
    order rows were computed or carried in), `keys` first then the other columns by name, a fresh index.

    Why: the same rows must write the same bytes, or every `dvc repro` dirties git and reruns all later stages.
    """
    if df.empty:
        return df.reset_index(drop=True)
    rest = [c for c in df.columns if c not in keys]
    cols = [k for k in keys if k in df.columns] + (sorted(rest) if sort_columns else rest)
    return df[cols].sort_values(cols, kind="mergesort", na_position="last").reset_index(drop=True)


def count_table(net_results: list[tuple[Target, dict[int, dict]]], carried: list[pd.DataFrame],
                keys: pd.DataFrame, nvcc_archs: list[str] | None) -> pd.DataFrame:
    """The network count table (`ptx_counts.parquet`): the rows of every target's results plus carried legacy rows,
    sorted; a count a row lacks is zero, and class and state-space columns no model executes are left out."""
    classes, spaces = class_columns([r for _, by_b in net_results for r in by_b.values()])
    rows = [row for t, r in net_results for row in count_rows(t, r, keys, classes, spaces, nvcc_archs)]
    counts = pd.concat([pd.DataFrame(rows), *carried], ignore_index=True) if carried else pd.DataFrame(rows)
    if not counts.empty:
        counts = counts.sort_values(["model_key", "img_size", "batch_size", "compute_capability"])
        ptx_cols = [c for c in counts.columns if c.startswith("ptx_")]
        counts[ptx_cols] = counts[ptx_cols].fillna(0.0)
        # Classes/spaces no kernel of any model executes (fp64, atomics, local memory...) carry no information.
        dead = [c for c in ptx_cols if c.startswith(("ptx_class_", "ptx_bytes_")) and (counts[c] == 0).all()]
        counts = counts.drop(columns=dead)
    return counts


def run_table(measurements: Path, gpus_path: Path, cache: Path, out_counts: Path, out_failures: Path,
              out_static: Path, batch: int = 1, sources: list[str] | None = None, limit: int | None = None,
              version: str | None = None, retry_failed: bool = False, time_budget_s: float | None = None,
              offline_only: bool = False, model_timeout_s: float | None = 900.0,
              nvcc_archs: list[str] | None = None, shard: tuple[int, int] = (0, 1), recount: bool = False,
              out_kernels: Path | None = None, extra_batches: list[int] | tuple[int, ...] = (),
              prev_batch_failures: Path | None = None, log=print) -> dict[str, Any]:
    """The whole stage; returns a summary (counts, failures, median seconds per model)."""
    from tqdm import tqdm

    from src.zoo.pipeline import ZOO_VERSION

    version = version or ZOO_VERSION
    meas = pd.read_parquet(measurements)
    gpus = pd.read_parquet(gpus_path)
    targets, keys = select_targets(meas, gpus, sources, limit)
    if shard[1] > 1:
        # Parallel workers each take every n-th target; a final unsharded run assembles the tables.
        targets = targets[shard[0]::shard[1]]
    archs = sorted({cc_to_arch(float(c)) for c in keys["compute_capability"].unique()})
    cache.mkdir(parents=True, exist_ok=True)
    old_counts, old_fails, old_static, old_kernels = previous_tables(out_counts, out_failures, out_static,
                                                                     out_kernels, version)
    recomputing = recomputing_pairs(out_failures)  # compiled straight away as the gate variant
    results: list[tuple[Target, dict]] = []
    carried: list[pd.DataFrame] = []  # legacy network rows (no per-kernel rows yet)
    carried_kernels: list[tuple[Target, pd.DataFrame]] = []
    statics: dict[tuple[str, int], dict] = {}
    failures: list[dict] = []
    skipped = 0
    skipped_batches = 0
    stale_definitions: list[str] = []
    batch_failures: list[dict] = []
    missing_extra = 0
    started = time.perf_counter()
    runner = TargetRunner(model_timeout_s)
    bar = tqdm(targets, desc="zoo ptx", unit="model")
    for t in bar:
        legacy = pd.DataFrame()  # network rows of an older zoo version: replaced when this run can recompute
        legacy_is_kernels = False
        over_budget = time_budget_s is not None and time.perf_counter() - started > time_budget_s
        if t.spec is not None and not has_cached_result(cache, t, batch):
            # A fresh clone has the committed tables but no cache: reuse their rows instead of recompiling.
            prev_k, prev, prev_fail = rows_of(old_kernels, t), rows_of(old_counts, t), rows_of(old_fails, t)
            can_compute = not (offline_only or over_budget)
            stale = any(from_other_definition(df, t.spec) for df in (prev_k, prev, prev_fail))
            if stale:
                # The name mapping now picks another definition (e.g. torchvision's inception_v3, not timm's):
                # the committed rows describe a different network. Recompute; keep them if this run cannot.
                stale_definitions.append(t.slug)
                log(f"[zoo] {t.slug}: committed rows come from another definition, "
                    + ("recomputing" if can_compute else "kept (this run computes nothing new)"))
            if stale and can_compute:
                legacy = prev_k if len(prev_k) else prev
                legacy_is_kernels = bool(len(prev_k))
            elif len(prev_k) == 0 and len(prev) and can_compute:
                legacy = prev  # recompute it (per-kernel rows); kept if this environment cannot
            elif len(prev_k) or len(prev) or (len(prev_fail) and not retry_failed):
                if len(prev_k):
                    carried_kernels.append((t, prev_k))
                elif len(prev):
                    carried.append(prev)
                failures.extend(prev_fail.to_dict("records"))
                old_row = committed_static_row(old_static, t)
                if old_row is not None:
                    statics.setdefault((t.model_key, t.img_size), old_row)
                continue
            elif offline_only:
                skipped += 1
                failures.append(not_computed_row(t, "OfflineOnly", "it computes nothing new: --offline-only",
                                                 version))
                continue
        if t.spec is None:
            failures.append(failure_row(t, "resolve", "NoDefinition", f"no timm/torchvision/keras definition for "
                                        f"{t.model_source} model {t.model!r}", version))
            continue
        if over_budget and not has_cached_result(cache, t, batch):
            skipped += 1
            failures.append(not_computed_row(t, "TimeBudget", f"its time budget of {time_budget_s:g} s was spent",
                                             version))
            continue
        bar.set_postfix_str(t.slug[:40])
        res, static, fail = runner.run(t, batch, archs, cache, version, retry_failed, nvcc_archs, recount,
                                       (t.model_key, t.img_size) in recomputing)
        if static is not None and (t.model_key, t.img_size) not in statics:
            statics[(t.model_key, t.img_size)] = static_row(t, static)
        if fail is not None and len(legacy):
            # not recomputed (no zoo extra, or it failed now): the older rows stay
            if legacy_is_kernels:
                carried_kernels.append((t, legacy))
            else:
                carried.append(legacy)
            if fail["stage"] == MISSING_EXTRA:
                continue
        if fail is not None and fail["stage"] == MISSING_EXTRA:
            missing_extra += 1
            if missing_extra == 1:
                log(f"[zoo] {t.slug}: skipped, {fail['reason']}")
            failures.append(not_computed_row(t, "MissingZooExtra", fail["reason"], version))
            continue
        if res is not None:
            results.append((t, res))
            log(f"[zoo] {t.slug}: {res['seconds']:.1f} s "
                f"({', '.join(f'{k} {v:.1f}' for k, v in res['stage_seconds'].items())})")
        else:
            assert fail is not None
            failures.append(failure_row(t, fail["stage"], fail["error"], fail["reason"], version, fail["seconds"]))
            log(f"[zoo] {t.slug}: FAILED at {fail['stage']}: {fail['reason'][:160]}")
    # A committed static row stays for a target this run did not (re)compute (no zoo extra, time budget, a model
    # interrupted before its result): static features do not depend on the PTX path.
    for t in targets:
        if (t.model_key, t.img_size) not in statics and (old_row := committed_static_row(old_static, t)) is not None:
            statics[(t.model_key, t.img_size)] = old_row
    # Extra compiled batch sizes (`extra_batches`) for targets whose measured batches use them.
    extra: list[tuple[Target, dict]] = []
    carried_batches = {(t.model_key, t.img_size): set(k["batch_size"].astype(int)) for t, k in carried_kernels}
    # Extra batches an earlier run did not use stay unused (as failed targets do) until --retry-failed.
    old_batch_fails = batch_failures_by_key(prev_batch_failures)
    for t in tqdm([t for t, _ in results] + [t for t, _ in carried_kernels], desc="zoo ptx extra batches",
                  unit="model", disable=not extra_batches):
        for b in batches_needed(t, keys, list(extra_batches)):
            if b in carried_batches.get((t.model_key, t.img_size), set()):
                continue
            cached = has_cached_result(cache, t, b)
            known = old_batch_fails.get((t.model_key, t.img_size, b))
            outdated = known is not None and known["stage"] in OUTDATED_BATCH_FAILURES
            if known is not None and not cached and not retry_failed and not (outdated and not offline_only):
                batch_failures.append(known)
                continue
            over = time_budget_s is not None and time.perf_counter() - started > time_budget_s
            if not cached and (offline_only or over):
                skipped_batches += 1
                continue
            res, _static, fail = runner.run(t, b, archs, cache, version, retry_failed, nvcc_archs, recount,
                                            (t.model_key, t.img_size) in recomputing)
            if fail is not None and fail["stage"] == MISSING_EXTRA and known is not None:
                batch_failures.append(known)  # could not be retried here: the entry stays
                continue
            if res is not None and (dropped := module_fallback(res)):
                # Not comparable with its batch-1 counts (docs/zoo.md "Batch size"): its rows keep the batch-1 rule.
                batch_failures.append(batch_failure_row(
                    t.model_key, t.img_size, b, "schedule_fallback", f"scheduled only with dlight's {dropped} rules "
                    "dropped for the whole module (every PrimFunc, not only the one that failed)"))
            elif res is not None:
                extra.append((t, res))
            elif fail is not None and fail["stage"] != MISSING_EXTRA:
                log(f"[zoo] {t.slug} batch {b}: FAILED at {fail['stage']}: {fail['reason'][:160]} "
                    "(its rows scale from a smaller compiled batch)")
                batch_failures.append(batch_failure_row(t.model_key, t.img_size, b, fail["stage"], fail["reason"]))
    runner.close()
    # Per-kernel rows (computed now, cached, or carried from the committed table) -> network rows: the network
    # table is always derived from the kernel table.
    frames = ([kernel_frame(t.model_key, t.img_size, r) for t, r in results + extra]
              + [k for _, k in carried_kernels])
    kernels = finish(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    kernels = drop_implausible(kernels, statics, {(t.model_key, t.img_size): t for t in targets}, batch,
                               failures, batch_failures, version, log)
    derived = as_results(network_from_kernels(kernels)) if len(kernels) else {}
    by_target = {(t.model_key, t.img_size): t for t, _ in results} | {(t.model_key, t.img_size): t
                                                                      for t, _ in carried_kernels}
    net_results = [(by_target[k], r) for k, r in derived.items()]
    counts = count_table(net_results, carried, keys, nvcc_archs)
    fails = pd.DataFrame(failures, columns=list(FAILURE_COLUMNS))
    fails = canonical(fails, ["model_key", "img_size"], sort_columns=False)
    static_df = canonical(pd.DataFrame(list(statics.values())), ["model_key", "static_img_size"])
    for path in (out_counts, out_failures, out_static):
        path.parent.mkdir(parents=True, exist_ok=True)
    if out_kernels is not None:
        out_kernels.parent.mkdir(parents=True, exist_ok=True)
        kernels.to_parquet(out_kernels, index=False, compression="zstd")
    counts.to_parquet(out_counts, index=False)
    fails.to_csv(out_failures, index=False)
    static_df.to_parquet(out_static, index=False)
    secs = [r["seconds"] for _, r in results]
    summary = {
        "targets": len(targets), "computed_or_cached": len(results),
        "carried_from_table": len(carried) + len(carried_kernels), "carried_network_only": len(carried),
        "kernel_rows": len(kernels), "kernel_dedup": dedup_summary(kernels),
        "distinct_models_with_counts": int(counts["model_key"].nunique()) if len(counts) else 0,
        "failures": len(computed_failures(fails)), "not_computed": int((fails["stage"] == NOT_COMPUTED).sum()),
        "skipped_time_budget": skipped, "skipped_missing_extra": missing_extra,
        "stale_definitions": stale_definitions,
        "extra_batches": sorted(extra_batches), "extra_batch_results": len(extra),
        "pairs_by_compiled_batch": {str(b): int(n) for b, n in kernels.drop_duplicates(
            ["model_key", "img_size", "batch_size"])["batch_size"].value_counts().sort_index().items()}
        if len(kernels) else {},
        "extra_batches_skipped": skipped_batches, "extra_batch_failures": batch_failures,
        "count_methods": counts["count_method"].value_counts().to_dict() if "count_method" in counts else {},
        "count_rows": len(counts),
        "static_rows": len(static_df), "archs": archs,
        "median_seconds_per_model": float(pd.Series(secs).median()) if secs else math.nan,
        "failure_reasons": fails.groupby(["stage", "error"]).size().sort_values(ascending=False)
        .head(10).to_dict() if len(fails) else {},
    }
    summary["failure_reasons"] = {f"{k[0]}:{k[1]}": int(v) for k, v in summary["failure_reasons"].items()}
    return summary


# Summary fields that depend on the machine or on what this run found in its cache, not on the tables.
_UNSTABLE = ("median_seconds_per_model", "computed_or_cached", "carried_from_table", "carried_network_only",
             "skipped_time_budget", "skipped_missing_extra", "extra_batches_skipped", "extra_batch_results", "archs")


def write_stage_reports(summary: dict[str, Any], batch_failures: Path, metrics: Path) -> None:
    """The stage's summary as a DVC metric (what the tables hold; no timings, so the same tables write the same
    bytes) and every extra compiled batch that was not used, with its reason (a committed CSV)."""
    fails = pd.DataFrame(summary.get("extra_batch_failures") or [], columns=list(BATCH_FAILURE_COLUMNS))
    batch_failures.parent.mkdir(parents=True, exist_ok=True)
    canonical(fails, ["model_key", "img_size", "batch_size"], sort_columns=False).to_csv(batch_failures, index=False)
    out = {k: v for k, v in summary.items() if k not in _UNSTABLE and k != "extra_batch_failures"}
    out["extra_batch_failures"] = {str(k): int(v) for k, v in fails["stage"].value_counts().sort_index().items()}
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
