"""A single decision tree that learns a stronger model's answers: a born-again tree (Breiman & Shang 1996; model
compression, Bucilua et al. 2006).

Why: the product serves a Decision Tree, and a CART tree grown on the measurements alone ends each branch where
its rows run out, so a CNN or GPU between the ones it saw gets the answer of whichever leaf it falls in (1.3-2x
XGBoost's error on the grouped protocols). Here a teacher (XGBoost) is fitted on the same training rows, and the
tree is grown on those rows plus synthetic ones, each a training row whose CNN or whose GPU is swapped for
another training row's, all labelled by the teacher. The served model is still one tree (the fitted teacher is
not kept). Nothing of a held-out row reaches it: the synthetic rows recombine training rows only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.base import clone

from src.features.baseline import PhysicsBaselineRegressor

# How a synthetic row's donor block is drawn (conf/model/<name>.yaml `distill.donors`):
#   rows      a random training row's block (a frequent GPU or CNN is drawn as often as it has rows, itself too:
#             a row that draws its own block is a copy of itself);
#   other     a random training row whose block differs from the row's own (frequency-weighted, never itself);
#   distinct  one of the block's distinct values other than the row's own, each equally likely (a GPU measured
#             on six rows is drawn as often as one measured on ten thousand).
DONOR_RULES = ("rows", "other", "distinct")


def block_codes(X: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """One integer per row naming its block value (equal codes: equal values in every column of the block)."""
    return X.groupby(list(cols), dropna=False, sort=True).ngroup().to_numpy()


def donor_rows(codes: np.ndarray, n: int, donors: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`n` (row, donor) index pairs into a table whose block codes are `codes`, drawn by the `donors` rule.

    Vectorised: for `other`, a row's donor is the r-th row, in code order, of the rows outside its own code's
    run; for `distinct`, the r-th code other than its own, taken from that code's first row."""
    if donors not in DONOR_RULES:
        raise ValueError(f"distill.donors: unknown rule {donors!r} (one of {', '.join(DONOR_RULES)})")
    rows = rng.integers(0, len(codes), n)
    if donors == "rows":
        return rows, rng.integers(0, len(codes), n)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if len(counts) < 2:  # one value: no other block to swap in
        return rows[:0], rows[:0]
    own = codes[rows]
    if donors == "other":
        r = rng.integers(0, len(codes) - counts[own])
        return rows, order[np.where(r < starts[own], r, r + counts[own])]
    r = rng.integers(0, len(counts) - 1, n)
    return rows, order[starts[np.where(r < own, r, r + 1)]]


def swap_blocks(X: pd.DataFrame, blocks: Sequence[Sequence[str]], copies: int, seed: int,
                donors: str = "rows") -> pd.DataFrame:
    """For each block of columns (a CNN's description, a GPU's specs): `copies` x len(X) synthetic rows, each a
    random row of X whose block is taken, whole, from a donor row of X drawn by the `donors` rule (DONOR_RULES),
    so a CNN's size stays with its name, a GPU's specs with its name. One block per synthetic row: the rest of the
    row (batch, precision, runtime and the other block) is a training row's, so every row is one step from the
    training rows. A block with one value in X makes no rows under `other` and `distinct`. Seeded; X itself is
    not changed."""
    if copies < 0:
        raise ValueError(f"synthetic copies must be >= 0, got {copies}")
    if donors not in DONOR_RULES:
        raise ValueError(f"distill.donors: unknown rule {donors!r} (one of {', '.join(DONOR_RULES)})")
    missing = sorted({col for block in blocks for col in block} - set(X.columns))
    if missing:
        raise ValueError(f"swap blocks name columns the training table lacks: {missing}")
    if copies == 0 or len(X) == 0 or not blocks:
        return X.iloc[:0].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    parts = []
    for block in blocks:
        cols = list(block)
        codes = block_codes(X, cols) if donors != "rows" else np.zeros(len(X), dtype=int)
        rows, donor = donor_rows(codes, copies * len(X), donors, rng)
        out = X.iloc[rows].reset_index(drop=True)
        out[cols] = X.iloc[donor][cols].reset_index(drop=True)
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


class DistilledBaselineRegressor(PhysicsBaselineRegressor):
    """PhysicsBaselineRegressor whose learner is grown on a teacher's answers (see the module docstring).

    `teacher`: an unfitted model of the same inputs (its own features and target transform), fitted on the
    training rows; only its unfitted parameters stay in the model. `synthetic_blocks`: the column blocks, each
    swapped in its own synthetic rows; `synthetic_copies`: synthetic rows per training row and block;
    `synthetic_donors`: how the swapped-in block is drawn (DONOR_RULES). The training rows keep their teacher
    labels too, so the tree learns one function, the teacher's, rather than the teacher's between rows and the
    noise at them. Identical rows (a row that drew its own block, twins) are grown on once, weighted by their
    count (`distinct_rows`). The unseen-kind fallback reads its efficiency (`fallback_point`) from the measured
    rows (priced as named), not from the teacher's labels.
    """

    def __init__(self, regressor, teacher=None, synthetic_blocks: Sequence[Sequence[str]] = (),
                 synthetic_copies: int = 3, unseen_fallback: bool = False, by_numbers_share: float = 0.0,
                 random_state: int = 0, by_numbers_learner: bool = False, synthetic_donors: str = "rows",
                 point_shift: float = 0.0, fallback_point: str = "median", batch_monotone: bool = False):
        super().__init__(regressor, unseen_fallback=unseen_fallback, by_numbers_share=by_numbers_share,
                         random_state=random_state, by_numbers_learner=by_numbers_learner, point_shift=point_shift,
                         fallback_point=fallback_point, batch_monotone=batch_monotone)
        self.teacher = teacher
        self.synthetic_blocks = synthetic_blocks
        self.synthetic_copies = synthetic_copies
        self.synthetic_donors = synthetic_donors

    def fit(self, X: pd.DataFrame, y, **fit_params):
        if self.teacher is None:
            raise ValueError("DistilledBaselineRegressor needs a teacher model "
                             "(conf/model/<name>.yaml distill.teacher)")
        teacher = clone(self.teacher).fit(X, y)
        synthetic = swap_blocks(X, self.synthetic_blocks, int(self.synthetic_copies), int(self.random_state),
                                getattr(self, "synthetic_donors", "rows"))
        rows, counts = distinct_rows(pd.concat([X.reset_index(drop=True), synthetic], ignore_index=True))
        labels = np.asarray(teacher.predict(rows), dtype=float)
        super().fit(rows, labels, **{**fit_params, "model__sample_weight": counts})
        # the fallback's efficiency is that of the measured rows, as without a teacher (by_numbers_share off)
        measured = np.log(np.asarray(y, dtype=float)) - np.log(self.baseline_ms(X))
        self.set_fallback(measured)
        self.n_training_rows_, self.n_synthetic_rows_, self.n_grown_rows_ = len(X), len(synthetic), len(rows)
        return self


def distinct_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The distinct rows (first occurrence order) and how many times each occurs.

    Why: with frequency-weighted donors ~40 % of the synthetic rows are copies of a training row (a row on the RTX
    3090 that draws the RTX 3090's block), and identical inputs get identical teacher labels, so a tree grown once
    per distinct row, weighted by its count, splits on the same weighted squared error at ~60 % of the rows
    (fit 8.4 -> 6.7 s per CV fit on 10k training rows; same CV MAPE within 0.2 points, docs/experiments.md)."""
    codes = rows.groupby(list(rows.columns), dropna=False, sort=False).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]
    return rows.iloc[first].reset_index(drop=True), np.bincount(codes).astype(float)


def distill_blocks(spec: Sequence[str], block_columns: Mapping[str, Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """The column blocks named in a model config's `distill.swap` (e.g. [gpu, cnn]); an unknown name is an error."""
    unknown = sorted(set(spec) - set(block_columns))
    if unknown:
        raise ValueError(f"distill.swap: unknown block(s) {unknown} (known: {sorted(block_columns)})")
    return tuple(tuple(block_columns[name]) for name in spec)
