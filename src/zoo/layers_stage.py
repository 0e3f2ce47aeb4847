"""DVC stage `layers`: the per-layer table (src/zoo/layers.py) of every measured CNN, a failure table, a summary.

Targets are the (model_key, img_size) pairs of the measured GPU rows of CNNs, with the definition the `ptx` stage
uses for each model_key (`src.zoo.targets.select_targets`: torchvision, then timm, DLInfBench, tf_cnn_benchmarks;
docs/zoo.md). Incremental and reproducible without the zoo extra: the committed table and failure list are the
cache; a pair already in them (same `layers_version`) is never rebuilt, so a fresh clone without torch
recomputes nothing, and with the extra only missing pairs are built (in worker processes, each model under a
time limit). Nothing is dropped silently: a pair without rows is in the failure table with its reason, or
counted in the summary as skipped (no zoo extra here, time budget).
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from src.zoo.committed_tables import versioned_failures, versioned_rows
from src.zoo.failure_table import MISSING_EXTRA, NOT_COMPUTED, computed_failures
from src.zoo.layers import LAYERS_VERSION
from src.zoo.op_rules import CONV_FIELDS, MAC_KINDS
from src.zoo.targets import Target, select_targets

FAILURE_COLUMNS = ["model_key", "model", "model_source", "img_size", "n_gpus", "zoo_source", "zoo_model", "stage",
                   "error", "reason", "seconds", "layers_version"]


# ---- one target (runs in a worker process) ---------------------------------------------------------------------
class _Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def warm_worker() -> None:
    """Pool initializer: import the frameworks once per worker, so a model's seconds do not include them."""
    for mod in ("torch", "torchvision", "timm", "keras"):
        try:
            __import__(mod)
        except ImportError:
            pass


def build_target(model_key: str, source: str, name: str, img_size: int,
                 timeout_s: float | None = None) -> tuple[pd.DataFrame | None, dict | None]:
    """(compact rows, None) or (None, failure) for one (definition, input size); failures carry a stage."""
    import signal

    from src.zoo.layers import BatchMismatchError, build_meta, layer_rows
    from src.zoo.resolve import MissingFrameworkError

    t0 = time.perf_counter()
    stage = "build"
    use_alarm = timeout_s is not None and hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, int(timeout_s)))
    try:
        try:
            import torch

            torch.set_num_threads(1)  # nothing is computed on meta tensors; keep the other worker's core free
        except ImportError:
            pass
        built, how = build_meta(source, name, img_size)
        stage = "record"
        rows, _notes = layer_rows(built)
        df = pd.DataFrame(rows)
        df.insert(0, "zoo_model", built.spec.name)
        df.insert(0, "zoo_source", built.spec.source)
        df.insert(0, "img_size", int(built.input_size))
        df.insert(0, "model_key", model_key)
        df["build"] = how
        df["seconds"] = time.perf_counter() - t0
        df["layers_version"] = LAYERS_VERSION
        return compact(df), None
    except MissingFrameworkError as exc:  # this environment lacks the zoo extra: skipped, never recorded
        return None, {"stage": MISSING_EXTRA, "error": type(exc).__name__, "reason": str(exc)[:400],
                      "seconds": time.perf_counter() - t0}
    except _Timeout:
        return None, {"stage": "timeout", "error": "Timeout",
                      "reason": f"per-layer recording took longer than {timeout_s:.0f} s (stopped at {stage})",
                      "seconds": time.perf_counter() - t0}
    except BatchMismatchError as exc:
        return None, {"stage": "batch_dependent_ops", "error": type(exc).__name__, "reason": str(exc)[:400],
                      "seconds": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - every failure is recorded with its stage and reason
        msg = str(exc).strip().splitlines()
        return None, {"stage": stage, "error": type(exc).__name__,
                      "reason": (msg[0] if msg else type(exc).__name__)[:400],
                      "seconds": time.perf_counter() - t0, "traceback_tail": traceback.format_exc()[-800:]}
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)


# ---- the committed table's column types ------------------------------------------------------------------------
# Column types of the committed table (compact parquet: categoricals, float32 quantities, small ints).
CATEGORICAL = ("model_key", "zoo_source", "zoo_model", "pass", "op", "kind", "out_shape", "layers_version")


def _text_category(column: pd.Series) -> pd.Series:
    """`column.astype("string").astype("category")`, converting each distinct value once (the table's text columns
    hold a few thousand values over millions of rows)."""
    codes, uniques = pd.factorize(column)  # -1 where missing
    text = pd.Series(pd.array(np.asarray(uniques, dtype=object), dtype="string"))
    categories = pd.Index(text.drop_duplicates().sort_values(), dtype="string")
    remap = categories.get_indexer(text) if len(text) else np.zeros(0, dtype=np.intp)
    new_codes = np.where(codes >= 0, remap[np.clip(codes, 0, None)] if len(remap) else -1, -1)
    return pd.Series(pd.Categorical.from_codes(new_codes, categories=categories), index=column.index,
                     name=column.name)


def compact(df: pd.DataFrame) -> pd.DataFrame:
    """Categorical strings, float32 quantities and nullable small ints for the committed parquet."""
    out = df.copy()
    for c in CATEGORICAL:
        if c in out.columns:
            out[c] = _text_category(out[c])
    for c in out.columns:
        if c.endswith(("_per_sample", "_fixed")) or c in ("weight_elems", "param_elems_new", "seconds"):
            out[c] = out[c].astype("float32")
    for c in CONV_FIELDS:
        if c in out.columns:
            out[c] = pd.array(out[c], dtype="Int32")
    for c, t in (("img_size", "int16"), ("op_index", "int32"), ("batch_lo", "int16"), ("batch_hi", "int16")):
        if c in out.columns:
            out[c] = out[c].astype(t)
    if "launches_kernel" in out.columns:
        out["launches_kernel"] = out["launches_kernel"].astype(bool)
    return out


# ---- the stage -------------------------------------------------------------------------------------------------
def _previous(table: Path, failures: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Committed rows and failures of the current layers_version (the stage's cache)."""
    return (versioned_rows(table, "layers_version", [LAYERS_VERSION]),
            versioned_failures(failures, "layers_version", LAYERS_VERSION, FAILURE_COLUMNS))


def _pairs(df: pd.DataFrame) -> set[tuple[str, int]]:
    if df is None or not len(df):
        return set()
    # distinct pairs first: the table has millions of rows of a thousand pairs, and text conversion per row was slow
    pairs = df[["model_key", "img_size"]].drop_duplicates()
    return set(zip(pairs["model_key"].astype(str), pairs["img_size"].astype(int), strict=True))


def _in_pairs(df: pd.DataFrame, pairs: set[tuple[str, int]]) -> np.ndarray:
    """Per row of `df`: is its (model_key, img_size) one of `pairs` (decided once per distinct pair)."""
    codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([df["model_key"], df["img_size"]]))
    hit = np.array([(str(k), int(s)) in pairs for k, s in uniques], dtype=bool)
    return hit[codes] if len(df) else np.zeros(0, dtype=bool)


def _failure_row(t: Target, fail: dict) -> dict:
    return {"model_key": t.model_key, "model": t.model, "model_source": t.model_source, "img_size": t.img_size,
            "n_gpus": t.n_gpus, "zoo_source": t.spec.source if t.spec else "",
            "zoo_model": t.spec.name if t.spec else "", "stage": fail["stage"], "error": fail["error"],
            "reason": fail["reason"], "seconds": round(float(fail.get("seconds", 0.0)), 3),
            "layers_version": LAYERS_VERSION}


def _not_computed(t: Target, error: str, why: str) -> dict:
    """Failure-table row of a target this run did not build (NOT_COMPUTED: named, never dropped silently, and
    taken up by the next run that can build it)."""
    return _failure_row(t, {"stage": NOT_COMPUTED, "error": error,
                            "reason": f"not built by this run ({why}); measured on {t.n_gpus} GPU(s). "
                                      "`python -m src.zoo layers-table` builds it"})


def _write(table: pd.DataFrame, failures: pd.DataFrame, out_table: Path, out_failures: Path) -> None:
    out_table.parent.mkdir(parents=True, exist_ok=True)
    out_failures.parent.mkdir(parents=True, exist_ok=True)
    if len(table):
        # model, size, pass in the order forward, train_forward, backward, then op order
        codes, uniques = pd.factorize(table["pass"])
        rank = {"forward": 0, "train_forward": 1, "backward": 2}
        order = np.array([rank.get(str(u), np.nan) for u in uniques], dtype=float)[codes]
        table = compact(table.assign(_o=order)
                        .sort_values(["model_key", "img_size", "_o", "op_index"], kind="stable")
                        .drop(columns="_o").reset_index(drop=True))
    tmp = out_table.with_suffix(".parquet.tmp")
    # Compact encodings (measured on the full table: 8.7 MB with defaults -> 5.8 MB): float32 quantities
    # byte-stream-split (their exponent bytes compress well), op_index (a running count) delta-encoded, one row
    # group; everything else dictionary-encoded.
    floats = [c for c in table.columns if str(table[c].dtype) == "float32"]
    plain = set(floats) | ({"op_index"} if "op_index" in table.columns else set())
    encoding = {**{c: "BYTE_STREAM_SPLIT" for c in floats},
                **({"op_index": "DELTA_BINARY_PACKED"} if "op_index" in table.columns else {})}
    table.to_parquet(tmp, index=False, compression="zstd", compression_level=9, row_group_size=4_000_000,
                     use_dictionary=[c for c in table.columns if c not in plain], column_encoding=encoding or None)
    tmp.replace(out_table)
    failures = failures.reindex(columns=FAILURE_COLUMNS).sort_values(["model_key", "img_size"], kind="stable")
    failures.to_csv(out_failures, index=False)


class _Pool:
    """Worker processes (spawn) for targets; a crashed worker is replaced and its target recorded as a failure."""

    def __init__(self, workers: int) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self.ctx = mp.get_context("spawn")
        self.make = lambda: ProcessPoolExecutor(max_workers=workers, mp_context=self.ctx, max_tasks_per_child=50,
                                                initializer=warm_worker)
        self.pool = self.make()

    def restart(self) -> None:
        for proc in list(getattr(self.pool, "_processes", {}).values()):
            proc.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self.make()

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def run_layers_stage(measurements: Path, gpus_path: Path, static_path: Path | None, out_table: Path,
                     out_failures: Path, out_summary: Path | None, workers: int = 2,
                     model_timeout_s: float | None = 300.0, sources: list[str] | None = None,
                     limit: int | None = None, retry_failed: bool = False, time_budget_s: float | None = None,
                     offline_only: bool = False, checkpoint_s: float = 120.0, log=print) -> dict[str, Any]:
    """The whole stage; returns (and writes) the summary."""
    from tqdm import tqdm

    t_start = time.perf_counter()
    meas = pd.read_parquet(measurements)
    gpus = pd.read_parquet(gpus_path)
    targets, _keys = select_targets(meas, gpus, sources, limit)
    wanted = {(t.model_key, t.img_size) for t in targets}
    old_table, old_fails = _previous(out_table, out_failures)
    # Rows of pairs that are no longer measured targets are not kept (the table is of measured CNNs).
    if len(old_table):
        old_table = old_table.loc[_in_pairs(old_table, wanted)]
    done = _pairs(old_table)
    failed_before = _pairs(old_fails)
    failures: list[dict] = []
    todo: list[Target] = []
    for t in targets:
        key = (t.model_key, t.img_size)
        if key in done:
            continue
        if key in failed_before and not retry_failed:
            failures.extend(old_fails.loc[(old_fails["model_key"].astype(str) == t.model_key)
                                          & (old_fails["img_size"].astype(int) == t.img_size)].to_dict("records"))
            continue
        if t.spec is None:
            failures.append(_failure_row(t, {"stage": "resolve", "error": "NoDefinition",
                                             "reason": f"no timm/torchvision/keras definition for {t.model_source} "
                                                       f"model {t.model!r}"}))
            continue
        todo.append(t)
    skipped_offline = len(todo) if offline_only else 0
    if offline_only:
        failures.extend(_not_computed(t, "OfflineOnly", "it builds nothing new: --offline-only") for t in todo)
        todo = []
    new_parts: list[pd.DataFrame] = []
    skipped_missing = skipped_budget = 0
    last_write = time.perf_counter()

    def checkpoint(final: bool = False) -> None:
        nonlocal last_write
        if final or time.perf_counter() - last_write > checkpoint_s:
            parts = [p for p in (old_table, *new_parts) if len(p)]
            table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
            _write(table, pd.DataFrame(failures, columns=FAILURE_COLUMNS), out_table, out_failures)
            last_write = time.perf_counter()

    def handle(t: Target, rows: pd.DataFrame | None, fail: dict | None) -> None:
        nonlocal skipped_missing
        if rows is not None:
            new_parts.append(rows)
            return
        assert fail is not None
        if fail["stage"] == MISSING_EXTRA:
            skipped_missing += 1
            if skipped_missing == 1:
                log(f"[layers] {t.model_key}@{t.img_size}: skipped, {fail['reason']}")
            failures.append(_not_computed(t, "MissingZooExtra", fail["reason"]))
            return
        failures.append(_failure_row(t, fail))
        log(f"[layers] {t.model_key}@{t.img_size} ({t.spec.source}:{t.spec.name}): FAILED at {fail['stage']}: "
            f"{fail['reason'][:160]}")

    bar = tqdm(total=len(todo), desc="zoo layers", unit="model", disable=not todo)
    if todo and workers <= 0:  # in-process (tests, debugging)
        for t in todo:
            if time_budget_s is not None and time.perf_counter() - t_start > time_budget_s:
                skipped_budget += 1
                failures.append(_not_computed(t, "TimeBudget", f"its time budget of {time_budget_s:g} s was spent"))
                continue
            rows, fail = build_target(t.model_key, t.spec.source, t.spec.name, t.img_size, model_timeout_s)
            handle(t, rows, fail)
            bar.update(1)
            checkpoint()
    elif todo:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pool = _Pool(workers)
        queue = list(todo)
        running: dict[Any, Target] = {}
        crashes: dict[tuple[str, int], int] = {}
        try:
            while queue or running:
                while queue and len(running) < 2 * workers:
                    if time_budget_s is not None and time.perf_counter() - t_start > time_budget_s:
                        skipped_budget += len(queue)
                        failures.extend(_not_computed(q, "TimeBudget", f"its time budget of {time_budget_s:g} s "
                                                      "was spent") for q in queue)
                        queue.clear()
                        break
                    t = queue.pop(0)
                    fut = pool.pool.submit(build_target, t.model_key, t.spec.source, t.spec.name, t.img_size,
                                           model_timeout_s)
                    running[fut] = t
                if not running:
                    break
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                broken = False
                for fut in finished:
                    t = running.pop(fut)
                    try:
                        rows, fail = fut.result()
                    except BrokenProcessPool:
                        # Which in-flight target killed the worker is unknown: each is retried, and recorded as a
                        # crash once it was in flight during two crashes.
                        broken = True
                        key = (t.model_key, t.img_size)
                        crashes[key] = crashes.get(key, 0) + 1
                        if crashes[key] < 2:
                            queue.insert(0, t)
                            continue
                        rows, fail = None, {"stage": "crash", "error": "BrokenProcessPool",
                                            "reason": "worker process died twice while building it (out of "
                                                      "memory?)", "seconds": 0.0}
                    handle(t, rows, fail)
                    bar.update(1)
                    bar.set_postfix_str(f"{t.model_key}@{t.img_size}"[:40])
                if broken:  # the other in-flight targets died with the pool: run them again
                    for t in running.values():
                        key = (t.model_key, t.img_size)
                        crashes[key] = crashes.get(key, 0) + 1
                        queue.insert(0, t)
                    running.clear()
                    pool.restart()
                checkpoint()
        finally:
            pool.close()
    bar.close()
    checkpoint(final=True)
    table = pd.read_parquet(out_table) if out_table.exists() else pd.DataFrame()
    fails = pd.read_csv(out_failures) if out_failures.exists() and out_failures.stat().st_size > 1 else \
        pd.DataFrame(columns=FAILURE_COLUMNS)
    summary = summarize_stage(table, fails, meas, gpus, static_path, targets, out_table)
    summary.update({"pairs_built_now": len(new_parts), "reused_pairs": len(done & wanted),
                    "skipped_missing_extra": skipped_missing, "skipped_time_budget": skipped_budget,
                    "skipped_offline_only": skipped_offline,
                    "stage_seconds": round(time.perf_counter() - t_start, 1)})
    if out_summary is not None:  # the metric file holds no wall time of this run (stable under `dvc repro`)
        out_summary.parent.mkdir(parents=True, exist_ok=True)
        stable = {k: v for k, v in summary.items() if k != "stage_seconds"}
        out_summary.write_text(json.dumps(stable, indent=1, default=str) + "\n")
    return summary


# ---- summary ---------------------------------------------------------------------------------------------------
def pair_sums(table: pd.DataFrame, batch: int = 1) -> pd.DataFrame:
    """Per (model_key, img_size): forward-pass MACs, trainable params used, activations, kernels at `batch`."""
    f = table.loc[table["pass"].astype(str) == "forward"]
    mac = f["kind"].astype(str).isin(MAC_KINDS)
    g = pd.DataFrame({
        "model_key": f["model_key"].astype(str), "img_size": f["img_size"].astype(int),
        "macs": f["macs_fixed"].astype(float) + f["macs_per_sample"].astype(float) * batch,
        "params": f["param_elems_new"].astype(float),
        "activations": (f["out_elems_fixed"].astype(float) + f["out_elems_per_sample"].astype(float) * batch)
        .where(mac, 0.0),
        "kernels": f["launches_kernel"].astype(int),
    })
    return g.groupby(["model_key", "img_size"], as_index=False).sum()


def _agreement(ours: pd.Series, ref: pd.Series, keys: pd.DataFrame) -> dict[str, Any]:
    ok = ref.notna() & (ref > 0) & ours.notna()
    rel = ((ours[ok] - ref[ok]).abs() / ref[ok])
    if not len(rel):
        return {"n": 0}
    worst = rel.loc[rel > 0.01].sort_values(ascending=False).head(5)
    return {"n": int(len(rel)), "median_rel_diff": round(float(rel.median()), 6),
            "p90_rel_diff": round(float(rel.quantile(0.9)), 6), "max_rel_diff": round(float(rel.max()), 6),
            "share_within_1pct": round(float((rel <= 0.01).mean()), 4),
            "worst": [{"model_key": keys.loc[i, "model_key"], "img_size": int(keys.loc[i, "img_size"]),
                       "rel_diff": round(float(v), 4)} for i, v in worst.items()]}


def summarize_stage(table: pd.DataFrame, fails: pd.DataFrame, meas: pd.DataFrame, gpus: pd.DataFrame,
                    static_path: Path | None, targets: list[Target], out_table: Path | None = None
                    ) -> dict[str, Any]:
    """Coverage (CNNs, pairs, GPU rows), failures by reason, seconds per CNN, agreement with static features."""
    rows = meas.loc[~meas["is_cpu"].astype(bool)]
    if "is_cnn" in rows.columns:
        rows = rows.loc[rows["is_cnn"].astype(bool)]
    rows = rows.loc[rows["gpu"].isin(set(gpus.loc[gpus["compute_capability"].notna(), "gpu"]))]
    have = _pairs(table)
    covered = _in_pairs(rows, have)
    pairs_total = {(t.model_key, t.img_size) for t in targets}
    cnns_total = {t.model_key for t in targets}
    per_pair = (table.groupby(["model_key", "img_size"], observed=True)["seconds"].first()
                if len(table) else pd.Series(dtype=float))
    by_reason = (fails.groupby(["stage", "error"]).size().sort_values(ascending=False)
                 if len(fails) else pd.Series(dtype=int))
    summary: dict[str, Any] = {
        "layers_version": LAYERS_VERSION,
        "coverage": {
            "cnns_total": len(cnns_total), "cnns_with_layers": len({k for k, _ in have} & cnns_total),
            "pairs_total": len(pairs_total), "pairs_with_layers": len(have & pairs_total),
            "gpu_rows_total": int(len(rows)), "gpu_rows_with_layers": int(sum(covered)),
            "coverage_before_this_stage": 0,
        },
        "failures": int(len(computed_failures(fails))),
        "not_computed": int((fails["stage"].astype(str) == NOT_COMPUTED).sum()) if len(fails) else 0,
        "failures_by_reason": {f"{k[0]}:{k[1]}": int(v) for k, v in by_reason.items()},
        "table_rows": int(len(table)),
        "table_bytes": int(out_table.stat().st_size) if out_table is not None and out_table.exists() else None,
        "rows_by_pass": {str(k): int(v) for k, v in table["pass"].value_counts().items() if v}
        if len(table) else {},
        "kernel_rows": int(table["launches_kernel"].sum()) if len(table) else 0,
        "seconds_per_cnn": {
            "what": "wall seconds of one (CNN, input size) in a worker with the frameworks imported: build on "
                    "meta + inference at 2 batch sizes + training step at 2",
            "median": round(float(per_pair.median()), 3) if len(per_pair) else None,
            "p90": round(float(per_pair.quantile(0.9)), 3) if len(per_pair) else None,
            "max": round(float(per_pair.max()), 3) if len(per_pair) else None,
        },
        "build_method": {str(k): int(v) for k, v in table.groupby(["model_key", "img_size"], observed=True)["build"]
                         .first().value_counts().items()} if len(table) and "build" in table.columns else {},
    }
    summary["agreement"] = agreement(table, meas, static_path)
    return summary


def agreement(table: pd.DataFrame, meas: pd.DataFrame, static_path: Path | None) -> dict[str, Any]:
    """Relative differences of per-layer sums (forward, batch 1) against the static features and timm's columns."""
    if not len(table):
        return {}
    sums = pair_sums(table, batch=1)
    out: dict[str, Any] = {"what": "|per-layer sum - reference| / reference over (CNN, input size) pairs; "
                                   "per-layer sums of the forward pass at batch 1: MACs of conv/matmul/attention "
                                   "ops, trainable parameters read, outputs of conv/matmul/attention ops"}
    if static_path is not None and Path(static_path).exists():
        st = pd.read_parquet(static_path)
        st = st.rename(columns={"static_img_size": "img_size"})
        j = sums.merge(st[["model_key", "img_size", "macs", "trainable_params", "activations"]]
                       .rename(columns={"macs": "ref_macs", "activations": "ref_activations"}),
                       on=["model_key", "img_size"], how="inner").reset_index(drop=True)
        out["static_features"] = {
            "reference": "data/processed/static_features.parquet (zoo static analyzer, its static_img_size)",
            "gmacs": _agreement(j["macs"], j["ref_macs"], j),
            "params": _agreement(j["params"], j["trainable_params"].astype(float), j),
            "activations": _agreement(j["activations"], j["ref_activations"].astype(float), j),
        }
    m = meas.loc[~meas["is_cpu"].astype(bool)]
    ref = m.groupby(["model_key", "img_size"], as_index=False)[["gmacs", "param_count_m", "activations_m"]].median()
    j = sums.merge(ref, on=["model_key", "img_size"], how="inner").reset_index(drop=True)
    out["measurements"] = {
        "reference": "data/processed/measurements.parquet gmacs / param_count_m / activations_m (the sources' own "
                     "figures, mostly timm's), median per (model_key, img_size)",
        "gmacs": _agreement(j["macs"] / 1e9, j["gmacs"], j),
        "params": _agreement(j["params"] / 1e6, j["param_count_m"], j),
        "activations": _agreement(j["activations"] / 1e6, j["activations_m"], j),
    }
    return out

