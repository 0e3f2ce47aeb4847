"""Rows of the `ptx` stage's failure tables: `ptx_failures.csv` (a target without counts, and why) and
`ptx_batch_failures.csv` (an extra compiled batch the stage did not use, and why).

Why: no target is dropped silently. A real failure is kept (and not retried without --retry-failed); a target this
run only did not compile is named as such (NOT_COMPUTED) so that the next run or `warm` still takes it up.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from src.zoo.targets import Target

# Stage of a failure record whose environment lacks the zoo extra: not the model's fault, never cached.
MISSING_EXTRA = "missing_extra"
# Failure-table stage of a target this run did not compile (no zoo extra, offline, time budget): named with the
# reason, never dropped silently, and not a failure: the next run that can compile it does (`previous_tables`,
# warm).
NOT_COMPUTED = "not_computed"
# Stages of ptx_batch_failures.csv entries an earlier scheduling policy caused: retried whenever the zoo extra is
# present (not only with --retry-failed).
OUTDATED_BATCH_FAILURES = ("schedule_fallback",)
FAILURE_COLUMNS = ("model_key", "model", "model_source", "img_size", "n_gpus", "zoo_source", "zoo_model", "stage",
                   "error", "reason", "seconds", "zoo_version")
BATCH_FAILURE_COLUMNS = ("model_key", "img_size", "batch_size", "stage", "reason")


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


def batch_failure_row(model_key: str, img_size: int, batch: int, stage: str, reason: str) -> dict:
    """One row of the batch-failure table (`ptx_batch_failures.csv`): an extra compiled batch the stage did not use."""
    return {"model_key": model_key, "img_size": img_size, "batch_size": batch, "stage": stage, "reason": reason}


def batch_failures_by_key(path: Path | None) -> dict[tuple[str, int, int], dict]:
    """An earlier run's batch-failure table as {(model_key, img_size, batch_size): row}; empty without one."""
    if path is None or not path.exists() or path.stat().st_size <= 1:
        return {}
    return {(str(row["model_key"]), int(row["img_size"]), int(row["batch_size"])): row
            for row in pd.read_csv(path).to_dict("records")}
