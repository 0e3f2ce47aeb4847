"""The tables an earlier `ptx` stage run committed, read back so that their rows are reused instead of recompiled.

Why: a fresh clone has the committed tables but no cache; reusing their rows (of this zoo version, or legacy network
rows) means it recomputes nothing. Rows computed from another definition than the name mapping picks now are
recognised, so they are recomputed where this run can.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.zoo.failure_table import computed_failures
from src.zoo.names import ModelSpec
from src.zoo.targets import Target

# Network count rows of these zoo versions are carried for CNNs that have no per-kernel rows yet: version 1
# compiled each model's CUDA C whole, version 2 compiles each distinct kernel alone; the counts are the same
# (checked on every recomputed CNN, docs/zoo.md). Their rows keep their version, so they stay visible.
LEGACY_COUNT_VERSIONS = ("1",)


def versioned_rows(path: Path, column: str, versions: list[str]) -> pd.DataFrame:
    """Rows of a committed parquet table whose `column` (the code version that wrote them) is one of `versions`;
    empty when the file or the column is missing (a table of an older layout is recomputed, never misread)."""
    t = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    if len(t) and column in t.columns:
        return t.loc[t[column].astype(str).isin(versions)]
    return pd.DataFrame()


def versioned_failures(path: Path, column: str, version: str, columns: list[str] | None = None) -> pd.DataFrame:
    """The failures of a committed CSV written by this `version` (`column`) that a rerun would not retry
    (computed_failures); empty, with `columns`, when there are none."""
    f = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
    if len(f) and column in f.columns:
        return computed_failures(f.loc[f[column].astype(str) == version])
    return pd.DataFrame(columns=columns)


def previous_tables(counts: Path, failures: Path, static: Path, kernels: Path | None, version: str
                    ) -> tuple[pd.DataFrame, ...]:
    """The committed tables of an earlier run (rows of this zoo version; legacy network rows, see above)."""
    c = versioned_rows(counts, "zoo_version", [version, *LEGACY_COUNT_VERSIONS])
    f = versioned_failures(failures, "zoo_version", version)
    st = pd.read_parquet(static) if static.exists() else pd.DataFrame()
    k = pd.read_parquet(kernels) if kernels is not None and kernels.exists() else pd.DataFrame()
    if len(k):
        k = k.loc[k["zoo_version"].astype(str) == version]
    return c, f, st, k


def rows_of(table: pd.DataFrame, target: Target) -> pd.DataFrame:
    """The rows of a committed table (counts, kernels or failures) at the target's (model_key, img_size)."""
    if not len(table):
        return table
    return table.loc[(table["model_key"] == target.model_key) & (table["img_size"] == target.img_size)]


def from_other_definition(rows: pd.DataFrame, spec: ModelSpec) -> bool:
    """Whether committed rows were computed from another definition than the one the name mapping picks now."""
    if not len(rows) or "zoo_source" not in rows.columns or "zoo_model" not in rows.columns:
        return False
    pairs = set(zip(rows["zoo_source"].astype(str), rows["zoo_model"].astype(str), strict=True))
    return pairs != {(spec.source, spec.name)}


def committed_static_row(old_static: pd.DataFrame, target: Target) -> dict | None:
    """The committed static row of a target's (model_key, input size), if any."""
    if not len(old_static):
        return None
    hit = old_static.loc[(old_static["model_key"] == target.model_key)
                         & (old_static["static_img_size"].astype(int) == target.img_size)]
    return hit.iloc[0].to_dict() if len(hit) else None
