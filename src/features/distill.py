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


def swap_blocks(X: pd.DataFrame, blocks: Sequence[Sequence[str]], copies: int, seed: int) -> pd.DataFrame:
    """For each block of columns (a CNN's description, a GPU's specs): `copies` x len(X) synthetic rows, each a
    random row of X whose block is taken, whole, from another random row of X (so a CNN's size stays with its
    name, a GPU's specs with its name). One block per synthetic row: the rest of the row (batch, precision,
    runtime and the other block) is a training row's, so every row is one step from the training rows. Seeded;
    X itself is not changed."""
    if copies < 0:
        raise ValueError(f"synthetic copies must be >= 0, got {copies}")
    missing = sorted({col for block in blocks for col in block} - set(X.columns))
    if missing:
        raise ValueError(f"swap blocks name columns the training table lacks: {missing}")
    if copies == 0 or len(X) == 0 or not blocks:
        return X.iloc[:0].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    parts = []
    for block in blocks:
        cols = list(block)
        out = X.iloc[rng.integers(0, len(X), copies * len(X))].reset_index(drop=True)
        out[cols] = X.iloc[rng.integers(0, len(X), len(out))][cols].reset_index(drop=True)
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


class DistilledBaselineRegressor(PhysicsBaselineRegressor):
    """PhysicsBaselineRegressor whose learner is grown on a teacher's answers (see the module docstring).

    `teacher`: an unfitted model of the same inputs (its own features and target transform), fitted on the
    training rows; only its unfitted parameters stay in the model. `synthetic_blocks`: the column blocks, each
    swapped in its own synthetic rows; `synthetic_copies`: synthetic rows per training row and block. The
    training rows keep their teacher labels too, so the tree learns one function, the teacher's, rather than the
    teacher's between rows and the noise at them. The unseen-kind fallback keeps the median efficiency of the
    measured rows (priced as named).
    """

    def __init__(self, regressor, teacher=None, synthetic_blocks: Sequence[Sequence[str]] = (),
                 synthetic_copies: int = 3, unseen_fallback: bool = False, by_numbers_share: float = 0.0,
                 random_state: int = 0, by_numbers_learner: bool = False):
        super().__init__(regressor, unseen_fallback=unseen_fallback, by_numbers_share=by_numbers_share,
                         random_state=random_state, by_numbers_learner=by_numbers_learner)
        self.teacher = teacher
        self.synthetic_blocks = synthetic_blocks
        self.synthetic_copies = synthetic_copies

    def fit(self, X: pd.DataFrame, y, **fit_params):
        if self.teacher is None:
            raise ValueError("DistilledBaselineRegressor needs a teacher model "
                             "(conf/model/<name>.yaml distill.teacher)")
        teacher = clone(self.teacher).fit(X, y)
        synthetic = swap_blocks(X, self.synthetic_blocks, int(self.synthetic_copies), int(self.random_state))
        rows = pd.concat([X.reset_index(drop=True), synthetic], ignore_index=True)
        labels = np.asarray(teacher.predict(rows), dtype=float)
        super().fit(rows, labels, **fit_params)
        # the fallback's efficiency is that of the measured rows, as without a teacher (by_numbers_share off)
        measured = np.log(np.asarray(y, dtype=float)) - np.log(self.baseline_ms(X))
        self.median_log_efficiency_ = float(np.median(measured))
        self.n_training_rows_, self.n_synthetic_rows_ = len(X), len(synthetic)
        return self


def distill_blocks(spec: Sequence[str], block_columns: Mapping[str, Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """The column blocks named in a model config's `distill.swap` (e.g. [gpu, cnn]); an unknown name is an error."""
    unknown = sorted(set(spec) - set(block_columns))
    if unknown:
        raise ValueError(f"distill.swap: unknown block(s) {unknown} (known: {sorted(block_columns)})")
    return tuple(tuple(block_columns[name]) for name in spec)
