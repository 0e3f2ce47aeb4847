"""Train one model under every configured protocol; log to MLflow; write reports/train/<model>/.

Protocol, in short (details in docs/training.md):
- every protocol is a list of folds (one for `random` and `random_rows`); the unit of every split is a
  configuration, so rows that differ only by framework release or repeated run never straddle a split;
- every fold gets the same Optuna budget: a seeded study of the model's `n_trials` trials (the first is the
  hand-set `warm_start`), cross-validated on at most `sweep.tune_max_rows` rows of the fold's training part,
  grouped by the protocol's unit (configuration, CNN, GPU or family); except a fold whose every held-out row the
  efficiency target's `unseen_fallback` answers (leave_runtime_out: no training row ran that runtime), where no
  parameter can change a held-out prediction: it fits the warm start alone (one trial), and where one column
  (the runtime) is unseen on every held-out row it skips fitting the learner, whose answers no row would use;
- the selected parameters (`model.selection`: the best CV MAPE, or CART's one-standard-error rule) are refitted
  on the fold's whole training part and scored once on its held-out part;
- the `random` protocol also scores the chosen parameters by a selection CV (`selection_cv_mape`): the same
  grouped folds over ALL rows of its training part for every model, whatever rows each model tuned on, so that
  `register` compares the models on identical rows;
- headline metrics are pooled over all held-out rows (n = rows scored), with the median and worst group beside.
The `random` protocol's model is the one logged for serving (the reported run is the served run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import sys
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pandas as pd
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from src.config import REPO_ROOT
from src.features.baseline import PhysicsBaselineRegressor, fallback_column, fallback_rows
from src.features.dataset import DatasetError
from src.features.engineer import input_columns
from src.tracking import file_md5, git_commit, outer_run_active, setup, slug, write_run_log
from src.train import plots
from src.train.estimators import feature_names, native_importances
from src.train.fit import log_served_model, make_model, ptx_columns
from src.train.importance import permutation
from src.train.metrics import all_metrics, support_metrics
from src.train.point import blended_shift, check_rule, mape_optimal_shift
from src.train.protocols import (
    GROUP_TABLE,
    cv_splits,
    family_labels,
    fingerprint,
    group_labels,
    iter_protocols,
    outer_folds,
    setting_support,
    twins_across,
)
from src.train.protocols import subsample as sub
from src.train.tuning import (
    OOF_SHIFT_ATTR,
    UntunedTrial,
    create_study,
    cv_mape,
    select_trial,
    trials_frame,
    tune,
)

log = logging.getLogger("cnnperf.train")
METRIC_KEYS = ("mape", "median_ape", "within_10pct", "r2", "adj_r2", "r2_log")
# The column whose values name a protocol's per-group table (median / worst group).
# What differs between two runs of the same code on the same data: kept out of the committed metrics.json (and so
# out of dvc.lock), written to the run log reports/train/runs/<model>.json instead (src.tracking.run_log_path).
RUN_TAGS = ("git_commit", "git_dirty")
RUN_KEYS = ("run_id", "model_uri", "timing_s")
# Protocols of exactly one fold (a seeded split): `Trainer.side_by_side` runs them at the same time.
SINGLE_FOLD = ("random", "random_rows")


def load_dataset(c: dict, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The `features` stage's table (one source of truth); names what is missing and how to build it."""
    path = root / c["data"]["dataset"]
    if not path.exists():
        raise DatasetError(f"{path}: not found; build it with `python -m src.features` (DVC stage `features`)")
    df = pd.read_parquet(path)
    # Text columns as Python objects, not Arrow strings: the Pipeline reads them as NumPy object arrays at every
    # fit and predict, and each Arrow -> object conversion walks the column item by item.
    df = df.astype({col: object for col in df.columns if pd.api.types.is_string_dtype(df[col])})
    ptx = ptx_columns(c, df)
    if c["features"].get("use_ptx") and not ptx:
        raise DatasetError(f"{path}: features.use_ptx=true but the table has no PTX columns; rebuild it with "
                           f"`python -m src.features features={c['features']['name']}`")
    need = input_columns(c["features"], ptx) + ["target", "measurement_id", "model_key", "gpu", "family"]
    missing = [col for col in need if col not in df.columns]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {missing} for features={c['features']['name']}; rebuild "
                           f"it with `python -m src.features features={c['features']['name']}`")
    return df


def group_summary(pred_df: pd.DataFrame, by: str, n_feat: int, min_rows: int) -> tuple[dict, dict]:
    """Per-group metrics and the median / worst group MAPE over groups with at least `min_rows` rows."""
    per = {str(g): {**all_metrics(p["measured"], p["predicted"], n_feat), "rows": int(len(p))}
           for g, p in pred_df.groupby(by)}
    big = {g: v["mape"] for g, v in per.items() if v["rows"] >= min_rows}
    if not big:
        return per, {"group_median_mape": float("nan"), "group_worst_mape": float("nan"), "worst_group": "",
                     "groups_scored": 0}
    worst = max(big, key=big.get)
    return per, {"group_median_mape": float(np.median(list(big.values()))), "group_worst_mape": big[worst],
                 "worst_group": worst, "groups_scored": len(big)}


class Trainer:
    """Holds the dataset and config of one model's training (one `python -m src.train model=<name>` job)."""

    def __init__(self, c: dict):
        self.c = c
        self.name = c["model"]["name"]
        self.seed = int(c["seed"])
        self.progress = bool(c.get("progress", True))
        self._pool_lock = threading.Lock()
        self.pin_threads()
        self.df = load_dataset(c)
        if len(self.df) < 50:
            raise ValueError(f"only {len(self.df)} usable rows in {c['data']['dataset']}")
        self.ptx = ptx_columns(c, self.df)
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
            "dataset_version": file_md5(REPO_ROOT / c["data"]["dataset"]),
            "gpus_version": file_md5(REPO_ROOT / c["data"]["gpus"]),
            "git_commit": commit,
            "git_dirty": str(dirty),
        }

    # -- helpers -----------------------------------------------------------------------------------------
    def pin_threads(self) -> None:
        """BLAS/OpenMP pools at the estimators' threads (sweep.n_jobs), for the calling thread: lr's least squares
        and knn's distances sum in an order that depends on how many threads they run, so the numbers would
        depend on fold_jobs, the fold backend and the machine's cores. OpenMP's setting is per thread, so every
        thread that trains (the main one, fold and protocol threads, worker processes) calls this."""
        threadpool_limits(limits=int(self.c["sweep"]["n_jobs"]))

    def make_model(self, params: dict):
        return make_model(self.c, params, self.ptx)

    def study_name(self, protocol: str, fold: str | None = None) -> str:
        parts = [self.c["sweep"]["study_prefix"], self.name, protocol, self.c["features"]["name"],
                 self.c["target"]["name"], self.tags["dataset_version"][:8]]
        if fold and fold != protocol:
            parts.insert(3, slug(fold))
        return "-".join(parts)

    def budget(self) -> dict:
        """The tuning budget every study of this model gets, whatever the protocol or fold."""
        s = self.c["sweep"]
        # a model may set its own tuning rows (conf/model/<name>.yaml `tune_max_rows`, null = all training rows)
        rows = self.c["model"]["tune_max_rows"] if "tune_max_rows" in self.c["model"] else s["tune_max_rows"]
        return {"n_trials": int(self.c["model"]["n_trials"]), "cv_folds": int(s["cv_folds"]),
                "tune_max_rows": None if rows is None else int(rows)}

    def base_params(self) -> dict:
        return {"estimator": self.c["model"]["estimator"], "features": self.c["features"]["name"],
                "target": self.c["target"]["name"], "rows": len(self.df), **self.budget(), "seed": self.seed,
                **{f"fixed_{k}": v for k, v in (self.c["model"].get("fixed") or {}).items()}}

    def pred_frame(self, idx: np.ndarray, pred: np.ndarray) -> pd.DataFrame:
        d = self.df
        return pd.DataFrame({"row": idx, "measurement_id": d["measurement_id"].to_numpy()[idx],
                             "gpu": d["gpu"].to_numpy()[idx], "model": d["model"].to_numpy()[idx],
                             "model_key": d["model_key"].to_numpy()[idx],
                             "family": family_labels(d).to_numpy()[idx],
                             "runtime": d["compile_mode"].astype(str).to_numpy()[idx],
                             "measured": self.y[idx], "predicted": np.asarray(pred, dtype=float)})

    def write_common(self, art: Path, pred_df: pd.DataFrame, imps: dict, title: str) -> None:
        pred_df.to_csv(art / "predictions.csv", index=False)
        plots.predicted_vs_measured(pred_df, title, art / "predicted_vs_measured.png")
        plots.residuals_per_gpu(pred_df, title, art / "residuals_per_gpu.png")
        rows = [{"kind": kind, "feature": f, "importance": v} for kind, vals in imps.items() for f, v in vals.items()]
        pd.DataFrame(rows).to_csv(art / "importances.csv", index=False)

    # -- one fold ----------------------------------------------------------------------------------------
    def fit_fold(self, protocol: str, fold, labels: np.ndarray | None, warm: dict | None, log_trials: bool,
                 run_prefix: str, parent_run: str | None = None) -> tuple:
        """Tune on the fold's training part only (grouped CV), refit, predict its held-out part; trial runs nest
        under `parent_run` (default: the active run; a fold run in a worker thread names its own)."""
        b = self.budget()
        tune_idx = sub(fold.train, b["tune_max_rows"], self.seed)
        # the random protocol's model is served: whole; elsewhere a fold whose held-out rows all take the fallback
        # for a kind no training row has fits no learner, so it needs no tuning either (its warm start is recorded)
        skip_learner = protocol != "random" and self.learner_free(fold)
        if skip_learner and warm:
            study, chosen, n_trials, t_tune = None, UntunedTrial(dict(warm)), 0, 0.0
        else:
            n_trials = 1 if warm and self.fallback_only(fold) else b["n_trials"]
            splits = cv_splits(len(tune_idx), None if labels is None else labels[tune_idx], b["cv_folds"],
                               self.seed)
            study = create_study(self.study_name(protocol, fold.name), self.c["sweep"]["storage"], self.seed)
            t0 = time.perf_counter()
            tune(study, self.c["model"]["search_space"], self.make_model, self.X.iloc[tune_idx], self.y[tune_idx],
                 splits, n_trials, log_trials, run_prefix, enqueue=warm,
                 progress=self.progress and protocol == "random", parent_run=parent_run)
            t_tune = time.perf_counter() - t0
            chosen = select_trial(study, self.c["model"].get("selection"), self.c["model"]["search_space"])
        best = dict(chosen.params)
        t0 = time.perf_counter()
        model = self.make_model(best)
        if protocol == "random" and self.c["target"].get("by_numbers_learner"):
            # the served model answers a CNN outside the zoo with a learner of its own (src/features/baseline.py);
            # the other protocols score named CNNs and skip that second fit
            model.set_params(by_numbers_learner=True)
        if skip_learner:
            model = model.fit_without_learner(self.X.iloc[fold.train], self.y[fold.train])
        else:
            model = model.fit(self.X.iloc[fold.train], self.y[fold.train])
        shift = self.point_shift(model, tune_idx, chosen)
        if shift is not None:
            model.set_params(point_shift=shift)
        t_fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        pred = model.predict(self.X.iloc[fold.test])
        t_pred = time.perf_counter() - t0
        timing = {"tune": t_tune, "fit": t_fit, "predict": t_pred}
        return study, chosen, model, pred, timing, n_trials

    def point_shift(self, model, tune_idx: np.ndarray, chosen: optuna.trial.FrozenTrial) -> float | None:
        """The fitted fold model's MAPE-optimal log shift (`target.point: mape`, src/train/point.py): Efron's .632
        blend of the chosen trial's out-of-fold shift (its grouped tuning CV) and the model's own in-sample shift on
        the same tuning rows. None: no shift (`median`, or no learner answers any row)."""
        rule = check_rule(self.c["target"].get("point"))
        if rule == "median":
            return None
        if not isinstance(model, PhysicsBaselineRegressor):
            raise ValueError(f"target.point={rule} shifts the learned efficiency: it needs target=efficiency "
                             f"(target {self.c['target'].get('name')!r} has no physics baseline); set "
                             f"target.point=median")
        if not getattr(model, "learner_fitted_", True):
            return None
        oof = chosen.user_attrs.get(OOF_SHIFT_ATTR)
        if oof is None:
            log.warning("%s: trial %d has no out-of-fold shift (a study from before target.point); answering the "
                        "learner's median", self.name, chosen.number)
            return None
        in_sample = np.log(model.predict(self.X.iloc[tune_idx]) / self.y[tune_idx]) - float(model.point_shift)
        return blended_shift(mape_optimal_shift(in_sample), float(oof))

    def fallback_only(self, fold) -> bool:
        """Whether the model's fallback answers every held-out row of `fold` (so tuning cannot change them)."""
        t = self.c["target"]
        if not (t.get("unseen_fallback") and t.get("baseline") == "physics"):
            return False
        return bool(fallback_rows(self.X.iloc[fold.train], self.X.iloc[fold.test]).all())

    def learner_free(self, fold) -> bool:
        """Whether the fold's model can skip fitting its learner: one column (the runtime, say) has a kind no
        training row has on every held-out row, so the fallback answers them all, shuffled or not
        (src/features/baseline.py fallback_column). Its held-out predictions and importances are the same."""
        t = self.c["target"]
        if not (t.get("unseen_fallback") and t.get("baseline") == "physics"):
            return False
        return fallback_column(self.X.iloc[fold.train], self.X.iloc[fold.test]) is not None

    def selection_splits(self, fold, labels: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Folds over every row of the fold's training part (positions into `fold.train`), grouped like the
        protocol's tuning CV; they depend only on the data, the groups, `sweep.cv_folds` and the seed."""
        return cv_splits(len(fold.train), None if labels is None else labels[fold.train],
                         int(self.c["sweep"]["cv_folds"]), self.seed)

    def selection_cv(self, fold, labels: np.ndarray | None, best: dict) -> float:
        """CV MAPE of the tuned parameters on `selection_splits`: identical rows and folds for every model, so that
        the models can be ranked by it even when they tuned on different rows (`tune_max_rows` per model)."""
        return cv_mape(self.make_model, best, self.X.iloc[fold.train], self.y[fold.train],
                       self.selection_splits(fold, labels))

    def fold_job(self, fold, protocol: str, labels: np.ndarray | None, warm: dict | None, log_trials: bool,
                 single: bool, n_folds: int, protocol_run: str, art: Path) -> dict:
        """One outer fold: tune, refit, predict, score, importances; its MLflow run (a child of the protocol run)
        through the client API, so that folds can run in worker threads (`sweep.fold_jobs`): MLflow's active-run
        stack is per thread. A fold's numbers depend only on its data and the seed, never on the thread."""
        s = self.c["sweep"]
        self.pin_threads()
        client = MlflowClient()
        fold_run = None
        if not single:
            exp = client.get_run(protocol_run).info.experiment_id
            fold_run = client.create_run(exp, run_name=f"{self.name}/{protocol}/{fold.name}", tags={
                **self.tags, "protocol": protocol, "run_kind": "fold", "held_out": json.dumps(fold.held_out[:200]),
                MLFLOW_PARENT_RUN_ID: protocol_run}).info.run_id
        status = "FAILED"
        try:
            prefix = f"{self.name}/{protocol}" + ("" if single else f"/{fold.name}")
            study, chosen, model, pred, t, n_trials = self.fit_fold(protocol, fold, labels, warm, log_trials, prefix,
                                                          parent_run=fold_run or protocol_run)
            best = dict(chosen.params)
            n_feat = len(feature_names(model))
            m = all_metrics(self.y[fold.test], pred, n_feat)
            cv = float(chosen.value)
            if fold_run:
                now = int(time.time() * 1000)
                params = {**{f"best_{k}": v for k, v in best.items()}, "train_rows": len(fold.train),
                          "test_rows": len(fold.test)}
                client.log_batch(fold_run, params=[Param(k, str(v)) for k, v in params.items()],
                                 metrics=[Metric(k, float(v), now, 0) for k, v in {
                                     **m, "cv_mape": cv, "point_shift": row_shift(model)}.items()])
            elif study is not None:
                trials_frame(study, chosen.number).to_csv(art / "trials.csv", index=False)
            perm_rows = max(200, int(s["perm_max_rows"]) // max(1, n_folds))
            perm = permutation(model, self.X.iloc[fold.test], self.y[fold.test], self.cols, perm_rows,
                               int(s["perm_repeats"]), self.seed)
            row = {**m, "rows": int(len(fold.test)), "tuning_trials": n_trials,
                   "point_shift": row_shift(model),
                   "learner_fitted": bool(getattr(model, "learner_fitted_", True)), "held_out": fold.held_out[:50],
                   "held_out_groups": len(fold.held_out), "twins_across": twins_across(self.df, fold.train, fold.test)}
            p = self.pred_frame(fold.test, pred)
            p["fold"] = fold.name
            p["setting_support"] = setting_support(self.df, fold.train, fold.test)
            status = "FINISHED"
            return {"model": model, "n_features": n_feat, "timing": t, "cv_mape": cv, "perm": perm,
                    "native": native_importances(model, self.name), "row": row, "best": best, "pred": p}
        finally:
            if fold_run:
                client.set_terminated(fold_run, status)

    # -- one protocol ------------------------------------------------------------------------------------
    def run_protocol(self, protocol: str, warm: dict | None) -> dict:
        c, s = self.c, self.c["sweep"]
        self.pin_threads()
        folds, skipped = outer_folds(self.df, protocol, c["split"], self.seed)
        if not folds:
            raise DatasetError(f"split.protocols: {protocol} has no fold on this dataset (groups skipped for too few "
                               f"rows: {skipped}); drop it from split.protocols or change its settings")
        # random_rows keeps the old row-level tuning CV too: it exists only to show what twins do to a score.
        labels = None if protocol == "random_rows" else group_labels(self.df, protocol)
        single = len(folds) == 1
        serve = protocol == "random"
        art = self.out_dir / protocol
        art.mkdir(exist_ok=True)
        t_start = time.perf_counter()
        log_trials = bool(c["mlflow"]["log_trials"])
        with mlflow.start_run(run_name=f"{self.name}/{protocol}", nested=outer_run_active() or
                              mlflow.active_run() is not None) as run:
            study_names = [self.study_name(protocol, f.name) for f in folds]
            optuna_study = study_names[0] if single else self.study_name(protocol, "*")
            split_fp = fingerprint(np.concatenate([self.df["measurement_id"].to_numpy()[f.test] for f in folds]))
            run_tags = {**self.tags, "protocol": protocol, "run_kind": "study" if serve else "protocol",
                        "split_fingerprint": split_fp, "optuna_study": optuna_study,
                        "skipped_groups": json.dumps(skipped)}
            mlflow.set_tags(run_tags)
            mlflow.log_params({**self.base_params(), "n_folds": len(folds), "protocol": protocol})
            fold_rows, preds, perm_list, native_list, fold_params, cv_scores = {}, [], [], [], {}, []
            timing = {"tune": 0.0, "fit": 0.0, "predict": 0.0}
            model = None
            jobs = 1 if single else max(1, min(int(s.get("fold_jobs", 1)), len(folds)))
            pool_size = max(1, int(s.get("fold_jobs", 1)))  # one pool for every protocol (see `concurrent`)
            args = (protocol, labels, warm, log_trials, single, len(folds), run.info.run_id, art)
            if jobs > 1:  # schema first, in this thread: two workers creating it in a fresh database collide
                optuna.storages.get_storage(s["storage"])
            with contextlib.ExitStack() as stack:
                if jobs == 1:
                    done = map(lambda f: self.fold_job(f, *args), folds)
                elif self.fold_backend() == "process":
                    done = self.process_pool(pool_size).map(_fold_in_worker, folds, [args] * len(folds))
                else:
                    pool = stack.enter_context(ThreadPoolExecutor(max_workers=jobs))
                    done = pool.map(lambda f: self.fold_job(f, *args), folds)
                n_feat = None
                for fold, out in zip(folds, tqdm(done, total=len(folds), desc=f"{self.name} {protocol}",
                                                 disable=not self.progress or single), strict=True):
                    model, n_feat = out["model"], out["n_features"]
                    for k in timing:
                        timing[k] += out["timing"][k]
                    cv_scores.append(out["cv_mape"])
                    perm_list.append(out["perm"])
                    if out["native"]:
                        native_list.append(out["native"])
                    fold_rows[fold.name] = out["row"]
                    fold_params[fold.name] = out["best"]
                    preds.append(out["pred"])
            pred_df = pd.concat(preds, ignore_index=True)
            pooled = all_metrics(pred_df["measured"], pred_df["predicted"], n_feat)
            support = support_metrics(pred_df["measured"], pred_df["predicted"], pred_df["setting_support"])
            per_group, group_stats = group_summary(pred_df, GROUP_TABLE[protocol], n_feat,
                                                   int(c["split"]["min_group_rows"]))
            # folds that fit no learner were not tuned (NaN): the protocol's tuning CV is that of the others
            tuned = [score for score in cv_scores if np.isfinite(score)]
            cv = float(np.mean(tuned)) if tuned else float("nan")
            mlflow.log_metrics({**pooled, **{k: v for k, v in support.items() if np.isfinite(v)}, "cv_mape": cv,
                                "test_rows": len(pred_df),
                                **{k: v for k, v in group_stats.items() if k != "worst_group"},
                                "tune_seconds": timing["tune"], "fit_seconds": timing["fit"],
                                "predict_us_per_row": timing["predict"] / max(1, len(pred_df)) * 1e6})
            mlflow.set_tag("worst_group", group_stats["worst_group"])
            mlflow.log_metrics({f"group_mape/{slug(g)}": v["mape"] for g, v in per_group.items()})
            if single:
                mlflow.log_params({f"best_{k}": v for k, v in fold_params[folds[0].name].items()})
                mlflow.log_metric("point_shift", fold_rows[folds[0].name]["point_shift"])
                mlflow.log_params({"n_model_features": n_feat, "train_rows": len(folds[0].train),
                                   "test_rows": len(folds[0].test), "study": study_names[0]})
            imps = self.importances(perm_list, native_list, art, protocol)
            pd.DataFrame(per_group).T.rename_axis(GROUP_TABLE[protocol]).to_csv(art / "per_group.csv")
            pd.DataFrame(fold_rows).T.rename_axis("fold").to_csv(art / "folds.csv")
            split = {"protocol": protocol, "unit": "configuration" if protocol.startswith("random") else
                     GROUP_TABLE[protocol] if protocol != "leave_model_out" else "model_key",
                     "fingerprint": split_fp, "held_out_rows": int(len(pred_df)),
                     "folds": {f.name: sorted(self.df["measurement_id"].to_numpy()[f.test].tolist()) for f in folds}}
            (art / "split.json").write_text(json.dumps(split, indent=1) + "\n")
            self.write_common(art, pred_df, imps, f"{self.name} {protocol} (held-out predictions)")
            mlflow.log_artifacts(str(art), artifact_path="report")
            result = {**pooled, **support, **group_stats, "cv_mape": cv, "n_features": n_feat,
                      "test_rows": int(len(pred_df)), "folds": len(folds), "per_group": per_group,
                      "per_fold": fold_rows, "fold_params": fold_params,
                      "skipped_groups": skipped, "run_id": run.info.run_id, "split_fingerprint": split_fp,
                      "optuna_study": optuna_study, "budget": self.budget(), "importances": imps,
                      "timing_s": {**timing, "total": time.perf_counter() - t_start},
                      "aggregation": "pooled over all held-out rows (n = rows scored); median/worst over groups "
                                     f"of >= {c['split']['min_group_rows']} rows"}
            if serve:
                t0 = time.perf_counter()
                result["selection_cv_mape"] = self.selection_cv(folds[0], labels, fold_params[folds[0].name])
                result["timing_s"]["selection_cv"] = time.perf_counter() - t0
                mlflow.log_metric("selection_cv_mape", result["selection_cv_mape"])
                info = log_served_model(model, c, self.df, folds[0].test, self.name, train_rows=folds[0].train)
                mlflow.set_tag("model_uri", info.model_uri)
                result.update({"model_uri": info.model_uri, "best_params": fold_params[folds[0].name],
                               "train_rows": int(len(folds[0].train))})
            return result

    def importances(self, perm_list: list, native_list: list, art: Path, protocol: str) -> dict:
        perm = pd.DataFrame(perm_list).mean().to_dict()
        imps = {"permutation_mape_pp": perm}
        mlflow.log_metrics({f"perm_importance/{slug(k)}": v for k, v in perm.items()})
        plots.importances(perm, "permutation importance: MAPE increase (pp), mean over folds",
                          f"{self.name} {protocol}: permutation", art / "importance_perm.png")
        if native_list:
            kind = native_list[0][0]
            vals = pd.DataFrame([v for _, v in native_list]).mean().to_dict()
            imps[kind] = vals
            mlflow.log_metrics({f"{kind}_importance/{slug(k)}": v for k, v in vals.items()})
            plots.importances(vals, f"{kind} importance (mean over folds)", f"{self.name} {protocol}: {kind}",
                              art / f"importance_{kind}.png")
        return imps

    # -- fold workers ------------------------------------------------------------------------------------
    def fold_backend(self) -> str:
        """How outer folds run side by side (`sweep.fold_backend`): `process` (conf/sweep) or `thread` (unset)."""
        backend = str(self.c["sweep"].get("fold_backend", "thread"))
        if backend not in ("thread", "process"):
            raise ValueError(f"sweep.fold_backend: {backend!r} is neither 'thread' nor 'process'")
        return backend

    def process_pool(self, jobs: int) -> Executor:
        """`jobs` worker processes, each with its own Trainer of this config, kept for every protocol of this run
        (protocols running at once share it: `concurrent`; made under a lock, so two threads never make two).

        Why processes: the Pipeline's feature work (pricing, encoding, permutation importance) holds the GIL, so
        two fold threads of lr or knn ran at 1.07x one (reports/bench/train_time_bench.json). Spawned, not forked:
        the parent holds SQLite connections and threads. A fold's numbers depend only on its data and the seed."""
        with self._pool_lock:
            pool = getattr(self, "_pool", None)
            if pool is None or self._pool_jobs != jobs:
                self.close_pool()
                project_code_first()
                pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_start_worker, initargs=(self.c,))
                self._pool, self._pool_jobs = pool, jobs
            return pool

    def close_pool(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown()
            self._pool = None

    # -- entry -------------------------------------------------------------------------------------------
    def concurrent(self, protocols: list[str]) -> list[str]:
        """The protocols that run at the same time, one thread each: with worker processes (`sweep.fold_backend:
        process`, `sweep.fold_jobs` >= 2) every protocol, the grouped ones queueing their folds on the one pool of
        `fold_jobs` workers (so no core idles while a protocol waits for its last fold) and the single-fold ones
        fitting in their threads; otherwise the single-fold pair (`side_by_side`). A protocol's numbers never
        depend on this: a fold's study, fit and importances depend only on its data and the seed."""
        if (len(protocols) > 1 and int(self.c["sweep"].get("fold_jobs", 1)) >= 2 and not outer_run_active()
                and self.fold_backend() == "process"):
            return list(protocols)
        return self.side_by_side(protocols)

    def side_by_side(self, protocols: list[str]) -> list[str]:
        """The single-fold protocols (random, random_rows) run at the same time, one thread each, when the sweep
        may use two cores (`sweep.fold_jobs` >= 2): each runs on one core (estimators keep `n_jobs`), and a
        grouped protocol already fills both with its folds. Not under `mlflow run` (MLFLOW_RUN_ID): a worker
        thread has no active parent run to nest under. A protocol's numbers never depend on this."""
        singles = [p for p in protocols if p in SINGLE_FOLD]
        if len(singles) < 2 or int(self.c["sweep"].get("fold_jobs", 1)) < 2 or outer_run_active():
            return []
        return singles

    def run(self) -> dict:
        t0 = time.perf_counter()
        # Every study starts from the model's hand-set warm_start (inside the space; no data seen).
        warm = dict(self.c["model"].get("warm_start") or {}) or None
        protocols = list(iter_protocols(list(self.c["split"]["protocols"])))
        at_once = self.concurrent(protocols)
        done = {}
        try:
            if at_once:
                optuna.storages.get_storage(self.c["sweep"]["storage"])  # schema first (see run_protocol)
                with ThreadPoolExecutor(max_workers=len(at_once)) as pool:
                    futures = {p: pool.submit(self.run_protocol, p, warm) for p in at_once}
                    done = {p: f.result() for p, f in futures.items()}
            results = {p: done[p] if p in done else self.run_protocol(p, warm) for p in protocols}
        finally:
            self.close_pool()
        summary = {
            "model": self.name, "estimator": self.c["model"]["estimator"], "tags": self.tags,
            "dataset": {"path": self.c["data"]["dataset"], "rows": int(len(self.df)),
                        "md5": self.tags["dataset_version"]},
            "budget": self.budget(), "validation_cv_mape": results.get("random", {}).get("cv_mape"),
            "selection_cv_mape": results.get("random", {}).get("selection_cv_mape"),
            "protocols": results, "wall_seconds": time.perf_counter() - t0,
        }
        stable, run_log = split_run_log(summary)
        (self.out_dir / "metrics.json").write_text(json.dumps(stable, indent=2, default=float) + "\n")
        write_run_log(self.out_dir.parent, self.name, run_log)
        return summary


_WORKER: Trainer | None = None
# The folder this process imported the project's code from (the parent of `src`).
PROJECT_CODE = str(Path(__file__).resolve().parents[2])


def project_code_first() -> None:
    """Put the project's code folder first on sys.path, which spawned fold workers import `src` by.

    Why: loading a served model (MLflow pyfunc) puts the model's copy of `src` (its `code/` artifact) first on
    sys.path; a worker spawned after that imported that copy, whose repo root has no `conf/`, and a distilled
    tree's teacher config failed to compose there (tests/train/test_fold_jobs.py after a serving test on the
    same pytest worker). This process already runs the project's own code; its workers must too."""
    if sys.path[:1] != [PROJECT_CODE]:
        sys.path[:] = [PROJECT_CODE] + [p for p in sys.path if p != PROJECT_CODE]


def _start_worker(c: dict) -> None:
    """Initializer of a fold worker process: its MLflow store and its own Trainer (the dataset read again from the
    same file; BLAS threads pinned as in the parent)."""
    global _WORKER
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    _WORKER = Trainer(c)


def row_shift(model) -> float:
    """The fold model's point shift (0 for a model without one: target=latency, lr's plain Pipeline)."""
    return float(getattr(model, "point_shift", 0.0) or 0.0)


def _fold_in_worker(fold, args: tuple) -> dict:
    """One outer fold in a worker process; the fitted model stays there (the parent needs only its feature count:
    a served model is always fitted in the parent, by a single-fold protocol)."""
    out = _WORKER.fold_job(fold, *args)
    out["model"] = None
    return out


def split_run_log(summary: dict) -> tuple[dict, dict]:
    """(what the data and code determine, what only this run has: MLflow ids, commit, timings).

    The first is the committed reports/train/<model>/metrics.json; the second the git-ignored run log.
    """
    stable = {k: v for k, v in summary.items() if k != "wall_seconds"}
    stable["tags"] = {k: v for k, v in summary["tags"].items() if k not in RUN_TAGS}
    stable["protocols"] = {p: {k: v for k, v in r.items() if k not in RUN_KEYS}
                           for p, r in summary["protocols"].items()}
    run_log = {"model": summary["model"], "wall_seconds": summary["wall_seconds"],
               **{k: summary["tags"][k] for k in RUN_TAGS},
               "protocols": {p: {k: r[k] for k in RUN_KEYS if k in r} for p, r in summary["protocols"].items()}}
    return stable, run_log


def train(c: dict) -> dict:
    """Entry used by the Hydra app, the sweep and tests: resolved config dict -> summary dict."""
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    ctx = mlflow.start_run() if outer_run_active() else contextlib.nullcontext()
    with ctx:
        return Trainer(c).run()
