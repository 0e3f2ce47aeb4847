"""Checks that a PTX result counts the CNN, not an artefact of how it was scheduled.

Why: two schedules make counts that describe the compiler rather than the network. A default schedule that
fuses a squeeze-excite gate into its full-size multiply recomputes the gate per pixel (tens to hundreds of FMAs
per multiply-accumulate, src/zoo/gates.py): such a CNN is compiled again as the gate variant, and a result that
still recomputes prices no row. A result of the earlier module-wide dlight fallback is outdated and recomputed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.zoo.failure_table import batch_failure_row, failure_row
from src.zoo.kernel_table import MAX_FMA_PER_MAC, implausible_results
from src.zoo.targets import Target


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


def drop_implausible(kernels: pd.DataFrame, statics: dict[tuple[str, int], dict],
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
            batch_failures.append(batch_failure_row(r.model_key, int(r.img_size), int(r.batch_size), "implausible",
                                                    reason))
        log(f"[zoo] {r.model_key} {r.img_size} batch {r.batch_size}: not used, {reason[:160]}")
    return kernels.loc[~drop].reset_index(drop=True)
