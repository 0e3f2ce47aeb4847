"""Executed PTX counts of a CNN on a target GPU, looked up inside the sklearn Pipeline from human-level inputs.

Why: the paper's features are executed PTX instruction counts, but a user asking about a CNN on a GPU knows the
CNN's name, its input size and batch, and the GPU, not instruction counts. The `ptx` stage counts each CNN once per
PTX arch at a compiled batch (data/processed/ptx_counts.parquet holds them expanded to every measured batch and
compute capability); this index keeps the compiled counts and applies the stage's own rules
(src/zoo/table.py::count_rows) to any (CNN, size, batch, GPU):
- PTX arch: the highest of the stage's `nvcc_archs` not above the GPU's arch (sm_75 stands for cc 6.1-8.9,
  sm_120 for Blackwell), else the nearest arch the CNN was counted for;
- batch: the largest compiled batch not above the asked one, counts scaled by batch / compiled batch (kernel and
  launch counts are per step and do not scale).
A (CNN, size) never counted gets counts imputed from its GMACs (the training rows' median count per GMAC per
sample): `has` tells the served model to flag such answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

# Network-level counts that are per step (a launch is a launch whatever the batch).
UNSCALED = ("ptx_kernels", "ptx_launches")
KEYS = ["model_key", "img_size", "nvcc_arch", "compiled_batch"]
_COMPILED_RE = re.compile(r"^proportional_b(\d+)$")


class PtxTableError(ValueError):
    """The PTX count table lacks a column or holds counts that contradict each other."""


def arch_number(arch: str) -> int:
    """'sm_75' -> 75, 'sm_120' -> 120."""
    return int(str(arch).split("_", 1)[1].rstrip("a"))


def cc_arch_number(cc: np.ndarray) -> np.ndarray:
    """Compute capability 8.6 -> 86, 12.0 -> 120 (as src/zoo/targets.py::cc_to_arch)."""
    cc = np.asarray(cc, dtype=float)
    major = np.floor(cc)
    return (major * 10 + np.round((cc - major) * 10)).astype(int)


def compiled_batches(counts: pd.DataFrame) -> np.ndarray:
    """The compiled batch behind each row of ptx_counts.parquet (from its `count_method`)."""
    method = counts["count_method"].astype(str).to_numpy()
    batch = counts["batch_size"].to_numpy(dtype=int)
    out = np.empty(len(counts), dtype=int)
    for i, (m, b) in enumerate(zip(method, batch, strict=True)):
        hit = _COMPILED_RE.match(m)
        if m == "compiled":
            out[i] = b
        elif hit:
            out[i] = int(hit.group(1))
        else:
            raise PtxTableError(f"ptx_counts row {i}: unknown count_method {m!r} (expected 'compiled' or "
                                "'proportional_b<batch>')")
    return out


class PtxIndex:
    """Compiled PTX counts by (model_key, img_size, nvcc_arch, compiled batch); carried inside the fitted Pipeline.

    `columns`: the ptx_* count columns served as features. `nvcc_archs`: the archs the `ptx` stage compiles
    (params.yaml ptx.nvcc_archs); an arch the CNN was not counted for falls back to the nearest it was.
    """

    def __init__(self, counts: pd.DataFrame, columns: list[str], nvcc_archs: list[str]):
        missing = [c for c in ["model_key", "img_size", "batch_size", "nvcc_arch", "count_method", *columns]
                   if c not in counts.columns]
        if missing:
            raise PtxTableError(f"PTX count table lacks column(s) {missing}")
        self.columns = list(columns)
        self.nvcc_archs = sorted({arch_number(a) for a in nvcc_archs})
        if not self.nvcc_archs:
            raise PtxTableError("nvcc_archs is empty: the arch rule needs at least one PTX arch")
        base = counts[["model_key", "img_size", "nvcc_arch"]].copy()
        base["model_key"] = base["model_key"].astype(str)
        base["img_size"] = base["img_size"].astype(int)
        base["nvcc_arch"] = [arch_number(a) for a in base["nvcc_arch"].astype(str)]
        base["compiled_batch"] = compiled_batches(counts)
        factor = counts["batch_size"].to_numpy(dtype=float) / base["compiled_batch"].to_numpy(dtype=float)
        for c in self.columns:
            v = counts[c].to_numpy(dtype=float)
            base[c] = v if c in UNSCALED else v / factor
        first = base.drop_duplicates(KEYS).set_index(KEYS)
        # Every expanded row of one compiled count must give back the same compiled count.
        spread = (base.groupby(KEYS)[self.columns].max() - base.groupby(KEYS)[self.columns].min()).abs()
        rel = spread / first[self.columns].abs().clip(lower=1.0)
        if len(rel) and float(rel.to_numpy().max()) > 1e-6:
            key = rel.max(axis=1).idxmax()
            raise PtxTableError(f"PTX counts of {key} differ between batch sizes beyond the proportional rule")
        first = first.sort_index()
        self.values = first[self.columns].to_numpy(dtype=float)
        self.entries: dict[tuple[str, int], dict[int, list[tuple[int, int]]]] = {}
        for row, (key, size, arch, batch) in enumerate(first.index):
            self.entries.setdefault((key, int(size)), {}).setdefault(int(arch), []).append((int(batch), row))
        for archs in self.entries.values():
            for batches in archs.values():
                batches.sort()

    def __deepcopy__(self, memo):
        return self  # read-only arrays: sklearn's clone of a Pipeline shares one index

    def has(self, model_key: Any, img_size: Any) -> np.ndarray:
        """Whether each (model_key, img_size) has counts."""
        keys = np.asarray(model_key, dtype=object)
        sizes = np.asarray(img_size, dtype=float)
        return np.array([(str(k), int(s)) in self.entries for k, s in zip(keys, sizes, strict=True)], dtype=bool)

    def _arch(self, wanted: int, have: dict[int, list]) -> int:
        listed = [a for a in self.nvcc_archs if a <= wanted]
        want = listed[-1] if listed else self.nvcc_archs[0]
        if want in have:
            return want
        below = [a for a in sorted(have) if a <= want]
        return below[-1] if below else min(have)

    def lookup(self, X: Mapping[str, Any]) -> np.ndarray:
        """Counts (rows x columns) for each row's (model_key, img_size, batch_size, compute_capability); NaN where
        the (CNN, size) was never counted."""
        for col in ("img_size", "batch_size", "compute_capability"):
            bad = np.flatnonzero(~np.isfinite(np.asarray(X[col], dtype=float)))
            if len(bad):
                raise ValueError(f"PTX lookup: {col} is missing or not finite in row(s) {bad[:10].tolist()}")
        keys = np.asarray(X["model_key"], dtype=object).astype(str)
        sizes = np.asarray(X["img_size"], dtype=float).astype(int)
        batch = np.asarray(X["batch_size"], dtype=float)
        arch = cc_arch_number(np.asarray(X["compute_capability"], dtype=float)).astype(int)
        out = np.full((len(keys), len(self.columns)), np.nan)
        if not len(keys):
            return out
        # The arch rule runs once per distinct (CNN, size, arch), a few hundred in a training table; the batch rule
        # (the largest compiled batch not above the row's, else the smallest) then runs on arrays.
        codes, groups = _factorize_rows(keys, sizes, arch)
        starts = np.zeros(len(groups), dtype=np.int64)
        lengths = np.zeros(len(groups), dtype=np.int64)
        flat_batch: list[int] = []
        flat_row: list[int] = []
        for g, (key, size, want) in enumerate(groups):
            archs = self.entries.get((key, size))
            if archs is None:
                continue
            batches = archs[self._arch(want, archs)]
            starts[g], lengths[g] = len(flat_batch), len(batches)
            flat_batch += [b for b, _ in batches]
            flat_row += [r for _, r in batches]
        compiled = np.asarray(flat_batch, dtype=float)
        table_row = np.asarray(flat_row, dtype=np.int64)
        start, length = starts[codes], lengths[codes]
        ok = length > 0
        pick = start.copy()  # the smallest compiled batch unless a larger one is not above the row's batch
        for j in range(1, int(lengths.max(initial=0))):
            cand = np.minimum(start + j, max(len(compiled) - 1, 0))
            fits = ok & (j < length) & (compiled[cand] <= batch)
            pick = np.where(fits, cand, pick)
        row = np.where(ok, table_row[np.where(ok, pick, 0)] if len(table_row) else -1, -1)
        factor = np.where(ok, batch / compiled[np.where(ok, pick, 0)] if len(compiled) else 0.0, 0.0)
        out[ok] = self.values[row[ok]] * np.where(self._scaled(), factor[ok, None], 1.0)
        return out

    def per_gmac(self, X: Mapping[str, Any]) -> np.ndarray:
        """Median count per GMAC per sample (scaled columns) or per step (kernels, launches) over the rows of X
        that have counts: what `counts` imputes a never-counted CNN with (fitted on training rows)."""
        got = self.lookup(X)
        ok = ~np.isnan(got).any(axis=1)
        if not ok.any():
            raise ValueError("no row has PTX counts: cannot fit the imputation of never-counted CNNs")
        work = (np.asarray(X["gmacs"], dtype=float) * np.asarray(X["batch_size"], dtype=float))[ok]
        per = np.where(self._scaled(), got[ok] / np.maximum(work, 1e-12)[:, None], got[ok])
        return np.median(per, axis=0)

    def counts(self, X: Mapping[str, Any], per_gmac: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(`lookup` with never-counted CNNs imputed from their GMACs x batch times `per_gmac`, whether each row
        was counted)."""
        out = self.lookup(X)
        miss = np.isnan(out).any(axis=1)
        if miss.any():
            work = (np.asarray(X["gmacs"], dtype=float) * np.asarray(X["batch_size"], dtype=float))[miss]
            out[miss] = np.where(self._scaled(), np.asarray(per_gmac) * work[:, None], per_gmac)
        return out, ~miss

    def _scaled(self) -> np.ndarray:
        return np.array([c not in UNSCALED for c in self.columns])


def _factorize_rows(keys: np.ndarray, sizes: np.ndarray, arch: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """(group code per row, the distinct (model_key, img_size, arch) per code) by integer codes per column."""
    k_codes, k_uniq = pd.factorize(keys)
    s_codes, s_uniq = pd.factorize(sizes)
    a_codes, a_uniq = pd.factorize(arch)
    combined = (k_codes.astype(np.int64) * len(s_uniq) + s_codes) * len(a_uniq) + a_codes
    codes, uniq = pd.factorize(combined)
    a_n, s_n = len(a_uniq), len(s_uniq)
    groups = [(str(k_uniq[u // (a_n * s_n)]), int(s_uniq[(u // a_n) % s_n]), int(a_uniq[u % a_n])) for u in uniq]
    return codes, groups


@lru_cache(maxsize=4)
def load_ptx_index(path: str, prefix: str = "ptx_") -> PtxIndex:
    """PtxIndex of a ptx_counts.parquet: its `prefix` count columns; the PTX archs are those the table was
    built with (its nvcc_arch values, params.yaml ptx.nvcc_archs). Read once per path and prefix."""
    counts = pd.read_parquet(path)
    return PtxIndex(counts, ptx_count_columns(counts.columns, prefix), sorted(counts["nvcc_arch"].astype(str).unique()))


def ptx_count_columns(columns: Any, prefix: str = "ptx_") -> list[str]:
    """The count columns of a PTX table (its `prefix` columns)."""
    return [str(c) for c in columns if str(c).startswith(prefix)]
