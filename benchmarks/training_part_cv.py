"""The grouped CV on the `random` protocol's training part that the model-choice benchmarks share.

Why: a setting chosen for the pipeline (the Decision Tree's distillation, a cheaper forest) must not look at any
held-out row, so these benchmarks split only the random protocol's training part, in grouped halves, by each
grouping's unit (benchmarks/distill_bench.py, benchmarks/cost_variants_bench.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from src.train.protocols import cv_splits, group_labels, outer_folds

# The CV groupings: which protocol's unit groups the folds.
GROUPINGS = {"configuration": "random", "gpu": "leave_gpu_out", "family": "leave_family_out"}


def check_groupings(spec: str) -> list[str]:
    """The comma-separated `--groupings`, each a key of GROUPINGS (else SystemExit naming the unknown ones)."""
    names = spec.split(",")
    unknown = sorted(set(names) - set(GROUPINGS))
    if unknown:
        raise SystemExit(f"--groupings: unknown {unknown} (known: {sorted(GROUPINGS)})")
    return names


def training_part_folds(df: pd.DataFrame, c: dict, groupings: list[str], folds: int
                        ) -> tuple[np.ndarray, Iterator[tuple[str, int, np.ndarray, np.ndarray]]]:
    """(the random protocol's training rows, a progress-bar iterator of (grouping, fold, fit rows, score rows)):
    for each grouping, `folds` grouped folds of the training part, each scored on its own rows."""
    (fold,), _ = outer_folds(df, "random", c["split"], int(c["seed"]))

    def jobs():
        for grouping, k in tqdm([(g, k) for g in groupings for k in range(folds)], desc="grouping x fold"):
            splits = cv_splits(len(fold.train), group_labels(df, GROUPINGS[grouping])[fold.train], folds,
                               int(c["seed"]))
            a, b = splits[k]
            yield grouping, k, fold.train[a], fold.train[b]

    return fold.train, jobs()
