"""DVC stage `ptx`: static features and executed-PTX counts for every measured CNN the zoo can build.

Incremental: each (definition, input size, compiled batch) keeps its result under the cache folder
(`<cache>/<source>__<model>__<size>__b<batch>/result.json` or `failure.json`); rows of the committed tables
are reused as well, so a fresh clone with the committed tables recomputes nothing. Models run in order of the
number of GPUs they were measured on (most first), with a progress bar and per-model timing.
"""

from __future__ import annotations

import json
import math
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from src.zoo.kernel_table import (
    MAX_FMA_PER_MAC,
    as_results,
    dedup_summary,
    finish,
    implausible_results,
    kernel_frame,
    network_from_kernels,
)
from src.zoo.names import ModelSpec, spec_for_measured
from src.zoo.pipeline import choose_nvcc_arch
from src.zoo.resolve import MissingFrameworkError

# Definition precedence when several measured sources share one model_key (the join key holds one row).
SOURCE_PRIORITY = {"torchvision": 0, "timm": 1, "dlinfbench": 2, "tf_cnn_benchmarks": 3}
MISSING_EXTRA = "missing_extra"
# Failure-table stage of a target this run did not compile (no zoo extra, offline, time budget): named with the
# reason, never dropped silently, and not a failure: the next run that can compile it does (`_previous`, warm).
NOT_COMPUTED = "not_computed"
# Shared by all models (and all stage shards): each distinct kernel's PTX and launch counts.
KERNELS_DIR = "kernels"
COUNT_COLUMNS = ("thread_instructions", "warp_instructions", "predicated_off", "kernels", "launches")


@dataclass
class Target:
    """One model to build: its measured identity, the definition to use and how widely it was measured."""

    model_key: str
    model: str
    model_source: str
    img_size: int
    n_gpus: int
    spec: ModelSpec | None
    gmacs: float = math.nan

    @property
    def slug(self) -> str:
        assert self.spec is not None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.spec.name)
        return f"{self.spec.source}__{name}__{self.img_size}"


def cc_to_arch(cc: float) -> str:
    """Compute capability 8.6 -> 'sm_86' (12.0 -> 'sm_120')."""
    major = int(cc)
    minor = int(round((cc - major) * 10))
    return f"sm_{major}{minor}"


def select_targets(meas: pd.DataFrame, gpus: pd.DataFrame, sources: list[str] | None = None,
                   limit: int | None = None) -> tuple[list[Target], pd.DataFrame]:
    """Measured GPU rows of CNNs -> targets (model_key, img_size), most GPUs first; plus the rows' keys."""
    df = meas.loc[~meas["is_cpu"].astype(bool)]
    if "is_cnn" in df.columns:
        df = df.loc[df["is_cnn"].astype(bool)]
    if sources:
        df = df.loc[df["model_source"].isin(sources)]
    df = df.merge(gpus[["gpu", "compute_capability"]], on="gpu", how="left")
    df = df.loc[df["compute_capability"].notna()]
    # One definition per model_key: the highest-priority measured source.
    df = df.assign(_prio=df["model_source"].map(SOURCE_PRIORITY).fillna(9))
    best = df.sort_values("_prio").groupby("model_key", sort=False).first()[["model", "model_source"]]
    n_gpus = df.groupby("model_key")["gpu"].nunique()
    n_rows = df.groupby(["model_key", "img_size"]).size()
    gmacs = df.groupby("model_key")["gmacs"].median() if "gmacs" in df.columns else pd.Series(dtype=float)
    primary = n_rows.reset_index().sort_values(0, ascending=False).drop_duplicates("model_key")
    primary_keys = set(zip(primary["model_key"], primary["img_size"], strict=True))
    targets = []
    for (key, size), _grp in df.groupby(["model_key", "img_size"], sort=False):
        model, source = best.loc[key, "model"], best.loc[key, "model_source"]
        spec = spec_for_measured(str(model), str(key), str(source), int(size))
        targets.append(Target(str(key), str(model), str(source), int(size), int(n_gpus[key]), spec,
                              float(gmacs.get(key, math.nan))))
    # Each model's most-measured input size first (widest coverage of distinct CNNs), then other sizes;
    # within each pass the benchmark suites' nets first, then timm by number of GPUs measured on, cheapest
    # (fewest GMACs, timm's own figure) first so that a time budget covers as many CNNs as possible.
    order = {"torchvision": 0, "dlinfbench": 0, "tf_cnn_benchmarks": 0, "timm": 1}
    targets.sort(key=lambda t: ((t.model_key, t.img_size) not in primary_keys, order.get(t.model_source, 3),
                                -t.n_gpus, t.gmacs if t.gmacs == t.gmacs else 1e9, t.model_key, t.img_size))
    if limit is not None:
        targets = targets[:limit]
    keys = df[["model_key", "img_size", "batch_size", "compute_capability"]].drop_duplicates()
    return targets, keys


def _cached(path: Path, version: str, archs: list[str]) -> dict | None:
    """A cached result (with its per-kernel counts) or failure of this zoo version covering `archs`."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("zoo_version") != version:
        return None
    if "by_arch" in data and not all(a in data["by_arch"] for a in archs):
        return None
    per_kernel = path.parent / "per_kernel.json"
    if "by_arch" in data and per_kernel.exists():
        for arch, launches in json.loads(per_kernel.read_text()).items():
            if arch in data["by_arch"]:
                data["by_arch"][arch]["per_kernel"] = launches
    return data


def run_target(target: Target, batch: int, archs: list[str], cache: Path, version: str,
               retry_failed: bool = False, nvcc_archs: list[str] | None = None, recount: bool = False,
               gates_first: bool = False) -> tuple[dict | None, dict | None, dict | None]:
    """(ptx result, static features, failure) for one target at one compiled batch size, cached.

    recount: recount cached models from their stored PTX and launch lists (after a PTX-analyzer change).
    A result of the default schedule that recomputes (`recomputes_gates`) is compiled again with channel-gate
    broadcasts materialised; gates_first: compile that variant straight away (a CNN the committed failure table
    lists as recomputing: `recomputing_pairs`).
    """
    from src.zoo.pipeline import ptx_features
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    assert target.spec is not None
    work = cache / f"{target.slug}__b{batch}"
    done = _cached(work / "result.json", version, archs)
    static_path = cache / f"{target.slug}__static.json"
    static = json.loads(static_path.read_text()) if static_path.exists() else None
    if done is not None:
        from src.zoo.pipeline import recount_artifacts, repick_archs, write_result

        done, changed = repick_archs(work, done, archs, nvcc_archs, cache / KERNELS_DIR)
        if recount:
            done = recount_artifacts(work, done, cache / KERNELS_DIR)
        if changed or recount:
            write_result(work, done)
    outdated = None
    if done is not None and module_fallback(done):
        # Scheduled under the earlier module-wide fallback: recompute (each function alone); kept if this
        # environment cannot.
        outdated, done = done, None
    variant = done is not None and recomputes_gates(done, static)
    if variant:
        # Counted with the default schedule, which recomputes its gates: compiled again as the variant that
        # does not (src/zoo/gates.py); kept (and judged implausible later) if this environment cannot.
        outdated, done = done, None
    variant = variant or gates_first
    if done is not None and static is not None:
        return done, static, None
    failed = _cached(work / "failure.json", version, archs)
    if failed is not None and not retry_failed:
        return None, static, failed
    t0 = time.perf_counter()
    stage = "build"
    try:
        built = build(target.spec.source, target.spec.name, target.spec.input_size)
        build_s = time.perf_counter() - t0
        if static is None:
            stage = "static"
            static = static_features(built)
            static_path.parent.mkdir(parents=True, exist_ok=True)
            static_path.write_text(json.dumps(static, indent=1))
        if done is None:
            stage = "ptx"
            done = ptx_features(target.spec.source, target.spec.name, target.img_size, batch, archs,
                                workdir=work, built=built, nvcc_archs=nvcc_archs, build_seconds=build_s,
                                kernel_cache=cache / KERNELS_DIR, materialise_gates=variant)
            if not variant and recomputes_gates(done, static):
                done = ptx_features(target.spec.source, target.spec.name, target.img_size, batch, archs,
                                    workdir=work, built=built, nvcc_archs=nvcc_archs, build_seconds=build_s,
                                    kernel_cache=cache / KERNELS_DIR, materialise_gates=True)
        return done, static, None
    except MissingFrameworkError as exc:
        if outdated is not None:
            return outdated, static, None
        # Not the model's fault: this environment lacks the zoo extra. Reported as skipped, never cached.
        return None, static, {"zoo_version": version, "stage": MISSING_EXTRA, "error": type(exc).__name__,
                              "reason": str(exc)[:400], "seconds": time.perf_counter() - t0}
    except Exception as exc:  # every failure is recorded with its stage and reason, never dropped
        stage_name = getattr(exc, "stage", stage)
        msg = str(exc).strip().splitlines()
        failure = {
            "zoo_version": version, "stage": stage_name, "error": type(exc).__name__,
            "reason": (msg[0] if msg else type(exc).__name__)[:400], "seconds": time.perf_counter() - t0,
            "traceback_tail": traceback.format_exc()[-1500:],
        }
        work.mkdir(parents=True, exist_ok=True)
        (work / "failure.json").write_text(json.dumps(failure, indent=1))
        return None, static, failure


def fma_per_mac(result: dict, static: dict | None) -> float | None:
    """Executed FMAs per multiply-accumulate of the CNN (the most over the result's PTX archs); None without MACs."""
    macs = float((static or {}).get("macs") or 0.0)
    if macs <= 0:
        return None
    fmas = [float(counts.get("by_class", {}).get("fma", 0)) for counts in result.get("by_arch", {}).values()]
    return max(fmas, default=0.0) / (macs * int(result.get("batch_size") or 1))


def recomputes_gates(result: dict, static: dict | None) -> bool:
    """A result of the default schedule that counts recomputation, not the CNN (more than MAX_FMA_PER_MAC FMAs per
    MAC): such a CNN is compiled again with its channel-gate broadcasts materialised (src/zoo/gates.py)."""
    if result.get("schedule_variant"):
        return False
    ratio = fma_per_mac(result, static)
    return ratio is not None and ratio > MAX_FMA_PER_MAC


def recomputing_pairs(failures: Path) -> set[tuple[str, int]]:
    """(model_key, img_size) pairs a failure table lists as counting a recomputing schedule (RecomputingSchedule)."""
    if not failures.exists() or failures.stat().st_size <= 1:
        return set()
    f = pd.read_csv(failures)
    if "error" not in f.columns:
        return set()
    f = f.loc[f["error"] == "RecomputingSchedule"]
    return set(zip(f["model_key"].astype(str), f["img_size"].astype(int), strict=True))


def module_fallback(result: dict) -> str:
    """The dlight rules a result's whole module was scheduled without ('' if none), under the module-wide
    fallback used before each PrimFunc was scheduled alone (src/zoo/schedule.py); such results are outdated.

    Why it matters: the rule set was dropped for the whole module, so one squeeze-excite matmul that dlight's Matmul
    rule cannot schedule at batch 32 sent every convolution of the CNN to the naive Fallback schedule: measured on
    the 239 CNNs first compiled at 32, the batch-1 rule's error was a median -15 % (down to -97 %, 38x the per-sample
    count) on the 133 scheduled so, +1.8 % on the 106 others (docs/zoo.md)."""
    calls = result.get("non_kernel_calls") or {}
    return "+".join(k.removeprefix("schedule_without_") for k in sorted(calls) if k.startswith("schedule_without_"))


def class_columns(results: list[dict]) -> tuple[list[str], list[str]]:
    classes, spaces = set(), set()
    for r in results:
        for c in r["by_arch"].values():
            classes.update(c.get("by_class", {}))
            spaces.update(c.get("bytes_by_space", {}))
    return sorted(classes), sorted(spaces)


def _col(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def compiled_batch_for(measured: int, compiled: list[int]) -> int:
    """The compiled batch whose counts stand for a measured batch: the largest compiled one not above it (per-sample
    counts fall as tiles fill with batch and level off, docs/zoo.md), else the smallest."""
    below = [c for c in compiled if c <= measured]
    return max(below) if below else min(compiled)


def batches_needed(target: Target, keys: pd.DataFrame, buckets: list[int]) -> list[int]:
    """The extra compiled batch sizes (of `buckets`) that some measured batch of this target would use."""
    mine = keys.loc[(keys["model_key"] == target.model_key) & (keys["img_size"] == target.img_size), "batch_size"]
    compiled = sorted({1, *buckets})
    return sorted({compiled_batch_for(int(b), compiled) for b in mine.unique()} - {1})


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
            row[f"ptx_class_{_col(k)}"] = float(c["by_class"].get(k, 0)) * f
        for k in spaces:
            row[f"ptx_bytes_{_col(k)}"] = float(c["bytes_by_space"].get(k, 0)) * f
        rows.append(row)
    return rows


def _static_of(old_static: pd.DataFrame, target: Target) -> dict | None:
    """The committed static row of a target's (model_key, input size), if any."""
    if not len(old_static):
        return None
    hit = old_static.loc[(old_static["model_key"] == target.model_key)
                         & (old_static["static_img_size"].astype(int) == target.img_size)]
    return hit.iloc[0].to_dict() if len(hit) else None


def static_row(target: Target, static: dict) -> dict:
    """Static-features row of one (model_key, input size): MACs and activations depend on the resolution, so every
    measured size gets its own row (`static_img_size`), which is how the features stage joins them."""
    row = {"model_key": target.model_key, "static_img_size": target.img_size,
           "zoo_source": static["source"], "zoo_model": static["model"]}
    skip = {"source", "model", "img_size", "framework"}
    row.update({k: v for k, v in static.items() if k not in skip})
    return row


class _Runner:
    """Runs targets in a worker process with a per-model time limit (a stuck compile cannot stall the stage).

    The worker keeps torch/TVM imported between models and is replaced after a timeout or every 25 models.
    """

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.pool = None

    def _pool(self):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                            max_tasks_per_child=25)
        return self.pool

    def run(self, target: Target, batch: int, archs: list[str], cache: Path, version: str,
            retry_failed: bool, nvcc_archs: list[str] | None, recount: bool = False, gates_first: bool = False
            ) -> tuple[dict | None, dict | None, dict | None]:
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        if self.timeout_s is None:
            return run_target(target, batch, archs, cache, version, retry_failed, nvcc_archs, recount, gates_first)
        t0 = time.perf_counter()
        fut = self._pool().submit(run_target, target, batch, archs, cache, version, retry_failed, nvcc_archs,
                                  recount, gates_first)
        try:
            return fut.result(timeout=self.timeout_s)
        except (FutureTimeout, BrokenProcessPool) as exc:
            self.kill()
            why = (f"model -> PTX -> counts took longer than {self.timeout_s:.0f} s"
                   if isinstance(exc, FutureTimeout) else "worker process died (out of memory?)")
            failure = {"zoo_version": version, "stage": "timeout" if isinstance(exc, FutureTimeout) else "crash",
                       "error": type(exc).__name__, "reason": why, "seconds": time.perf_counter() - t0}
            work = cache / f"{target.slug}__b{batch}"
            work.mkdir(parents=True, exist_ok=True)
            (work / "failure.json").write_text(json.dumps(failure, indent=1))
            return None, None, failure

    def kill(self) -> None:
        if self.pool is not None:
            for proc in list(getattr(self.pool, "_processes", {}).values()):
                proc.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None


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


# Stages of ptx_batch_failures.csv entries an earlier scheduling policy caused: retried whenever the zoo extra is
# present (not only with --retry-failed).
OUTDATED_BATCH_FAILURES = ("schedule_fallback",)


# Network count rows of these zoo versions are carried for CNNs that have no per-kernel rows yet: version 1
# compiled each model's CUDA C whole, version 2 compiles each distinct kernel alone; the counts are the same
# (checked on every recomputed CNN, docs/zoo.md). Their rows keep their version, so they stay visible.
LEGACY_COUNT_VERSIONS = ("1",)


def _other_definition(rows: pd.DataFrame, spec: ModelSpec) -> bool:
    """Whether committed rows were computed from another definition than the one the name mapping picks now."""
    if not len(rows) or "zoo_source" not in rows.columns or "zoo_model" not in rows.columns:
        return False
    pairs = set(zip(rows["zoo_source"].astype(str), rows["zoo_model"].astype(str), strict=True))
    return pairs != {(spec.source, spec.name)}


def failure_row(t: Target, stage: str, error: str, reason: str, version: str, seconds: float = 0.0) -> dict:
    """One row of the failure table (`ptx_failures.csv`) for target `t`."""
    return {"model_key": t.model_key, "model": t.model, "model_source": t.model_source, "img_size": t.img_size,
            "n_gpus": t.n_gpus, "zoo_source": t.spec.source if t.spec else "",
            "zoo_model": t.spec.name if t.spec else "", "stage": stage, "error": error, "reason": reason,
            "seconds": float(seconds), "zoo_version": version}


def not_computed_row(t: Target, error: str, why: str, version: str) -> dict:
    """The failure-table row of a target left without counts by this run (see NOT_COMPUTED)."""
    gmacs = "" if math.isnan(t.gmacs) else f", {t.gmacs:.4g} GMACs"
    return failure_row(t, NOT_COMPUTED, error,
                       f"not compiled by this run ({why}); measured on {t.n_gpus} GPU(s){gmacs}. "
                       "`python -m src.zoo warm --batch 1` compiles it into the cache, the next `dvc repro` "
                       "counts it", version)


def computed_failures(f: pd.DataFrame) -> pd.DataFrame:
    """Rows of a failure table that record a real failure (not NOT_COMPUTED targets, which a later run retries)."""
    return f.loc[f["stage"].astype(str) != NOT_COMPUTED] if len(f) and "stage" in f.columns else f


def _previous(counts: Path, failures: Path, static: Path, kernels: Path | None, version: str
              ) -> tuple[pd.DataFrame, ...]:
    """The committed tables of an earlier run (rows of this zoo version; legacy network rows, see above)."""
    c = pd.read_parquet(counts) if counts.exists() else pd.DataFrame()
    if len(c) and "zoo_version" in c.columns:
        c = c.loc[c["zoo_version"].astype(str).isin([version, *LEGACY_COUNT_VERSIONS])]
    else:
        c = pd.DataFrame()
    f = pd.read_csv(failures) if failures.exists() and failures.stat().st_size > 1 else pd.DataFrame()
    if len(f) and "zoo_version" in f.columns:
        f = computed_failures(f.loc[f["zoo_version"].astype(str) == version])
    else:
        f = pd.DataFrame()
    st = pd.read_parquet(static) if static.exists() else pd.DataFrame()
    k = pd.read_parquet(kernels) if kernels is not None and kernels.exists() else pd.DataFrame()
    if len(k):
        k = k.loc[k["zoo_version"].astype(str) == version]
    return c, f, st, k


def _drop_implausible(kernels: pd.DataFrame, statics: dict[tuple[str, int], dict],
                      by_key: dict[tuple[str, int], Target], batch: int, failures: list[dict],
                      batch_failures: list[dict], version: str,
                      log=print) -> pd.DataFrame:
    """Kernel rows without the results that count a recomputing schedule, not the CNN (`implausible_results`).

    A result at the stage's batch fails its whole (CNN, size): every measured batch scales from it. One at an extra
    batch goes to the batch failures; its rows keep the smaller compiled batch. Each names its FMA/MAC and kernel.
    """
    macs = pd.DataFrame([{"model_key": k[0], "img_size": k[1], "macs": float(s.get("macs") or 0.0)}
                         for k, s in statics.items()], columns=["model_key", "img_size", "macs"])
    bad = implausible_results(kernels, macs)
    if bad.empty:
        return kernels
    drop = pd.Series(False, index=kernels.index)
    failed = {(r.model_key, int(r.img_size)) for r in bad.itertuples(index=False) if int(r.batch_size) == batch}
    for r in bad.itertuples(index=False):
        if int(r.batch_size) != batch and (r.model_key, int(r.img_size)) in failed:
            continue  # its whole (CNN, size) failed at the stage's batch
        reason = (f"executes {r.fma_per_mac:.0f} FMAs per multiply-accumulate of the CNN (limit "
                  f"{MAX_FMA_PER_MAC:.0f}; a count of a schedule that recomputes, not of the network), most in "
                  f"{r.worst_kernel}")
        same = (kernels["model_key"] == r.model_key) & (kernels["img_size"] == r.img_size)
        if int(r.batch_size) == batch:
            t = by_key[(r.model_key, int(r.img_size))]
            drop |= same
            failures.append(failure_row(t, "implausible", "RecomputingSchedule", reason, version))
        else:
            drop |= same & (kernels["batch_size"] == r.batch_size)
            batch_failures.append({"model_key": r.model_key, "img_size": int(r.img_size),
                                   "batch_size": int(r.batch_size), "stage": "implausible", "reason": reason})
        log(f"[zoo] {r.model_key} {r.img_size} batch {r.batch_size}: not used, {reason[:160]}")
    return kernels.loc[~drop].reset_index(drop=True)


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
    old_counts, old_fails, old_static, old_kernels = _previous(out_counts, out_failures, out_static, out_kernels,
                                                               version)
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
    runner = _Runner(model_timeout_s)
    bar = tqdm(targets, desc="zoo ptx", unit="model")
    for t in bar:
        legacy = pd.DataFrame()  # network rows of an older zoo version: replaced when this run can recompute
        legacy_is_kernels = False
        over_budget = time_budget_s is not None and time.perf_counter() - started > time_budget_s
        if t.spec is not None and not (cache / f"{t.slug}__b{batch}" / "result.json").exists():
            # A fresh clone has the committed tables but no cache: reuse their rows instead of recompiling.
            prev_k = old_kernels.loc[(old_kernels["model_key"] == t.model_key)
                                     & (old_kernels["img_size"] == t.img_size)] if len(old_kernels) else old_kernels
            prev = old_counts.loc[(old_counts["model_key"] == t.model_key)
                                  & (old_counts["img_size"] == t.img_size)] if len(old_counts) else old_counts
            prev_fail = old_fails.loc[(old_fails["model_key"] == t.model_key)
                                      & (old_fails["img_size"] == t.img_size)] if len(old_fails) else old_fails
            can_compute = not (offline_only or over_budget)
            stale = any(_other_definition(df, t.spec) for df in (prev_k, prev, prev_fail))
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
                old_row = _static_of(old_static, t)
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
        if over_budget:
            cached = (cache / f"{t.slug}__b{batch}" / "result.json").exists()
            if not cached:
                skipped += 1
                failures.append(not_computed_row(t, "TimeBudget", f"its time budget of {time_budget_s:g} s was "
                                                 "spent", version))
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
        if (t.model_key, t.img_size) not in statics and (old_row := _static_of(old_static, t)) is not None:
            statics[(t.model_key, t.img_size)] = old_row
    # Extra compiled batch sizes (`extra_batches`) for targets whose measured batches use them.
    extra: list[tuple[Target, dict]] = []
    carried_batches = {(t.model_key, t.img_size): set(k["batch_size"].astype(int)) for t, k in carried_kernels}
    # Extra batches an earlier run did not use stay unused (as failed targets do) until --retry-failed.
    old_batch_fails: dict[tuple[str, int, int], dict] = {}
    if prev_batch_failures is not None and prev_batch_failures.exists() and prev_batch_failures.stat().st_size > 1:
        for row in pd.read_csv(prev_batch_failures).to_dict("records"):
            old_batch_fails[(str(row["model_key"]), int(row["img_size"]), int(row["batch_size"]))] = row
    for t in tqdm([t for t, _ in results] + [t for t, _ in carried_kernels], desc="zoo ptx extra batches",
                  unit="model", disable=not extra_batches):
        for b in batches_needed(t, keys, list(extra_batches)):
            if b in carried_batches.get((t.model_key, t.img_size), set()):
                continue
            cached = (cache / f"{t.slug}__b{b}" / "result.json").exists()
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
                batch_failures.append({"model_key": t.model_key, "img_size": t.img_size, "batch_size": b,
                                       "stage": "schedule_fallback",
                                       "reason": f"scheduled only with dlight's {dropped} rules dropped for the "
                                                 "whole module (every PrimFunc, not only the one that failed)"})
            elif res is not None:
                extra.append((t, res))
            elif fail is not None and fail["stage"] != MISSING_EXTRA:
                log(f"[zoo] {t.slug} batch {b}: FAILED at {fail['stage']}: {fail['reason'][:160]} "
                    "(its rows scale from a smaller compiled batch)")
                batch_failures.append({"model_key": t.model_key, "img_size": t.img_size, "batch_size": b,
                                       "stage": fail["stage"], "reason": fail["reason"]})
    runner.close()
    # Per-kernel rows (computed now, cached, or carried from the committed table) -> network rows: the network
    # table is always derived from the kernel table.
    frames = ([kernel_frame(t.model_key, t.img_size, r) for t, r in results + extra]
              + [k for _, k in carried_kernels])
    kernels = finish(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    kernels = _drop_implausible(kernels, statics, {(t.model_key, t.img_size): t for t in targets}, batch,
                                failures, batch_failures, version, log)
    derived = as_results(network_from_kernels(kernels)) if len(kernels) else {}
    by_target = {(t.model_key, t.img_size): t for t, _ in results} | {(t.model_key, t.img_size): t
                                                                      for t, _ in carried_kernels}
    net_results = [(by_target[k], r) for k, r in derived.items()]
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
    fails = pd.DataFrame(failures, columns=["model_key", "model", "model_source", "img_size", "n_gpus",
                                            "zoo_source", "zoo_model", "stage", "error", "reason", "seconds",
                                            "zoo_version"])
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
    fails = pd.DataFrame(summary.get("extra_batch_failures") or [],
                         columns=["model_key", "img_size", "batch_size", "stage", "reason"])
    batch_failures.parent.mkdir(parents=True, exist_ok=True)
    canonical(fails, ["model_key", "img_size", "batch_size"], sort_columns=False).to_csv(batch_failures, index=False)
    out = {k: v for k, v in summary.items() if k not in _UNSTABLE and k != "extra_batch_failures"}
    out["extra_batch_failures"] = {str(k): int(v) for k, v in fails["stage"].value_counts().sort_index().items()}
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
