"""Evaluation protocols: random 70/30, leave-one-GPU-out, leave-family-group-out; CV splitters for tuning."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold, KFold, train_test_split

PROTOCOLS = ("random", "leave_gpu_out", "leave_family_out")
GROUP_COLUMN = {"leave_gpu_out": "gpu", "leave_family_out": "family"}


@dataclass
class Fold:
    """One train/test split. `name` is the held-out group (GPU name, family group) or 'random'."""

    name: str
    train: np.ndarray
    test: np.ndarray
    held_out: list[str]


def random_split(df: pd.DataFrame, test_size: float, seed: int) -> Fold:
    idx = np.arange(len(df))
    tr, te = train_test_split(idx, test_size=test_size, random_state=seed, shuffle=True)
    return Fold("random", np.sort(tr), np.sort(te), [])


def family_labels(df: pd.DataFrame) -> pd.Series:
    return df["family"].fillna("unknown").astype(str)


def grouped_folds(df: pd.DataFrame, protocol: str, cfg: dict, seed: int) -> tuple[list[Fold], list[str]]:
    """Folds for a grouped protocol, plus the names of groups skipped (too few rows), for the report."""
    if protocol == "leave_gpu_out":
        groups = df["gpu"].astype(str)
        counts = groups.value_counts()
        skipped = sorted(counts[counts < int(cfg["leave_gpu_out"]["min_test_rows"])].index)
        folds = []
        for gpu in sorted(counts.index):
            if gpu in skipped:
                continue
            test = np.flatnonzero(groups.eq(gpu).to_numpy())
            train = np.flatnonzero(~groups.eq(gpu).to_numpy())
            folds.append(Fold(gpu, train, test, [gpu]))
        return folds, skipped
    if protocol == "leave_family_out":
        fam = family_labels(df)
        n_groups = min(int(cfg["leave_family_out"]["n_groups"]), fam.nunique())
        # Shuffle families reproducibly, then GroupKFold balances rows across groups.
        rng = np.random.default_rng(seed)
        uniq = np.array(sorted(fam.unique()))
        perm = dict(zip(uniq, rng.permutation(len(uniq)), strict=True))
        codes = fam.map(perm).to_numpy()
        folds = []
        for k, (tr, te) in enumerate(GroupKFold(n_splits=n_groups).split(np.zeros(len(df)), groups=codes)):
            held = sorted(fam.iloc[te].unique())
            folds.append(Fold(f"families_{k}", tr, te, held))
        return folds, []
    raise ValueError(f"unknown protocol {protocol!r}; choose from {PROTOCOLS}")


def cv_splits(n_rows: int, groups: np.ndarray | None, n_folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tuning CV inside a training part: GroupKFold when groups are given (and at least 2), else KFold."""
    X = np.zeros(n_rows)
    if groups is not None:
        n_groups = len(np.unique(groups))
        if n_groups >= 2:
            return list(GroupKFold(n_splits=min(n_folds, n_groups)).split(X, groups=groups))
    return list(KFold(n_splits=n_folds, shuffle=True, random_state=seed).split(X))


def subsample(idx: np.ndarray, max_rows: int | None, seed: int) -> np.ndarray:
    if not max_rows or len(idx) <= max_rows:
        return idx
    return np.sort(np.random.default_rng(seed).choice(idx, size=int(max_rows), replace=False))


def iter_protocols(names: list[str]) -> Iterator[str]:
    for name in names:
        if name not in PROTOCOLS:
            raise ValueError(f"split.protocols: unknown protocol {name!r}; choose from {PROTOCOLS}")
        yield name
