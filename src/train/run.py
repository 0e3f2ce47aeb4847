"""Train one model under every configured protocol; log to MLflow; write reports/train/<model>/.

Protocol, in short (details in docs/training.md):
- random: one seeded Optuna study on the 70 % training part (KFold CV on at most sweep.tune_max_rows rows),
  refit with the best parameters on the whole training part, score once on the 30 % test part.
- leave_gpu_out / leave_family_out: for each held-out group a small study (sweep.fold_trials, GroupKFold by
  the same grouping inside the fold's training part, warm-started with the random study's best parameters),
  refit on the fold's training part, score on the held-out group. Held-out rows never reach tuning or fitting.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from src.evaluate import plots
from src.evaluate.importance import permutation
from src.evaluate.metrics import all_metrics
from src.features.dataset import build_dataset
from src.features.engineer import input_columns
from src.serve.model import log_pyfunc, request_columns
from src.tracking import file_md5, git_commit, outer_run_active, setup, slug
from src.train.config import REPO_ROOT
from src.train.estimators import build_model, feature_names, native_importances
from src.train.protocols import GROUP_COLUMN, cv_splits, family_labels, grouped_folds, iter_protocols, random_split
from src.train.protocols import subsample as sub
from src.train.tuning import create_study, trials_frame, tune

log = logging.getLogger("cnnperf.train")
METRIC_KEYS = ("mape", "median_ape", "within_10pct", "r2", "adj_r2", "r2_log")


def pip_requirements(model_name: str) -> list[str]:
    """Pinned requirements of the served model (xgboost-cpu named explicitly, see STACK-NOTES)."""
    pkgs = ["mlflow", "scikit-learn", "pandas", "numpy", "cloudpickle", "scipy"]
    if model_name == "xgb":
        pkgs.append("xgboost-cpu")
    reqs = []
    for p in pkgs:
        try:
            reqs.append(f"{p}=={version(p)}")
        except PackageNotFoundError:
            reqs.append(p)
    return reqs


class Trainer:
    """Holds the dataset and config of one model's training (one `python -m src.train model=<name>` job)."""

    def __init__(self, c: dict):
        self.c = c
        self.name = c["model"]["name"]
        self.seed = int(c["seed"])
        self.progress = bool(c.get("progress", True))
        self.df, self.report, self.ptx = build_dataset(REPO_ROOT, c["data"], c["features"], c["target"], self.seed)
        if len(self.df) < 50:
            raise ValueError(f"only {len(self.df)} usable rows after filtering: {self.report.as_dict()['filters']}")
        self.cols = input_columns(c["features"], self.ptx)
        self.X = self.df[self.cols]
        self.y = self.df["target"].to_numpy(dtype=float)
        self.out_dir = REPO_ROOT / c["reports_dir"] / self.name
        self.out_dir.mkdir(parents=True, exist_ok=True)
        commit, dirty = git_commit()
        self.tags = {
            "model": self.name,
            "features": c["features"]["name"],
            "target": c["target"]["name"],
            "data_version": file_md5(REPO_ROOT / c["data"]["measurements"]),
            "gpus_version": file_md5(REPO_ROOT / c["data"]["gpus"]),
            "git_commit": commit,
            "git_dirty": str(dirty),
        }
        gpus = pd.read_parquet(REPO_ROOT / c["data"]["gpus"])
        self.gpus = gpus[["gpu"] + list(c["features"]["gpu_features"])].dropna().reset_index(drop=True)
        self.meta = {
            "numeric_inputs": list(c["features"]["numeric_inputs"]),
            "categorical_inputs": list(c["features"]["categorical_inputs"]),
            "open_categorical": list(c["features"].get("open_categorical") or []),
            "gpu_features": list(c["features"]["gpu_features"]),
            "ptx_features": list(self.ptx),
            "input_columns": self.cols,
            "categories": {k: sorted(self.df[k].astype(str).unique().tolist())
                           for k in c["features"]["categorical_inputs"]},
            "output": c["target"]["column"],
            "unit": c["target"]["unit"],
            "model": self.name,
            "features": c["features"]["name"],
        }

    # -- helpers -----------------------------------------------------------------------------------------
    def make_model(self, params: dict):
        return build_model(self.c["model"], self.c["features"], self.ptx, params, bool(self.c["target"]["log"]))

    def study_name(self, protocol: str, fold: str | None = None) -> str:
        parts = [self.c["sweep"]["study_prefix"], self.name, protocol, self.c["features"]["name"],
                 self.c["target"]["name"], self.tags["data_version"][:8]]
        if fold:
            parts.insert(3, slug(fold))
        return "-".join(parts)

    def base_params(self) -> dict:
        s = self.c["sweep"]
        return {"estimator": self.c["model"]["estimator"], "features": self.c["features"]["name"],
                "target": self.c["target"]["name"], "rows": len(self.df), "n_trials": self.c["model"]["n_trials"],
                "fold_trials": s["fold_trials"], "cv_folds": s["cv_folds"], "tune_max_rows": s["tune_max_rows"],
                "fold_cv_folds": s["fold_cv_folds"], "fold_tune_max_rows": s["fold_tune_max_rows"],
                "grouped_warm_start": s["grouped_warm_start"],
                "seed": self.seed, **{f"fixed_{k}": v for k, v in (self.c["model"].get("fixed") or {}).items()}}

    def log_importances(self, model, X_test: pd.DataFrame, y_test: np.ndarray, prefix: Path, title: str) -> dict:
        s = self.c["sweep"]
        perm = permutation(model, X_test, y_test, self.cols, int(s["perm_max_rows"]), int(s["perm_repeats"]),
                           self.seed)
        result = {"permutation_mape_pp": perm}
        mlflow.log_metrics({f"perm_importance/{slug(k)}": v for k, v in perm.items()})
        plots.importances(perm, "permutation importance: MAPE increase (percentage points)",
                          f"{title}: permutation importance", prefix.with_name(prefix.name + "_perm.png"))
        native = native_importances(model, self.name)
        if native:
            kind, vals = native
            result[kind] = vals
            mlflow.log_metrics({f"{kind}_importance/{slug(k)}": v for k, v in vals.items()})
            plots.importances(vals, f"{kind} importance", f"{title}: {kind} importance",
                              prefix.with_name(prefix.name + f"_{kind}.png"))
        return result

    # -- protocols ---------------------------------------------------------------------------------------
    def run_random(self) -> dict:
        c, s = self.c, self.c["sweep"]
        fold = random_split(self.df, float(c["split"]["random"]["test_size"]), self.seed)
        art = self.out_dir / "random"
        art.mkdir(exist_ok=True)
        with mlflow.start_run(run_name=f"{self.name}/random", nested=outer_run_active() or
                              mlflow.active_run() is not None) as run:
            mlflow.set_tags({**self.tags, "protocol": "random", "run_kind": "study"})
            mlflow.log_params(self.base_params())
            tune_idx = sub(fold.train, s["tune_max_rows"], self.seed)
            splits = cv_splits(len(tune_idx), None, int(s["cv_folds"]), self.seed)
            t0 = time.perf_counter()
            study = create_study(self.study_name("random"), s["storage"], self.seed)
            tune(study, c["model"]["search_space"], self.make_model, self.X.iloc[tune_idx], self.y[tune_idx],
                 splits, int(c["model"]["n_trials"]), bool(c["mlflow"]["log_trials"]), f"{self.name}/random",
                 progress=self.progress)
            t_tune = time.perf_counter() - t0
            best, cv = dict(study.best_params), float(study.best_value)
            trials_frame(study).to_csv(art / "trials.csv", index=False)
            t0 = time.perf_counter()
            model = self.make_model(best).fit(self.X.iloc[fold.train], self.y[fold.train])
            t_fit = time.perf_counter() - t0
            t0 = time.perf_counter()
            pred = model.predict(self.X.iloc[fold.test])
            t_pred = time.perf_counter() - t0
            n_feat = len(feature_names(model))
            m = all_metrics(self.y[fold.test], pred, n_feat)
            pred_df = self.pred_frame(fold.test, pred)
            per_gpu = {g: all_metrics(p["measured"], p["predicted"], n_feat) for g, p in pred_df.groupby("gpu")}
            mlflow.log_params({f"best_{k}": v for k, v in best.items()})
            mlflow.log_params({"n_model_features": n_feat, "train_rows": len(fold.train),
                               "test_rows": len(fold.test), "study": study.study_name})
            mlflow.log_metrics({**{k: v for k, v in m.items()}, "cv_mape": cv, "tune_seconds": t_tune,
                                "fit_seconds": t_fit, "predict_us_per_row": t_pred / len(fold.test) * 1e6})
            mlflow.log_metrics({f"gpu_mape/{slug(g)}": v["mape"] for g, v in per_gpu.items()})
            imps = self.log_importances(model, self.X.iloc[fold.test], self.y[fold.test], art / "importance",
                                        f"{self.name} random")
            self.write_common(art, pred_df, imps, f"{self.name} random 70/30")
            mlflow.log_artifacts(str(art), artifact_path="report")
            example = self.df.iloc[fold.test[:3]][request_columns(self.meta)].reset_index(drop=True)
            info = log_pyfunc(model, self.gpus, self.meta, example, pip_requirements(self.name))
            mlflow.set_tag("model_uri", info.model_uri)
            return {**m, "cv_mape": cv, "n_features": n_feat, "best_params": best, "run_id": run.info.run_id,
                    "model_uri": info.model_uri, "per_gpu_mape": {g: v["mape"] for g, v in per_gpu.items()},
                    "train_rows": len(fold.train), "test_rows": len(fold.test),
                    "timing_s": {"tune": t_tune, "fit": t_fit, "predict": t_pred}, "importances": imps}

    def run_grouped(self, protocol: str, warm: dict | None) -> dict:
        c, s = self.c, self.c["sweep"]
        folds, skipped = grouped_folds(self.df, protocol, c["split"], self.seed)
        labels = (self.df["gpu"].astype(str) if GROUP_COLUMN[protocol] == "gpu" else family_labels(self.df)).to_numpy()
        art = self.out_dir / protocol
        art.mkdir(exist_ok=True)
        t_start = time.perf_counter()
        with mlflow.start_run(run_name=f"{self.name}/{protocol}", nested=outer_run_active() or
                              mlflow.active_run() is not None) as run:
            mlflow.set_tags({**self.tags, "protocol": protocol, "run_kind": "protocol",
                             "skipped_groups": json.dumps(skipped)})
            mlflow.log_params({**self.base_params(), "n_folds": len(folds)})
            fold_metrics, preds, perm_list, native_list, fold_params = {}, [], [], [], {}
            for fold in tqdm(folds, desc=f"{self.name} {protocol}", disable=not self.progress):
                with mlflow.start_run(run_name=f"{self.name}/{protocol}/{fold.name}", nested=True):
                    mlflow.set_tags({**self.tags, "protocol": protocol, "run_kind": "fold",
                                     "held_out": json.dumps(fold.held_out)})
                    tune_idx = sub(fold.train, s["fold_tune_max_rows"], self.seed)
                    splits = cv_splits(len(tune_idx), labels[tune_idx], int(s["fold_cv_folds"]), self.seed)
                    study = create_study(self.study_name(protocol, fold.name), s["storage"], self.seed)
                    tune(study, c["model"]["search_space"], self.make_model, self.X.iloc[tune_idx],
                         self.y[tune_idx], splits, int(s["fold_trials"]), bool(c["mlflow"]["log_trials"]),
                         f"{self.name}/{protocol}/{fold.name}", enqueue=warm, progress=False)
                    best = dict(study.best_params)
                    model = self.make_model(best).fit(self.X.iloc[fold.train], self.y[fold.train])
                    pred = model.predict(self.X.iloc[fold.test])
                    n_feat = len(feature_names(model))
                    m = all_metrics(self.y[fold.test], pred, n_feat)
                    mlflow.log_params({f"best_{k}": v for k, v in best.items()})
                    mlflow.log_params({"train_rows": len(fold.train), "test_rows": len(fold.test)})
                    mlflow.log_metrics({**m, "cv_mape": float(study.best_value)})
                    perm_rows = max(200, int(s["perm_max_rows"]) // max(1, len(folds)))
                    perm_list.append(permutation(model, self.X.iloc[fold.test], self.y[fold.test], self.cols,
                                                 perm_rows, int(s["perm_repeats"]), self.seed))
                    nat = native_importances(model, self.name)
                    if nat:
                        native_list.append(nat)
                    fold_metrics[fold.name] = {**m, "held_out": fold.held_out}
                    fold_params[fold.name] = best
                    p = self.pred_frame(fold.test, pred)
                    p["fold"] = fold.name
                    preds.append(p)
            pred_df = pd.concat(preds, ignore_index=True)
            mean = {k: float(np.nanmean([f[k] for f in fold_metrics.values()])) for k in METRIC_KEYS}
            pooled = all_metrics(pred_df["measured"], pred_df["predicted"], n_feat)
            mlflow.log_metrics({**mean, **{f"pooled_{k}": v for k, v in pooled.items()}})
            mlflow.log_metrics({f"group_mape/{slug(g)}": f["mape"] for g, f in fold_metrics.items()})
            perm = pd.DataFrame(perm_list).mean().to_dict()
            imps = {"permutation_mape_pp": perm}
            mlflow.log_metrics({f"perm_importance/{slug(k)}": v for k, v in perm.items()})
            plots.importances(perm, "permutation importance: MAPE increase (pp), mean over folds",
                              f"{self.name} {protocol}: permutation", art / "importance_perm.png")
            if native_list:
                kind = native_list[0][0]
                vals = pd.DataFrame([v for _, v in native_list]).mean().to_dict()
                imps[kind] = vals
                plots.importances(vals, f"{kind} importance (mean over folds)",
                                  f"{self.name} {protocol}: {kind}", art / f"importance_{kind}.png")
            if protocol == "leave_family_out":
                fam = family_labels(self.df).to_numpy()
                pred_df["family"] = fam[pred_df["row"].to_numpy()]
                per_family = {f: all_metrics(p["measured"], p["predicted"], n_feat)["mape"]
                              for f, p in pred_df.groupby("family")}
                pd.Series(per_family, name="mape").rename_axis("family").to_csv(art / "per_family_mape.csv")
            self.write_common(art, pred_df, imps, f"{self.name} {protocol} (pooled held-out predictions)")
            pd.DataFrame(fold_metrics).T.to_csv(art / "folds.csv")
            mlflow.log_artifacts(str(art), artifact_path="report")
            return {**mean, "pooled": pooled, "per_group": fold_metrics, "fold_params": fold_params,
                    "skipped_groups": skipped, "run_id": run.info.run_id, "n_features": n_feat,
                    "timing_s": {"total": time.perf_counter() - t_start}, "importances": imps,
                    "aggregation": "mean over held-out groups; pooled_* over all held-out rows"}

    def pred_frame(self, idx: np.ndarray, pred: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"row": idx, "measurement_id": self.df["measurement_id"].to_numpy()[idx],
                             "gpu": self.df["gpu"].to_numpy()[idx], "model": self.df["model"].to_numpy()[idx],
                             "measured": self.y[idx], "predicted": np.asarray(pred, dtype=float)})

    def write_common(self, art: Path, pred_df: pd.DataFrame, imps: dict, title: str) -> None:
        pred_df.to_csv(art / "predictions.csv", index=False)
        plots.predicted_vs_measured(pred_df, title, art / "predicted_vs_measured.png")
        plots.residuals_per_gpu(pred_df, title, art / "residuals_per_gpu.png")
        rows = [{"kind": kind, "feature": f, "importance": v} for kind, vals in imps.items() for f, v in vals.items()]
        pd.DataFrame(rows).to_csv(art / "importances.csv", index=False)

    # -- entry -------------------------------------------------------------------------------------------
    def run(self) -> dict:
        t0 = time.perf_counter()
        results: dict = {}
        warm = dict(self.c["model"].get("warm_start") or {}) or None
        for protocol in iter_protocols(list(self.c["split"]["protocols"])):
            log.info("%s: protocol %s", self.name, protocol)
            if protocol == "random":
                results["random"] = self.run_random()
                if self.c["sweep"]["grouped_warm_start"] == "random_best":
                    warm = results["random"]["best_params"]
            else:
                results[protocol] = self.run_grouped(protocol, warm)
        summary = {
            "model": self.name, "estimator": self.c["model"]["estimator"], "tags": self.tags,
            "dataset": self.report.as_dict(), "validation_cv_mape": results.get("random", {}).get("cv_mape"),
            "protocols": results, "wall_seconds": time.perf_counter() - t0,
        }
        (self.out_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
        return summary


def train(c: dict) -> dict:
    """Entry used by the Hydra app, the sweep and tests: resolved config dict -> summary dict."""
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    ctx = mlflow.start_run() if outer_run_active() else contextlib.nullcontext()
    with ctx:
        return Trainer(c).run()
