"""Coverage of the intervals a served model gives, under the grouped protocols: the rule `mlflow models serve` applies.

`calibrate.grouped_coverage` asks how well one kind's quantile covers rows held out the way it was calibrated
(every held-out row gets that kind). A served request row instead gets the kind its own novelty says: its GPU and
CNN against the calibration's training part, raised to "arch" where a GPU spec lies outside the training range, to
"runtime" where its runtime is new and to "setup" where no training row ran its setup (src/features/intervals.py
ESCALATIONS). This module holds each group out in turn, calibrates every served kind on the rest (cross-conformal,
the training part only), fits the model there, and scores the held-out rows under the served rule, without the
escalations, and with any subset of them, and with the fold-balanced kinds weighed by rows instead: the same rows,
predictions and out-of-fold scores, so the rules compare on equal terms.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from sklearn.base import clone
from tqdm.auto import tqdm

from src.features.baseline import fallback_column
from src.features.extrapolation import (
    interval_escalations,
    setup_gpu_ranges,
    setup_labels,
    training_ranges,
    training_settings,
)
from src.features.intervals import ESCALATIONS, SERVED_KINDS, cnn_keys, novelty_kinds, row_quantiles
from src.predict import conformal
from src.predict.calibrate import kind_labels
from src.predict.data import SplitData
from src.train import family_labels

#: Protocols this measures: GPU groups held out, the leave_arch_out folds, each runtime but eager held out, setups
#: (framework + precision + mode + layout + runtime) held out in groups.
PROTOCOLS = ("gpu", "arch", "runtime", "setup")


class Rule(NamedTuple):
    """How a held-out row's interval is chosen: the escalations applied to its novelty kind, and the kinds whose
    quantile weighs each calibration fold equally (src/predict/conformal.py BALANCED_KINDS; () = pooled by rows)."""

    escalations: tuple[str, ...]
    balanced: tuple[str, ...] = conformal.BALANCED_KINDS


#: The rules compared: the GPU/CNN novelty alone, and the served rule (every escalation, the served balancing).
RULES: dict[str, Rule] = {"novelty": Rule(()), "served": Rule(ESCALATIONS)}


def as_rule(rule: Rule | tuple[str, ...]) -> Rule:
    """A Rule of tuples; a plain sequence names the escalations (the served balancing)."""
    if isinstance(rule, Rule):
        return Rule(tuple(rule.escalations), tuple(rule.balanced))
    return Rule(tuple(rule))


def outer_folds(protocol: str, df: pd.DataFrame, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, held-out) row positions of a protocol's outer folds."""
    if protocol == "gpu":
        codes = conformal.group_codes(df["gpu"].astype(str).reset_index(drop=True), k, seed + 7)
        return [(np.flatnonzero(codes != f), np.flatnonzero(codes == f)) for f in sorted(np.unique(codes))]
    if protocol == "arch":
        from src.train import ARCH_FOLDS

        arch = kind_labels(df, ("arch",))["arch"].to_numpy()
        return [(np.flatnonzero(np.isin(arch, old)), np.flatnonzero(np.isin(arch, new)))
                for _, old, new in ARCH_FOLDS if np.isin(arch, old).any() and np.isin(arch, new).any()]
    if protocol == "runtime":
        return conformal.runtime_folds(df["compile_mode"].astype(str).reset_index(drop=True))
    if protocol == "setup":
        codes = conformal.group_codes(pd.Series(setup_labels(df), dtype=object), k, seed + 11)
        return [(np.flatnonzero(codes != f), np.flatnonzero(codes == f)) for f in sorted(np.unique(codes))]
    raise ValueError(f"served coverage: unknown protocol {protocol!r}; choose from {PROTOCOLS}")


#: The unit each protocol's per-group coverage is read by: what a designer names (a GPU, a runtime, a setup).
GROUP_UNITS = {"gpu": "gpu", "arch": "gpu", "runtime": "runtime", "setup": "setup"}


def group_coverage(inside: np.ndarray, groups: np.ndarray, level: float) -> dict:
    """Coverage read per group (each held-out GPU, runtime or setup counts once): pooled by rows, the large groups
    set the figure (the RTX 3090 holds 41 % of the rows) and hide groups far below the level."""
    inside, groups = np.asarray(inside, dtype=bool), np.asarray(groups).astype(str)
    names, codes = np.unique(groups, return_inverse=True)
    cov = np.bincount(codes, weights=inside.astype(float)) / np.bincount(codes)
    short = level - 0.1
    return {"groups": int(len(names)), "mean": float(cov.mean()), "median": float(np.median(cov)),
            "min": float(cov.min()), "worst": str(names[np.argmin(cov)]).replace("\x1f", " / "),  # setup fields
            f"below_{short:.2f}": int((cov < short).sum())}


def _fit(template, X: pd.DataFrame, y: np.ndarray, tr: np.ndarray, te: np.ndarray):
    model = clone(template)
    if hasattr(model, "fit_without_learner") and getattr(model, "unseen_fallback", False) \
            and fallback_column(X.iloc[tr], X.iloc[te]) is not None:
        return model.fit_without_learner(X.iloc[tr], y[tr])
    return model.fit(X.iloc[tr], y[tr])


def served_kinds(train: pd.DataFrame, test: pd.DataFrame, gpu_features: list[str], model) -> tuple[np.ndarray, dict]:
    """The held-out rows' novelty kinds and escalation masks, as the served model decides them for a model trained
    on `train`: GPU and CNN (model_key) seen or not, GPU specs against the training ranges, unseen runtimes and
    setups."""
    gpu_seen = test["gpu"].astype(str).isin(set(train["gpu"].astype(str))).to_numpy()
    cnn_seen = np.isin(cnn_keys(test["model_key"].astype(str).to_numpy()),
                       np.unique(cnn_keys(train["model_key"].astype(str).to_numpy())))
    meta = {"gpu_features": gpu_features, "training_ranges": training_ranges(train, gpu_features),
            "training_settings": training_settings(train), "setup_gpu_ranges": setup_gpu_ranges(train)}
    joined = {c: test[c].to_numpy() for c in test.columns}
    unseen = model.unseen(test) if hasattr(model, "unseen") else None
    return novelty_kinds(gpu_seen, cnn_seen), interval_escalations(joined, meta, unseen)


def served_rule_coverage(template, data: SplitData, protocol: str, gpu_features: list[str], levels,
                         k: int = 2, seed: int = 42, progress: bool = True, jobs: int = 1,
                         kinds: tuple[str, ...] = SERVED_KINDS, max_outer: int | None = None,
                         rules: dict[str, Rule | tuple[str, ...]] | None = None) -> dict:
    """Pooled (and per held-out GPU / runtime / setup: `group_coverage`) and per-fold coverage and median width factor
    of the held-out rows' intervals under each rule (name ->
    Rule, or the escalations it applies; default RULES), and how many rows each kind answered at the widest level
    (the last of `levels`; a served answer's `interval_kind` too names the widest level's kind; see the module
    docstring).
    `kinds`: those calibrated (a kind left out answers the widest calibrated one, as a served model's older
    calibration does); `max_outer`: the first folds only (quick checks)."""
    rules = {name: as_rule(r) for name, r in (RULES if rules is None else rules).items()}
    unknown = sorted({e for r in rules.values() for e in r.escalations} - set(ESCALATIONS))
    if unknown:
        raise ValueError(f"served coverage: unknown escalation(s) {unknown}; choose from {ESCALATIONS}")
    unknown = sorted({b for r in rules.values() for b in r.balanced} - set(SERVED_KINDS))
    if unknown:
        raise ValueError(f"served coverage: unknown balanced kind(s) {unknown}; choose from {SERVED_KINDS}")
    df = data.df.reset_index(drop=True)
    X, y = df[data.cols], df["target"].to_numpy(dtype=float)
    gpu, fam = df["gpu"].astype(str), family_labels(df).reset_index(drop=True)
    folds = outer_folds(protocol, df, k, seed)[: max_outer or None]
    hits = {(r, lv): [] for r in rules for lv in levels}
    group_of = {"gpu": gpu, "runtime": df["compile_mode"].astype(str),
                "setup": pd.Series(setup_labels(df), dtype=object)}[GROUP_UNITS[protocol]].to_numpy()
    held_groups = []
    widths = {(r, lv): [] for r in rules for lv in levels}
    per_fold, kinds_used = {}, {r: {} for r in rules}
    for tr, te in tqdm(folds, desc=f"served-rule coverage, leave-{protocol}-out", disable=not progress):
        labels = {name: v.iloc[tr].reset_index(drop=True) for name, v in kind_labels(df, kinds).items()}
        every = conformal.all_oof_scores_by_fold(template, X.iloc[tr].reset_index(drop=True), y[tr], tuple(kinds),
                                                 gpu.iloc[tr], fam.iloc[tr], k, seed, labels=labels, jobs=jobs)
        cals = {r.balanced: conformal.quantiles_from_scores(every, tuple(levels), r.balanced) for r in rules.values()}
        model = _fit(template, X, y, tr, te)
        pred = np.asarray(model.predict(X.iloc[te]), dtype=float)
        novelty, escalate = served_kinds(df.iloc[tr], df.iloc[te], gpu_features, model)
        name = (f"setups {len(per_fold)}" if protocol == "setup" else ",".join(sorted(set(
            (kind_labels(df.iloc[te], ("arch",))["arch"] if protocol == "arch" else
             df["compile_mode"].iloc[te] if protocol == "runtime" else gpu.iloc[te]).astype(str))))[:80])
        fold = {"n": int(len(te)), "mape": float(np.mean(np.abs(pred - y[te]) / y[te]) * 100),
                **{f"rows_{e}": int(mask.sum()) for e, mask in escalate.items()}}
        for rule, (applied, balanced) in rules.items():
            for lv in levels:
                q, used = row_quantiles(cals[balanced], novelty, lv, {e: escalate[e] for e in applied})
                inside = (y[te] >= pred * np.exp(-q)) & (y[te] <= pred * np.exp(q))
                hits[(rule, lv)].append(inside)
                widths[(rule, lv)].append(np.exp(q))
                fold[f"{rule}_coverage_{lv:.2f}"] = float(inside.mean())
            for kind, count in zip(*np.unique(used, return_counts=True), strict=True):
                kinds_used[rule][kind] = kinds_used[rule].get(kind, 0) + int(count)
        per_fold[name] = fold
        held_groups.append(group_of[te])
    groups = np.concatenate(held_groups) if held_groups else np.array([])
    pooled = {rule: {f"{lv:.2f}": {"coverage": float(np.concatenate(hits[(rule, lv)]).mean()),
                                   "median_width_factor": float(np.median(np.concatenate(widths[(rule, lv)]))),
                                   f"per_{GROUP_UNITS[protocol]}": group_coverage(np.concatenate(hits[(rule, lv)]),
                                                                                   groups, lv)}
                     for lv in levels} for rule in rules if folds}
    return {"protocol": f"leave-{protocol}-out, every served kind calibrated (K = {k}) inside each training part",
            "pooled": pooled, "per_fold": per_fold, "kinds_used": kinds_used, "n_folds": len(per_fold)}
