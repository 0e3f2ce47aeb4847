"""Calibrate conformal intervals for a logged model and measure their coverage on the held-out test split.

`calibrate_model` rebuilds the model's dataset and 70/30 split (src.predict.data), calibrates on the training
part only (cross-conformal, src.predict.conformal), and measures empirical coverage of the LOADED model's
intervals on the test split. `grouped_coverage` answers the harder question (a GPU or CNN family never seen):
outer leave-group-out folds, calibration by the same grouping inside each outer training part.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import clone
from tqdm.auto import tqdm

from src.config import REPO_ROOT
from src.evaluate.ranking import ranking_agreement
from src.features.intervals import CALIBRATION_FILE
from src.predict import conformal
from src.predict.data import SplitData, load_split
from src.predict.model import CONFORMAL_ARTIFACT, LoadedModel
from src.train import family_labels

log = logging.getLogger("cnnperf.predict")

#: The code a calibration's fits run (the pipeline's transforms and estimators, the conformal scores): part of
#: `model_fingerprint`, so an edit there recalibrates even a champion that was not retrained.
CALIBRATION_CODE = ("src/predict", "src/features", "src/train")


def _labels(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    return df["gpu"].astype(str).reset_index(drop=True), family_labels(df).reset_index(drop=True)


def split_coverage(pipeline, data: SplitData, cal: dict, levels) -> dict:
    """Coverage of the fitted pipeline's intervals (row-level quantile) on the random test split."""
    X, y = data.df[data.cols], data.df["target"].to_numpy(dtype=float)
    pred = np.asarray(pipeline.predict(X.iloc[data.test]), dtype=float)
    out = {}
    for lv in levels:
        q = conformal.pick_q(cal, "row", lv)
        lo, hi = conformal.interval(pred, q)
        out[f"{lv:.2f}"] = {"coverage": conformal.coverage(y[data.test], lo, hi), "q_log": q,
                            "width_factor": float(np.exp(q)), "n_test": int(len(data.test))}
    return out


def excluded_coverage(pipeline, data: SplitData, cal: dict, levels) -> dict | None:
    """Coverage on the excluded families' rows (CNNs the model never saw): cnn / gpu_cnn quantiles."""
    if data.excluded.empty:
        return None
    X, y = data.excluded[data.cols], data.excluded["target"].to_numpy(dtype=float)
    pred = np.asarray(pipeline.predict(X), dtype=float)
    train_gpus = set(data.df["gpu"].iloc[data.train])
    kinds = [conformal.novelty(g in train_gpus, False) for g in data.excluded["gpu"]]
    out = {"n_rows": int(len(y)), "mape": float(np.mean(np.abs(pred - y) / y) * 100),
           "median_log_ratio_pred_over_measured": float(np.median(np.log(pred / y))),
           "families": sorted(family_labels(data.excluded).unique().tolist()),
           "gpu_ranking": ranking_agreement(data.excluded, y, pred)}
    for lv in levels:
        qs = np.array([conformal.pick_q(cal, k, lv) for k in kinds])
        lo, hi = pred * np.exp(-qs), pred * np.exp(qs)
        out[f"{lv:.2f}"] = {"coverage": conformal.coverage(y, lo, hi)}
    return out


GROUPED_PROTOCOLS = ("gpu", "cnn", "model", "arch")


def _outer_folds(protocol: str, labels: dict[str, pd.Series], k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Outer folds of a grouped protocol: k groups of GPUs / families / CNNs, or the leave_arch_out folds."""
    if protocol == "arch":
        from src.train import ARCH_FOLDS

        arch = labels["arch"].to_numpy()
        return [(np.flatnonzero(np.isin(arch, old)), np.flatnonzero(np.isin(arch, new)))
                for _, old, new in ARCH_FOLDS if np.isin(arch, old).any() and np.isin(arch, new).any()]
    outer = conformal.group_codes(labels[protocol], k, seed + 7)
    return [(np.flatnonzero(outer != f), np.flatnonzero(outer == f)) for f in sorted(np.unique(outer))]


def grouped_coverage(template, data: SplitData, protocol: str, levels, k: int = 5, seed: int = 42,
                     max_outer: int | None = None, progress: bool = True, jobs: int = 1,
                     balanced: tuple[str, ...] = conformal.BALANCED_KINDS) -> dict:
    """Nested leave-group-out coverage: for each held-out group, calibrate inside the rest, fit, score it.

    protocol: "gpu" (k outer groups of GPUs, calibration by GPU folds inside), "cnn" (k groups of families),
    "model" (k groups of CNN architectures) or "arch" (the leave_arch_out folds: calibration by holding out the
    newest architectures of the training part).
    """
    if protocol not in GROUPED_PROTOCOLS:
        raise ValueError(f"grouped coverage: unknown protocol {protocol!r}; choose from {GROUPED_PROTOCOLS}")
    from src.train import architecture_labels

    X, y = data.df[data.cols].reset_index(drop=True), data.df["target"].to_numpy(dtype=float)
    gpu, fam = _labels(data.df)
    labels = {"gpu": gpu, "cnn": fam, "model": data.df["model_key"].astype(str).reset_index(drop=True),
              "arch": pd.Series(architecture_labels(data.df))}
    folds = _outer_folds(protocol, labels, k, seed)[: max_outer or None]
    hits = {f"{lv:.2f}": [] for lv in levels}
    per_group, widths = {}, {f"{lv:.2f}": [] for lv in levels}
    for tr, te in tqdm(folds, desc=f"coverage leave-{protocol}-out", disable=not progress):
        g_tr, f_tr = gpu.iloc[tr].reset_index(drop=True), fam.iloc[tr].reset_index(drop=True)
        if labels[protocol].iloc[tr].nunique() < 2:
            continue
        inner = {name: s.iloc[tr].reset_index(drop=True) for name, s in labels.items()}
        cal = conformal.calibrate(template, X.iloc[tr].reset_index(drop=True), y[tr], g_tr, f_tr, tuple(levels),
                                  (protocol,), k, seed, labels=inner, jobs=jobs, balanced=balanced)
        model = clone(template).fit(X.iloc[tr], y[tr])
        pred = np.asarray(model.predict(X.iloc[te]), dtype=float)
        name = ",".join(sorted(labels[protocol].iloc[te].unique()))[:80]
        per_group[name] = {"n": int(len(te)), "mape": float(np.mean(np.abs(pred - y[te]) / y[te]) * 100)}
        for lv in levels:
            q = conformal.pick_q(cal, protocol, lv)
            lo, hi = conformal.interval(pred, q)
            inside = (y[te] >= lo) & (y[te] <= hi)
            hits[f"{lv:.2f}"].append(inside)
            widths[f"{lv:.2f}"].append(np.full(len(te), np.exp(q)))
            per_group[name][f"coverage_{lv:.2f}"] = float(inside.mean())
    pooled = {lv: {"coverage": float(np.concatenate(h).mean()) if h else float("nan"),
                   "median_width_factor": float(np.median(np.concatenate(widths[lv]))) if h else float("nan")}
              for lv, h in hits.items()}
    return {"protocol": f"leave-{protocol}-out (nested: calibration by {protocol} folds inside each training part)",
            "pooled": pooled, "per_group": per_group, "n_folds": len(per_group)}


def run_split_fingerprint(run_id: str | None) -> str | None:
    """The `split_fingerprint` tag a training run set (md5 of its held-out measurement ids), if any."""
    if not run_id:
        return None
    from mlflow.tracking import MlflowClient

    return MlflowClient().get_run(run_id).data.tags.get("split_fingerprint")


def check_run_split(model: LoadedModel, data: SplitData) -> None:
    """A pipeline model's run names its test rows (tag `split_fingerprint`); the rebuilt split must name the same,
    or the calibration would score the model on rows it was fitted on."""
    from src.train import fingerprint

    tag = run_split_fingerprint(model.run_id)
    rebuilt = fingerprint(data.df["measurement_id"].to_numpy()[data.test])
    if tag and tag != rebuilt:
        raise ValueError(f"{model.uri}: run {model.run_id} was tested on other rows than the split rebuilt now "
                         f"(split_fingerprint tag {tag}, rebuilt {rebuilt}): the dataset or its config changed "
                         "since the run. Retrain (`dvc repro`) before calibrating.")


def kind_labels(df: pd.DataFrame, kinds) -> dict[str, pd.Series]:
    """The labels the grouped kinds among `kinds` fold by (conformal.GROUPED_KINDS), one per row of `df`."""
    from src.features.extrapolation import setup_labels
    from src.train import architecture_labels

    make = {"model": lambda: df["model_key"].astype(str),
            "arch": lambda: pd.Series(architecture_labels(df), index=df.index),
            "runtime": lambda: df["compile_mode"].astype(str),
            "setup": lambda: pd.Series(setup_labels(df), index=df.index, dtype=object)}
    return {kind: make[kind]().reset_index(drop=True) for kind in kinds if kind in make}


def code_fingerprint(root: Path = REPO_ROOT, parts: tuple[str, ...] = CALIBRATION_CODE) -> str:
    """md5 of the Python sources under `parts` (paths relative to `root`, in sorted order)."""
    h = hashlib.md5()
    for part in parts:
        for f in sorted((root / part).rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def model_fingerprint(model: LoadedModel, data: SplitData, test_pred: np.ndarray | None = None) -> str:
    """What a calibration is a function of: the code its fits run, the rebuilt split, and the model itself (its
    answers on the test rows, log-rounded to 1e-9; two configurations that answer all of them alike refit alike).
    A fresh clone's pipeline trains a new run of the same model; equal fingerprints let it keep the committed
    calibration instead of refitting it (the K-fold fits are deterministic in all of these)."""
    if test_pred is None:
        test_pred = model.pipeline.predict(data.df.iloc[data.test][data.cols])
    h = hashlib.md5()
    h.update(code_fingerprint().encode() + b"#" + data.fingerprint().encode() + b"#")
    h.update(np.round(np.log(np.asarray(test_pred, dtype=float)), 9).tobytes())
    return h.hexdigest()


def model_split(model: LoadedModel, overrides: list[str] | None = None, max_rows: int | None = None) -> SplitData:
    """The model's dataset and 70/30 split rebuilt from its config; refused where it is not the one it was fitted
    and tested on."""
    excluded = list(model.meta.get("excluded_families", []))
    data = load_split(model.meta.get("features", "engineered"), excluded, overrides,
                      max_rows if max_rows is not None else model.meta.get("max_rows"))
    expected = model.meta.get("split_fingerprint")
    if expected and expected != data.fingerprint():
        raise ValueError(f"{model.uri}: the dataset rebuilt now differs from the one the model was fitted on (split "
                         "fingerprint mismatch: measurement, static-feature or config files changed); calibrating "
                         "would mix its training rows into the test split. Refit it (fit-holdout) first.")
    check_run_split(model, data)
    return data


def calibrate_model(model: LoadedModel, levels=conformal.LEVELS, k: int = 5, kinds=conformal.SERVED_KINDS,
                    grouped: tuple[str, ...] = (), max_rows: int | None = None, progress: bool = True,
                    overrides: list[str] | None = None, jobs: int = 1,
                    balanced: tuple[str, ...] = conformal.BALANCED_KINDS) -> tuple[dict, SplitData]:
    """Calibration JSON for a loaded model (training part only) + its test-split and excluded-rows coverage;
    `jobs` worker processes fit the cross-conformal folds; the `balanced` kinds weigh each fold equally."""
    t0 = time.perf_counter()
    excluded = list(model.meta.get("excluded_families", []))
    data = model_split(model, overrides, max_rows)
    seed = int(data.config["seed"])
    X, y = data.df[data.cols].reset_index(drop=True), data.df["target"].to_numpy(dtype=float)
    gpu, fam = _labels(data.df)
    tr = data.train
    template = clone(model.pipeline)
    labels = {name: v.iloc[tr].reset_index(drop=True) for name, v in kind_labels(data.df, kinds).items()}
    cal = conformal.calibrate(template, X.iloc[tr].reset_index(drop=True), y[tr], gpu.iloc[tr], fam.iloc[tr],
                              tuple(levels), tuple(kinds), k, seed, progress, labels=labels, jobs=jobs,
                              balanced=tuple(balanced))
    cal.update({
        "model_uri": model.uri, "run_id": model.run_id, "features": model.meta.get("features"),
        "split_fingerprint": data.fingerprint(),
        "excluded_families": excluded, "train_rows": int(len(tr)), "test_rows": int(len(data.test)),
        "train_gpus": sorted(gpu.iloc[tr].unique().tolist()),
        "train_model_keys": sorted(data.df["model_key"].iloc[tr].astype(str).unique().tolist()),
        "train_families": sorted(fam.iloc[tr].unique().tolist()),
    })
    cal["test_coverage"] = split_coverage(model.pipeline, data, cal, levels)
    test = data.df.iloc[data.test]
    test_pred = model.pipeline.predict(test[data.cols])
    cal["model_fingerprint"] = model_fingerprint(model, data, test_pred)
    cal["test_gpu_ranking"] = ranking_agreement(test, test["target"].to_numpy(dtype=float), test_pred)
    cal["excluded_family_coverage"] = excluded_coverage(model.pipeline, data, cal, levels)
    cal["grouped_coverage"] = {p: grouped_coverage(template, data, p, levels, k, seed, progress=progress, jobs=jobs,
                                                   balanced=tuple(balanced)) for p in grouped}
    cal["seconds"] = time.perf_counter() - t0
    return cal, data


def reusable(cal: dict | None, model: LoadedModel, levels, kinds, k: int | None = None,
             balanced: tuple[str, ...] = conformal.BALANCED_KINDS, fingerprint: str | None = None) -> bool:
    """Whether the calibration stored with the model already answers for it: the same run (whose rows register
    checked against the data), the same K (when given), every requested level and novelty kind, the same
    fold-balanced kinds among them (a calibration made before balancing existed has none), and quantiles computed
    by today's rule (`conformal.QUANTILE_RULE_VERSION`: a calibration kept across a change of the rule would differ
    from what a fresh clone's pipeline writes). The pipeline's
    calibrate stage runs on every `dvc repro` (its real input, the registry, is outside DVC) and refits only when the
    champion changed; the same K keeps its report what a fresh clone's pipeline writes. With `fingerprint` (the
    model's `model_fingerprint` now), the calibration must also carry it: one made by other code is refitted."""
    if not cal or not model.run_id or cal.get("run_id") != model.run_id:
        return False
    return answers(cal, model, levels, kinds, k, balanced, fingerprint)


def reusable_report(report: dict | None, model: LoadedModel, levels, kinds, fingerprint: str, k: int | None = None,
                    balanced: tuple[str, ...] = conformal.BALANCED_KINDS, grouped: tuple[str, ...] = ()) -> bool:
    """Whether the calibration report the last pipeline run wrote (DVC keeps it: `persist`) answers for a champion
    of another run, as on a fresh clone: the same model fingerprint (code, split, answers), K, balancing and
    quantile rule, and exactly the levels, kinds and grouped protocols asked for (so that keeping it writes the bytes
    a new calibration would)."""
    if not report:
        return False
    exact = ({f"{float(lv):.2f}" for lv in report.get("levels", [])} == {f"{float(lv):.2f}" for lv in levels}
             and set(report.get("quantiles", {})) == set(kinds)
             and set(report.get("grouped_coverage") or {}) == set(grouped))
    return exact and answers(report, model, levels, kinds, k, balanced, fingerprint)


def answers(cal: dict, model: LoadedModel, levels, kinds, k: int | None, balanced: tuple[str, ...],
            fingerprint: str | None) -> bool:
    """The checks both reuses share, whichever run the calibration was made for (see `reusable`)."""
    if fingerprint is not None and cal.get("model_fingerprint") != fingerprint:
        return False
    expected = model.meta.get("split_fingerprint")
    if expected and cal.get("split_fingerprint") != expected:
        return False
    have_levels = {f"{float(lv):.2f}" for lv in cal.get("levels", [])}
    quantiles = cal.get("quantiles", {})
    same_k = k is None or int(cal.get("k", -1)) == int(k)
    same_balance = set(cal.get("balanced_kinds", [])) & set(kinds) == {kind for kind in kinds if kind in balanced}
    same_rule = cal.get("quantile_rule_version") == conformal.QUANTILE_RULE_VERSION
    return (same_k and same_balance and same_rule and {f"{float(lv):.2f}" for lv in levels} <= have_levels
            and all(kind in quantiles for kind in kinds))


def summary(cal: dict) -> dict:
    """The numbers people compare across runs (DVC metrics): test-split coverage and width per level, and each
    novelty kind's width factor exp(q)."""
    out = {"model_uri": cal["model_uri"], "k": cal["k"], "train_rows": cal["train_rows"],
           "test_rows": cal["test_rows"], "test_coverage": {}, "width_factor": {}}
    for lv, v in cal["test_coverage"].items():
        out["test_coverage"][lv] = round(float(v["coverage"]), 4)
    for kind, qs in cal["quantiles"].items():
        out["width_factor"][kind] = {lv: round(float(np.exp(q)), 4) for lv, q in qs.items()}
    grouped = cal.get("grouped_coverage") or {}
    if grouped:
        out["grouped_coverage"] = {p: {lv: round(float(v["coverage"]), 4) for lv, v in g["pooled"].items()}
                                   for p, g in grouped.items()}
    return out


def log_calibration(cal: dict, run_id: str) -> None:
    """Store the calibration next to the model (artifact conformal/conformal.json of the model's run)."""
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / Path(CONFORMAL_ARTIFACT).name
        p.write_text(json.dumps(cal, indent=2, default=float))
        MlflowClient().log_artifact(run_id, str(p), artifact_path=str(Path(CONFORMAL_ARTIFACT).parent))


def serve_calibration(cal: dict, model: LoadedModel) -> bool:
    """Put the calibration into the served model's folder (artifacts/conformal.json of its MLflow logged model),
    where `mlflow models serve` reads it (src/features/served.py), unless the folder holds it already. False for a
    model that is not an MLflow logged model (a local folder) or already holds it; True once it is written.

    Why after logging: the calibration refits the logged model on its training part, so it exists only once the
    model does; the registered version keeps pointing at the same logged model, which now answers with intervals."""
    from mlflow.tracking import MlflowClient

    text = json.dumps(cal, indent=2, default=float, sort_keys=True)
    if not model.model_id or (model.served_conformal is not None
                              and json.dumps(model.served_conformal, indent=2, default=float, sort_keys=True) == text):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / CALIBRATION_FILE
        p.write_text(text)
        MlflowClient().log_model_artifact(model.model_id, str(p), artifact_path="artifacts")
    return True
