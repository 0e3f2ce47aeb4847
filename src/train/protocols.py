"""Evaluation protocols and tuning splitters. The unit of every split is a configuration, never a row.

A configuration is everything that fixes the workload: CNN, GPU, batch, image size, precision, mode, memory
layout, compile mode and framework (CONFIG_COLUMNS). Rows of one configuration differ only by framework release
or by being a repeated run (timm measured the same CNN on the same GPU under several PyTorch releases); their
spread is the noise floor. A split that puts such twins on both sides asks the model what it has already seen,
so every protocol below keeps a configuration's rows together, and so does tuning's cross-validation.

- random: a seeded random 30 % of configurations (GroupShuffleSplit over configuration ids);
- random_rows: the old row-level 70/30 split, kept only to show how much twins flatter it;
- leave_model_out: every row of a CNN architecture (model_key) held out together, in folds fixed by a seeded
  hash of the name (so that adding data never moves a group: `_stable_group_folds`);
- leave_gpu_out: each GPU held out in turn (or, with `n_groups`, GPUs in that many hash-assigned groups);
- leave_family_out: CNN families held out in groups, hash-assigned folds like leave_model_out;
- leave_arch_out: GPU architectures held out by age: train on older architectures, test on newer ones
  (ARCH_FOLDS: Ada/Hopper/Blackwell from everything older; Ampere from Pascal-Turing), the question a designer
  asks about a GPU generation nobody has measured yet;
- leave_runtime_out: each deployment runtime (`compile_mode` values grouped in `split.leave_runtime_out.groups`,
  e.g. TensorRT and TF-TRT together) held out in turn, trained on every other runtime's rows: how far the fusion
  rules of the physics estimate carry a runtime that no training row ran (issue 20).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold, GroupShuffleSplit, KFold, train_test_split

PROTOCOLS = ("random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out",
             "leave_runtime_out")
GROUPED = ("leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out", "leave_runtime_out")
# GPU architectures by compute capability (NVIDIA's CUDA tables): [low, high) per name.
ARCHITECTURES = (("Kepler", 3.0, 5.0), ("Maxwell", 5.0, 6.0), ("Pascal", 6.0, 7.0), ("Volta", 7.0, 7.5),
                 ("Turing", 7.5, 8.0), ("Ampere", 8.0, 8.9), ("Ada", 8.9, 9.0), ("Hopper", 9.0, 10.0),
                 ("Blackwell", 10.0, 13.0))
# leave_arch_out folds: (name, architectures trained on, architectures held out).
ARCH_FOLDS = (
    ("ada_hopper_blackwell", ("Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere"),
     ("Ada", "Hopper", "Blackwell")),
    ("ampere", ("Pascal", "Volta", "Turing"), ("Ampere",)),
)
# The column each protocol's per-group tables report by (the prediction frame's column).
GROUP_TABLE = {"random": "gpu", "random_rows": "gpu", "leave_model_out": "family", "leave_gpu_out": "gpu",
               "leave_family_out": "family", "leave_arch_out": "gpu", "leave_runtime_out": "runtime"}
# What a configuration is: the workload, not the software release that ran it or the run that measured it.
CONFIG_COLUMNS = ("model_key", "gpu", "batch_size", "img_size", "precision", "mode", "memory_layout",
                  "compile_mode", "framework")
# How a row was measured, apart from the workload (CNN, batch, size) and the GPU: the source's setup and software
# release. A held-out row whose setting no training row shares asks the model to transfer across GPUs AND across a
# measurement setup at once (e.g. timm's RTX 3090 rows under PyTorch 1.10-2.1, a release no other GPU ran).
# `setting_support` labels each held-out row by it; SUPPORT_LEVELS are its labels, best supported first.
SETTING_COLUMNS = ("source", "framework", "framework_version", "precision", "mode", "memory_layout", "compile_mode")
SUPPORT_LEVELS = ("seen", "other_release", "unseen")


@dataclass
class Fold:
    """One train/test split. `name` is the held-out group (GPU name, family group) or the protocol's name."""

    name: str
    train: np.ndarray
    test: np.ndarray
    held_out: list[str]


def config_ids(df: pd.DataFrame) -> np.ndarray:
    """Integer id per row: rows with equal CONFIG_COLUMNS share an id (the twin groups)."""
    missing = [c for c in CONFIG_COLUMNS if c not in df.columns]
    if missing:
        raise KeyError(f"configuration columns {missing} missing from the dataset; has {list(df.columns)}")
    keys = df[list(CONFIG_COLUMNS)].astype(str)
    return keys.groupby(list(CONFIG_COLUMNS), sort=True, dropna=False).ngroup().to_numpy()


def family_labels(df: pd.DataFrame) -> pd.Series:
    return df["family"].fillna("unknown").astype(str)


def model_labels(df: pd.DataFrame) -> pd.Series:
    """The CNN architecture per row: a re-parameterised form ('repvgg_a2+reparam') is held out with its own."""
    from src.ingest.models import base_model_key

    return df["model_key"].fillna(df["model"]).astype(str).map(base_model_key)


def architecture_labels(df: pd.DataFrame) -> np.ndarray:
    """GPU architecture name per row from its compute capability; an unmapped capability stops with its value."""
    cc = df["compute_capability"].astype(float).to_numpy()
    out = np.full(len(cc), "", dtype=object)
    for name, lo, hi in ARCHITECTURES:
        out[(cc >= lo) & (cc < hi)] = name
    if (out == "").any():
        raise ValueError(f"compute capability {sorted(float(v) for v in set(cc[out == '']))} maps to no "
                         f"architecture {ARCHITECTURES}")
    return out.astype(str)


def group_labels(df: pd.DataFrame, protocol: str) -> np.ndarray:
    """The labels a protocol holds out together (and groups tuning CV by)."""
    if protocol in ("random", "random_rows"):
        return config_ids(df).astype(str)
    if protocol == "leave_model_out":
        return model_labels(df).to_numpy()
    if protocol == "leave_gpu_out":
        return df["gpu"].astype(str).to_numpy()
    if protocol == "leave_family_out":
        return family_labels(df).to_numpy()
    if protocol == "leave_arch_out":
        return df["gpu"].astype(str).to_numpy()  # tuning CV inside a fold: GPUs of the trained architectures
    if protocol == "leave_runtime_out":
        return config_ids(df).astype(str)  # tuning CV inside a fold: configurations of the trained runtimes
    raise ValueError(f"unknown protocol {protocol!r}; choose from {PROTOCOLS}")


def random_split(df: pd.DataFrame, test_size: float, seed: int) -> Fold:
    """A seeded random share of configurations held out (all rows of each): the in-distribution question."""
    ids = config_ids(df)
    tr, te = next(GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed).split(ids, groups=ids))
    return Fold("random", np.sort(tr), np.sort(te), [])


def random_row_split(df: pd.DataFrame, test_size: float, seed: int) -> Fold:
    """The old row-level split (twins on both sides); reported only to show the difference."""
    idx = np.arange(len(df))
    tr, te = train_test_split(idx, test_size=test_size, random_state=seed, shuffle=True)
    return Fold("random_rows", np.sort(tr), np.sort(te), [])


def _stable_group_folds(labels: np.ndarray, n_groups: int, seed: int, prefix: str) -> list[Fold]:
    """Groups into `n_groups` folds by a seeded hash of each group's name, so that the folds stay put as data grows.

    Why: sklearn's GroupKFold balances folds by row count, so one new GPU's rows (or a new source) move whole CNN
    families from fold to fold, and a before/after comparison "on the same rows" then compares different training
    sets. With the hash, adding rows never moves a group; a new group lands in its own hash's fold. Folds are less
    balanced (each group is still held out exactly once). Only where there are too few groups for every fold to get
    one by hash (small test tables) does it fall back to GroupKFold over seeded-shuffled groups.
    """
    uniq = np.array(sorted(set(labels)))
    n = min(int(n_groups), len(uniq))
    fold_of = {v: _group_hash(seed, v) % n for v in uniq}
    if len(set(fold_of.values())) < n:
        perm = dict(zip(uniq, np.random.default_rng(seed).permutation(len(uniq)), strict=True))
        codes = np.array([perm[v] for v in labels])
        parts = GroupKFold(n_splits=n).split(np.zeros(len(labels)), groups=codes)
        return [Fold(f"{prefix}_{k}", tr, te, sorted(set(labels[te]))) for k, (tr, te) in enumerate(parts)]
    assigned = np.array([fold_of[v] for v in labels])
    folds = []
    for k in range(n):
        test = np.flatnonzero(assigned == k)
        folds.append(Fold(f"{prefix}_{k}", np.flatnonzero(assigned != k), test, sorted(set(labels[test]))))
    return folds


def _group_hash(seed: int, label: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{label}".encode(), digest_size=8).digest(), "big")


def grouped_folds(df: pd.DataFrame, protocol: str, cfg: dict, seed: int) -> tuple[list[Fold], list[str]]:
    """Folds for a grouped protocol, plus the names of groups skipped (too few rows), for the report."""
    if protocol == "leave_gpu_out":
        groups = df["gpu"].astype(str)
        counts = groups.value_counts()
        skipped = sorted(counts[counts < int(cfg["leave_gpu_out"]["min_test_rows"])].index)
        n_groups = cfg["leave_gpu_out"].get("n_groups")
        if n_groups:
            # Quick variant: GPUs shuffled into n_groups folds, each GPU still held out exactly once and never
            # seen in its fold's training or tuning (fewer GPUs to learn from: no easier than one GPU per fold).
            keep = ~groups.isin(skipped).to_numpy()
            folds = _stable_group_folds(groups.to_numpy()[keep], int(n_groups), seed, "gpus")
            rows = np.flatnonzero(keep)
            return [Fold(f.name, rows[f.train], rows[f.test], f.held_out) for f in folds], skipped
        folds = []
        for gpu in sorted(counts.index):
            if gpu in skipped:
                continue
            test = np.flatnonzero(groups.eq(gpu).to_numpy())
            train = np.flatnonzero(~groups.eq(gpu).to_numpy())
            folds.append(Fold(gpu, train, test, [gpu]))
        return folds, skipped
    if protocol == "leave_family_out":
        return _stable_group_folds(family_labels(df).to_numpy(), cfg["leave_family_out"]["n_groups"], seed,
                                     "families"), []
    if protocol == "leave_model_out":
        return _stable_group_folds(model_labels(df).to_numpy(), cfg["leave_model_out"]["n_groups"], seed,
                                     "models"), []
    if protocol == "leave_arch_out":
        return arch_folds(df)
    if protocol == "leave_runtime_out":
        return runtime_folds(df, cfg["leave_runtime_out"])
    raise ValueError(f"unknown grouped protocol {protocol!r}; choose from {GROUPED}")


def arch_folds(df: pd.DataFrame) -> tuple[list[Fold], list[str]]:
    """ARCH_FOLDS over the rows: train on the older architectures, test on the held-out ones (rows of other
    architectures are in neither part). A fold with no test or no training rows is skipped and named."""
    arch = architecture_labels(df)
    folds, skipped = [], []
    for name, trained, held in ARCH_FOLDS:
        train = np.flatnonzero(np.isin(arch, trained))
        test = np.flatnonzero(np.isin(arch, held))
        if len(train) == 0 or len(test) == 0:
            skipped.append(name)
            continue
        gpus = sorted(set(df["gpu"].astype(str).to_numpy()[test]))
        folds.append(Fold(name, train, test, gpus))
    return folds, skipped


def runtime_folds(df: pd.DataFrame, cfg: dict) -> tuple[list[Fold], list[str]]:
    """One fold per entry of `cfg["groups"]` ({name: [compile_mode, ...]}): its rows held out, every other row
    trained on. A group with fewer than `cfg["min_test_rows"]` rows (none in a subset) is skipped and named."""
    groups = cfg.get("groups") or {}
    if not groups:
        raise ValueError("split.leave_runtime_out.groups is empty: name the runtimes to hold out")
    from src.ingest.validate import COMPILE_MODES

    unknown = sorted({v for vals in groups.values() for v in vals} - set(COMPILE_MODES))
    if unknown:
        # a typo would hold out nothing: name the runtimes the measurement schema knows
        raise ValueError(f"split.leave_runtime_out.groups names unknown compile_mode value(s) {unknown}; "
                         f"the measurement schema knows {list(COMPILE_MODES)}")
    mode = df["compile_mode"].astype(str).to_numpy()
    folds, skipped = [], []
    for name, values in groups.items():
        held = np.isin(mode, list(values))
        if held.sum() < int(cfg.get("min_test_rows", 1)):
            skipped.append(name)
            continue
        folds.append(Fold(name, np.flatnonzero(~held), np.flatnonzero(held), sorted(values)))
    return folds, skipped


def outer_folds(df: pd.DataFrame, protocol: str, cfg: dict, seed: int) -> tuple[list[Fold], list[str]]:
    """Every protocol as a list of folds (one for the random ones)."""
    if protocol == "random":
        return [random_split(df, float(cfg["random"]["test_size"]), seed)], []
    if protocol == "random_rows":
        return [random_row_split(df, float(cfg["random"]["test_size"]), seed)], []
    return grouped_folds(df, protocol, cfg, seed)


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


def fingerprint(ids: np.ndarray) -> str:
    """md5 of the sorted held-out measurement ids: names a split independently of row order."""
    return hashlib.md5("|".join(sorted(map(str, ids))).encode()).hexdigest()


def twins_across(df: pd.DataFrame, train: np.ndarray, test: np.ndarray) -> int:
    """How many configurations have rows on both sides of a split (0 for every protocol but random_rows)."""
    ids = config_ids(df)
    return len(set(ids[train]) & set(ids[test]))


def _setting_ids(df: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"setting columns {missing} missing from the dataset; has {list(df.columns)}")
    return df[list(columns)].astype(str).groupby(list(columns), sort=True, dropna=False).ngroup().to_numpy()


def setting_support(df: pd.DataFrame, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Per held-out row (in `test` order), what training knows of the way it was measured (SETTING_COLUMNS), on
    whatever GPU and CNN: `seen` (some training row has the same setting), `other_release` (the same setup under
    another framework release only) or `unseen` (no training row of that source, precision, mode, layout and
    runtime). Splits a protocol's error into what the data supports and what it cannot."""
    test, train = np.asarray(test), np.asarray(train)
    exact = _setting_ids(df, SETTING_COLUMNS)
    setup = _setting_ids(df, tuple(c for c in SETTING_COLUMNS if c != "framework_version"))
    seen = np.isin(exact[test], exact[train])
    same_setup = np.isin(setup[test], setup[train])
    return np.where(seen, "seen", np.where(same_setup, "other_release", "unseen")).astype(object)


def iter_protocols(names: list[str]) -> Iterator[str]:
    for name in names:
        if name not in PROTOCOLS:
            raise ValueError(f"split.protocols: unknown protocol {name!r}; choose from {PROTOCOLS}")
        yield name
