"""Conformal prediction intervals for the latency regressors (any sklearn regressor, log-target models).

Method (cross-conformal, split inside the TRAINING part only): the training part is cut into K folds; a clone
of the model (same hyper-parameters) is fitted on K-1 folds and scored on the held-out fold; the nonconformity
score is the absolute log error |log(measured) - log(predicted)|. The interval at level 1 - alpha is
[pred * exp(-q), pred * exp(+q)] with q the ceil((n+1)(1-alpha))-th smallest score. The test split is never
used for calibration; it only measures the empirical coverage.

Why several calibrations: a GPU or a CNN the model never saw has larger errors than a random row. Folds by GPU
("gpu"), by CNN family ("cnn"), and by both at once ("gpu_cnn": train on rows with neither the fold's GPUs nor
its families, score rows with both) give a quantile for each kind of novelty; the predictor picks the one that
matches each query row. Four more kinds match the grouped evaluation protocols: "model" (folds by CNN
architecture, model_key: a new CNN of a known family), "arch" (a GPU generation nobody measured: train on the
architectures older than each of the two newest in the part, score that newest one) and "runtime" (a deployment
runtime nobody measured: each runtime but the most common held out in turn, its rows answered by the unseen-kind
fallback), and "setup" (a setup nobody ran: folds by setup, framework + precision + mode + layout + runtime). The
served model raises a row to "arch", "runtime" or "setup" where its GPU specs lie outside the training range, its
runtime is new or its setup is (src/features/intervals.py ESCALATIONS).

Fold-balanced kinds ("arch", "runtime"): each of their folds holds out exactly one group (one GPU generation, one
runtime), so each fold is one draw of the novelty a served row has ("a runtime nobody measured"). Pooled by rows,
the quantile would be the most common group's: torch.compile's 5,682 rows out-vote XLA's 524 and CUDA graphs' 341,
and a held-out runtime unlike torch.compile gets torch.compile's interval. Their scores are therefore weighted so
that every fold counts as much as any other (weighted conformal quantile, Tibshirani et al. 2019; the
hierarchical "pooled CDFs" of Dunn, Wasserman & Ramdas 2022). With two to four groups no group-level guarantee
holds; the served-interval benchmark measures what it gives (docs/predict.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, KFold
from tqdm.auto import tqdm

# Which quantile a query row gets, and the levels, are shared with the served model (it carries src/features only).
from src.features.baseline import fallback_column
from src.features.intervals import ESCALATIONS, LEVELS, NOVELTY, novelty, pick_q  # noqa: F401 - this module's API too

# Kinds that need labels beyond GPU and family (passed as `labels`): model_key, architecture names, runtimes, setups.
GROUPED_KINDS = ("model", "arch", "runtime", "setup")
#: What the calibrate stage calibrates: every kind a served answer can name.
SERVED_KINDS = NOVELTY + ESCALATIONS
#: How the quantiles are computed from the scores; raised whenever that changes, so that the pipeline's
#: `calibrate --reuse` recalibrates a calibration made by older code (2: the fold-balanced quantile's new row weighs
#: the mean weight, 2026-11-30; a calibration without the field is older).
QUANTILE_RULE_VERSION = 2
#: Escalations calibrated one held-out group per fold (a GPU generation, a runtime): their quantile weighs each fold
#: equally rather than each row (module docstring). The served side only reads the quantiles.
BALANCED_KINDS = ("arch", "runtime")
# GPU architectures oldest first (names of src.train.protocols.ARCHITECTURES).
ARCH_ORDER = ("Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")


def arch_folds(arch: pd.Series, newest: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    """Train on architectures older than each of the `newest` newest ones present, score that one."""
    a = arch.astype(str).to_numpy()
    rank = {name: i for i, name in enumerate(ARCH_ORDER)}
    present = sorted(set(a), key=lambda n: rank[n])
    folds = []
    for name in present[-newest:]:
        tr = np.flatnonzero(np.array([rank[x] < rank[name] for x in a]))
        te = np.flatnonzero(a == name)
        if len(tr) and len(te):
            folds.append((tr, te))
    return folds


def runtime_folds(runtime: pd.Series) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each runtime but the most common (eager: a model trained without it is no question anyone asks) held out
    in turn, trained on every other row."""
    r = runtime.astype(str).to_numpy()
    values, counts = np.unique(r, return_counts=True)
    if len(values) < 2:
        return []
    common = values[np.argmax(counts)]
    return [(np.flatnonzero(r != v), np.flatnonzero(r == v)) for v in values.tolist() if v != common]


def scores(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Nonconformity scores: absolute log errors (relative error symmetric in ratio)."""
    y = np.asarray(y, dtype=float)
    pred = np.asarray(pred, dtype=float)
    if np.any(y <= 0) or np.any(pred <= 0):
        raise ValueError("conformal scores need positive measured and predicted values")
    return np.abs(np.log(y) - np.log(pred))


def check_level(level: float) -> None:
    """A nominal level strictly between 0 and 1 (a level of 0 would index the scores from the end)."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"conformal level must lie strictly between 0 and 1, got {level!r}")


def quantile(s: np.ndarray, level: float) -> float:
    """Finite-sample conformal quantile: the ceil((n+1)*level)-th smallest score (inf if n is too small)."""
    check_level(level)
    s = np.sort(np.asarray(s, dtype=float))
    n = len(s)
    k = math.ceil((n + 1) * level)
    if n == 0 or k > n:
        return math.inf
    return float(s[k - 1])


def balanced_quantile(s: np.ndarray, fold: np.ndarray, level: float) -> float:
    """Conformal quantile with every fold's scores carrying the same total weight: each score weighs 1 / (its fold's
    size), and the new row weighs as an average scored row (the mean weight: a row of a few-row fold would
    otherwise weigh as a whole fold and make the quantile infinite). With one fold this is `quantile`."""
    check_level(level)
    s, fold = np.asarray(s, dtype=float), np.asarray(fold)
    if len(s) != len(fold):
        raise ValueError(f"balanced_quantile: {len(s)} scores but {len(fold)} fold ids")
    if len(s) == 0:
        return math.inf
    _, inverse, sizes = np.unique(fold, return_inverse=True, return_counts=True)
    if len(sizes) == 1:
        return quantile(s, level)
    w = 1.0 / sizes[inverse]
    order = np.argsort(s, kind="stable")
    cum = np.cumsum(w[order]) / (w.sum() + w.mean())
    # the smallest score whose cumulative weight reaches the level; the slack covers the cumulative sum's rounding
    # (at most a rank higher otherwise: conservative)
    i = int(np.searchsorted(cum, level - 4 * len(s) * np.finfo(float).eps, side="left"))
    return math.inf if i >= len(s) else float(s[order][i])


def kind_quantile(s: np.ndarray, fold: np.ndarray, level: float, balanced: bool) -> float:
    """A kind's quantile: fold-balanced or pooled over rows."""
    return balanced_quantile(s, fold, level) if balanced else quantile(s, level)


def interval(pred: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(pred, dtype=float)
    return pred * math.exp(-q), pred * math.exp(q)


def coverage(y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    y = np.asarray(y, dtype=float)
    return float(np.mean((y >= lo) & (y <= hi)))


def _fit_predict(template, X: pd.DataFrame, y: np.ndarray, tr: np.ndarray, te: np.ndarray) -> np.ndarray:
    model = clone(template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(model, "fit_without_learner") and getattr(model, "unseen_fallback", False) \
                and fallback_column(X.iloc[tr], X.iloc[te]) is not None:
            # the fallback answers every scored row whatever the learner (a held-out runtime): skip fitting it
            model.fit_without_learner(X.iloc[tr], y[tr])
        else:
            model.fit(X.iloc[tr], y[tr])
    return np.asarray(model.predict(X.iloc[te]), dtype=float)


def group_codes(labels: pd.Series, k: int, seed: int) -> np.ndarray:
    """Assign each distinct label to one of k shuffled groups (reproducible), balanced by row count."""
    uniq = np.array(sorted(labels.astype(str).unique()))
    if len(uniq) < 2:
        raise ValueError(f"need at least 2 distinct groups, got {list(uniq)}")
    k = min(k, len(uniq))
    rng = np.random.default_rng(seed)
    perm = dict(zip(uniq, rng.permutation(len(uniq)), strict=True))
    codes = labels.astype(str).map(perm).to_numpy()
    out = np.empty(len(labels), dtype=int)
    for fold, (_, te) in enumerate(GroupKFold(n_splits=k).split(np.zeros(len(labels)), groups=codes)):
        out[te] = fold
    return out


def kind_folds(kind: str, n: int, gpu: pd.Series, cnn: pd.Series, k: int = 5, seed: int = 42,
               labels: dict | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, score) row indices of one novelty kind's cross-conformal folds on a training part of n rows."""
    folds: list[tuple[np.ndarray, np.ndarray]] = []
    if kind in GROUPED_KINDS and (not labels or kind not in labels):
        raise ValueError(f"novelty kind {kind!r} needs labels[{kind!r}] (model_key / architecture / runtime / setup "
                         "per row)")
    if kind in ("model", "setup"):
        codes = group_codes(labels[kind].reset_index(drop=True), k, seed)
        folds = [(np.flatnonzero(codes != f), np.flatnonzero(codes == f)) for f in np.unique(codes)]
    elif kind == "arch":
        folds = arch_folds(labels["arch"].reset_index(drop=True))
    elif kind == "runtime":
        folds = runtime_folds(labels["runtime"].reset_index(drop=True))
    elif kind == "row":
        folds = list(KFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(n)))
    elif kind in ("gpu", "cnn"):
        codes = group_codes(gpu if kind == "gpu" else cnn, k, seed)
        folds = [(np.flatnonzero(codes != f), np.flatnonzero(codes == f)) for f in np.unique(codes)]
    elif kind == "gpu_cnn":
        kk = min(k, gpu.nunique(), cnn.nunique())
        g = group_codes(gpu, kk, seed)
        c = group_codes(cnn, kk, seed + 1)
        for f in range(kk):
            tr = np.flatnonzero((g != f) & (c != f))
            te = np.flatnonzero((g == f) & (c == f))
            if len(tr) and len(te):
                folds.append((tr, te))
    else:
        raise ValueError(f"unknown novelty kind {kind!r}; choose from {NOVELTY + GROUPED_KINDS}")
    return folds


def oof_scores(template, X: pd.DataFrame, y: np.ndarray, kind: str, gpu: pd.Series, cnn: pd.Series,
               k: int = 5, seed: int = 42, progress: bool = False, labels: dict | None = None,
               jobs: int = 1) -> np.ndarray:
    """Out-of-fold scores of one novelty kind on a training part (see module docstring)."""
    return all_oof_scores(template, X, y, (kind,), gpu, cnn, k, seed, progress, labels, jobs)[kind]


def all_oof_scores(template, X: pd.DataFrame, y: np.ndarray, kinds: tuple[str, ...], gpu: pd.Series,
                   cnn: pd.Series, k: int = 5, seed: int = 42, progress: bool = False, labels: dict | None = None,
                   jobs: int = 1) -> dict[str, np.ndarray]:
    """Out-of-fold scores of every kind (`all_oof_scores_by_fold` without the fold ids)."""
    every = all_oof_scores_by_fold(template, X, y, kinds, gpu, cnn, k, seed, progress, labels, jobs)
    return {kind: s for kind, (s, _) in every.items()}


def all_oof_scores_by_fold(template, X: pd.DataFrame, y: np.ndarray, kinds: tuple[str, ...], gpu: pd.Series,
                           cnn: pd.Series, k: int = 5, seed: int = 42, progress: bool = False,
                           labels: dict | None = None, jobs: int = 1) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Out-of-fold scores of every kind, each with the index of the fold that scored it. Each fold's fit is
    independent of the others, so `jobs` > 1 fits them in that many worker processes (the estimators stay
    single-threaded): the same scores, sooner on a 2-core machine (the pipeline's calibrate stage)."""
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"calibration kinds must be distinct, got {len(kinds)} with {len(set(kinds))} distinct: "
                         f"{sorted(set(map(str, kinds)))[:8]}")
    gpu, cnn = gpu.reset_index(drop=True), cnn.reset_index(drop=True)
    tasks = [(kind, i, tr, te) for kind in kinds
             for i, (tr, te) in enumerate(kind_folds(kind, len(X), gpu, cnn, k, seed, labels))]
    runner = Parallel(n_jobs=max(1, int(jobs)), backend="loky", return_as="generator")
    preds = runner(delayed(_fit_predict)(template, X, y, tr, te) for _, _, tr, te in tasks)
    out: dict[str, list[np.ndarray]] = {kind: [] for kind in kinds}
    ids: dict[str, list[np.ndarray]] = {kind: [] for kind in kinds}
    for (kind, i, _, te), pred in tqdm(zip(tasks, preds, strict=True), total=len(tasks), desc="conformal fits",
                                       disable=not progress, leave=False):
        out[kind].append(scores(y[te], pred))
        ids[kind].append(np.full(len(te), i))
    return {kind: (np.concatenate(out[kind]), np.concatenate(ids[kind])) if out[kind]
            else (np.array([]), np.array([], dtype=int)) for kind in kinds}


def quantiles_from_scores(every: dict[str, tuple[np.ndarray, np.ndarray]], levels: tuple[float, ...] = LEVELS,
                          balanced: tuple[str, ...] = BALANCED_KINDS) -> dict:
    """{kind: {level: q}}, score counts and median scores from `all_oof_scores_by_fold`'s output; the kinds in
    `balanced` weigh each fold equally (module docstring)."""
    quantiles, counts, med = {}, {}, {}
    for kind, (s, fold) in every.items():
        quantiles[kind] = {f"{lv:.2f}": kind_quantile(s, fold, lv, kind in balanced) for lv in levels}
        counts[kind] = int(len(s))
        med[kind] = float(np.median(s)) if len(s) else math.nan
    return {"quantiles": quantiles, "n_scores": counts, "median_score": med,
            "balanced_kinds": [kind for kind in every if kind in balanced]}


def calibrate(template, X: pd.DataFrame, y: np.ndarray, gpu: pd.Series, cnn: pd.Series,
              levels: tuple[float, ...] = LEVELS, kinds: tuple[str, ...] = NOVELTY, k: int = 5, seed: int = 42,
              progress: bool = False, labels: dict | None = None, jobs: int = 1,
              balanced: tuple[str, ...] = BALANCED_KINDS) -> dict:
    """Quantiles {kind: {level: q}} and score counts from a training part (never the test split)."""
    every = all_oof_scores_by_fold(template, X, y, tuple(kinds), gpu, cnn, k, seed, progress, labels, jobs)
    return {"method": "cross-conformal, K-fold out-of-fold |log error| within the training part",
            "quantile_rule_version": QUANTILE_RULE_VERSION,
            "k": k, "seed": seed, "levels": [float(lv) for lv in levels],
            **quantiles_from_scores(every, tuple(levels), tuple(balanced))}
