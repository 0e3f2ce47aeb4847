"""Evaluate the per-deployment end-to-end model on held-out batch sizes and compare with the global model.

Protocol (docs/predict.md): deployments (CNN, GPU, mode, software context) with >= e2e.min_batches distinct batch
sizes; per protocol (largest batch / one random batch / leave-one-batch-out) the e2e model is fitted on the
deployment's other batch sizes and scored on the held-out ones (MAPE). For `compare_protocols`, the global model
(fitted through the training package's public entry, src.train.fit_model) is trained on the whole feature dataset
MINUS the same held-out rows and scored on the held-out rows it can represent (rows in the dataset: static CNN
features known, CNN rows only); both models' MAPE are reported on exactly those rows.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from src.config import REPO_ROOT  # noqa: E402
from src.e2e import iterations  # noqa: E402
from src.e2e.model import (  # noqa: E402
    coefficients,
    eligible_rows,
    evaluate,
    group_keys,
    holdout_mask,
    label_groups,
)
from src.features.dataset import build_dataset  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import file_md5, git_commit, setup, write_run_log  # noqa: E402
from src.train import fit_model  # noqa: E402

log = logging.getLogger("cnnperf.e2e")

DEFAULTS = {
    "contexts": ["strict", "relaxed"],
    "protocols": ["largest", "one_random", "lobo"],
    "compare_protocols": ["largest", "one_random"],
    "min_batches": 2,
    "data_modes": ["synthetic"],
    "global_estimator": "xgb",
    "global_params": {"n_estimators": 300, "learning_rate": 0.08, "max_depth": 8, "subsample": 0.8,
                      "colsample_bytree": 0.8, "min_child_weight": 1.0},
    "experiment": "cnnperf-e2e",
    "reports_dir": "reports/e2e",
    "max_groups": None,
    # ryujaehun's per-iteration files (the iteration axis); relative paths are relative to the repo root.
    "iterations_mirror": "../shared/data/raw",
    "iterations_fit": 10,
}


CONTEXTS = ("strict", "relaxed")
PROTOCOLS = ("largest", "one_random", "lobo")


def _names(s: dict, key: str, allowed: tuple[str, ...]) -> None:
    value = s[key]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"e2e.{key}: a non-empty list of names from {list(allowed)}, got {value!r}")
    bad = sorted(set(value) - set(allowed))
    if bad:
        raise ValueError(f"e2e.{key}: unknown {bad}; known: {list(allowed)}")


def _whole(s: dict, key: str, low: int, optional: bool = False) -> None:
    value = s[key]
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        none = " or null (no limit)" if optional else ""
        raise ValueError(f"e2e.{key}: an integer >= {low}{none}, got {value!r}")


def settings(cfg: dict) -> dict:
    """The `e2e` section of the config over DEFAULTS, checked: an unknown key or a value out of its range is an
    error naming `e2e.<key>`."""
    given = dict(cfg.get("e2e") or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"e2e config: unknown key(s) {unknown}; known: {sorted(DEFAULTS)}")
    s = {**DEFAULTS, **given}
    _names(s, "contexts", CONTEXTS)
    _names(s, "protocols", PROTOCOLS)
    if s["compare_protocols"]:
        _names(s, "compare_protocols", tuple(s["protocols"]))
    _whole(s, "min_batches", 2)  # one batch size is no batch axis: nothing to hold out and fit on
    _whole(s, "max_groups", 1, optional=True)
    _whole(s, "iterations_fit", 2)  # the step is the median of iterations 2..k
    modes = s["data_modes"]
    if modes is not None and (not isinstance(modes, list | tuple) or not all(isinstance(m, str) for m in modes)):
        raise ValueError(f"e2e.data_modes: a list of data modes (e.g. [synthetic]) or null (all), got {modes!r}")
    return s


def physics_estimates(cfg: dict, dataset: pd.DataFrame) -> pd.Series:
    """The per-kernel physics estimate of one step (ms), by measurement id, for every dataset row whose CNN has a
    kernel profile: what a deployment measured at one batch size is scaled by (src.e2e.model.evaluate)."""
    from src.features.engineer import parse_releases, release_features
    from src.features.layer_physics import (
        GPU_COLUMNS,
        ROW_COLUMNS,
        PhysicsConstants,
        load_profile_index,
        price_rows,
    )

    index = load_profile_index(str(REPO_ROOT / cfg["data"]["kernel_profiles"]), str(REPO_ROOT / cfg["data"]["layers"]))
    tf32 = release_features(dataset["framework"].to_numpy(dtype=object),
                            parse_releases(dataset["framework_version"].to_numpy(dtype=object)))["tf32_conv_default"]
    priced = price_rows(dataset[ROW_COLUMNS + GPU_COLUMNS], index, PhysicsConstants.from_config(cfg.get("physics")),
                        tf32 > 0)
    has = priced["has_layer_profile"].to_numpy() > 0
    return pd.Series(priced["t_physics_ms"].to_numpy()[has], index=dataset["measurement_id"].to_numpy()[has])


def mape(measured, predicted) -> float:
    m = np.asarray(measured, dtype=float)
    return float(np.mean(np.abs(np.asarray(predicted, dtype=float) - m) / m) * 100) if len(m) else float("nan")


def global_predictions(cfg: dict, s: dict, dataset: pd.DataFrame, cols: list[str], held_ids: set[str]) -> pd.DataFrame:
    """Fit the global model on the dataset minus held-out ids; predict the held-out ids it contains."""
    is_held = dataset["measurement_id"].isin(held_ids).to_numpy()
    model = fit_model(cfg, dataset, np.flatnonzero(~is_held), dict(s["global_params"] or {}),
                      model=s["global_estimator"])
    pred = model.predict(dataset.loc[is_held, cols]) if is_held.any() else np.array([])
    return pd.DataFrame({"measurement_id": dataset.loc[is_held, "measurement_id"].to_numpy(),
                         "global_ms": np.asarray(pred, dtype=float)})


def summarise(pred: pd.DataFrame, d: pd.DataFrame) -> dict:
    meta = d[["measurement_id", "source", "mode"]].drop_duplicates("measurement_id")
    p = pred.merge(meta, on="measurement_id", how="left")
    out = {"rows": int(len(p)), "groups": int(p["group"].nunique()),
           "e2e_mape": mape(p["measured_ms"], p["e2e_ms"]),
           "e2e_median_ape": float(np.median(np.abs(p["e2e_ms"] - p["measured_ms"]) / p["measured_ms"] * 100)),
           "proportional_mape": mape(p["measured_ms"], p["proportional_ms"]),
           "by_source": {str(k): {"rows": int(len(g)), "e2e_mape": mape(g["measured_ms"], g["e2e_ms"])}
                         for k, g in p.groupby("source")},
           "by_mode": {str(k): {"rows": int(len(g)), "groups": int(g["group"].nunique()),
                                "e2e_mape": mape(g["measured_ms"], g["e2e_ms"])}
                       for k, g in p.groupby("mode")},
           "by_fit_kind": {str(k): {"rows": int(len(g)), "e2e_mape": mape(g["measured_ms"], g["e2e_ms"])}
                           for k, g in p.groupby("fit_kind")},
           "by_mode_fit_kind": {f"{m}/{k}": {"rows": int(len(g)), "e2e_mape": mape(g["measured_ms"], g["e2e_ms"]),
                                             "proportional_mape": mape(g["measured_ms"], g["proportional_ms"])}
                                for (m, k), g in p.groupby(["mode", "fit_kind"])}}
    return out


def plot_comparison(results: dict, path: Path) -> None:
    labels, e2e, glob, prop = [], [], [], []
    for ctx, protos in results.items():
        for proto, r in protos.items():
            cmp_ = r.get("global_comparison")
            if not cmp_ or not cmp_["rows"]:
                continue
            labels.append(f"{ctx}\n{proto}\n(n={cmp_['rows']})")
            e2e.append(cmp_["e2e_mape"])
            glob.append(cmp_["global_mape"])
            prop.append(cmp_["proportional_mape"])
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(labels) + 2), 4))
    x = np.arange(len(labels))
    ax.bar(x - 0.27, e2e, 0.27, label="e2e: iters*(a+b*batch) per deployment")
    ax.bar(x, prop, 0.27, label="proportional: b*batch per deployment")
    ax.bar(x + 0.27, glob, 0.27, label="global model (same held-out rows)")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("MAPE on held-out batch sizes (%)")
    ax.legend(fontsize=8)
    ax.set_title("End-to-end model vs global model on the same held-out rows", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(cfg: dict) -> dict:
    """Entry point (from `python -m src.e2e`): resolved config -> summary."""
    t0 = time.perf_counter()
    s = settings(cfg)
    seed = int(cfg.get("seed", 42))
    out_dir = REPO_ROOT / s["reports_dir"]
    out_dir.mkdir(parents=True, exist_ok=True)
    meas = pd.read_parquet(REPO_ROOT / cfg["data"]["measurements"])
    rows = eligible_rows(meas, s["data_modes"])
    if rows.empty:
        raise ValueError(f"e2e.data_modes={s['data_modes']}: no single-GPU row has these data modes; the table has "
                         f"{sorted(meas['data_mode'].dropna().astype(str).unique())} (null: every mode)")
    dataset, _, ptx = build_dataset(REPO_ROOT, cfg["data"], cfg["features"], cfg["target"], seed=seed)
    cols = input_columns(cfg["features"], ptx)
    rows["physics_ms"] = rows["measurement_id"].map(physics_estimates(cfg, dataset)).astype(float)

    results: dict = {}
    preds_all = []
    for ctx in s["contexts"]:
        d = label_groups(rows, ctx, int(s["min_batches"]))
        if d.empty:
            most = int(rows.groupby(group_keys(rows, ctx), dropna=False)["batch_size"].nunique().max())
            raise ValueError(f"e2e.min_batches={s['min_batches']}: no deployment ({ctx} context) has that many "
                             f"distinct batch sizes; the most any has is {most}")
        if s["max_groups"]:
            d = d[d["group"] < int(s["max_groups"])].reset_index(drop=True)
        results[ctx] = {}
        coefficients(d).to_csv(out_dir / f"coefficients_{ctx}.csv", index=False)
        for proto in s["protocols"]:
            pred = pd.concat([evaluate(d, m) for m in holdout_mask(d, proto, seed)], ignore_index=True)
            if pred.empty:
                results[ctx][proto] = {"rows": 0}
                continue
            r = summarise(pred, d)
            if proto in s["compare_protocols"]:
                g = global_predictions(cfg, s, dataset, cols, set(pred["measurement_id"]))
                both = pred.merge(g, on="measurement_id", how="inner")
                pred = pred.merge(g, on="measurement_id", how="left")
                r["global_comparison"] = {
                    "rows": int(len(both)), "groups": int(both["group"].nunique()),
                    "e2e_mape": mape(both["measured_ms"], both["e2e_ms"]),
                    "proportional_mape": mape(both["measured_ms"], both["proportional_ms"]),
                    "global_mape": mape(both["measured_ms"], both["global_ms"]),
                    "rows_not_in_global_dataset": int(len(pred) - len(both)),
                }
                src = both.merge(d[["measurement_id", "source", "mode"]].drop_duplicates("measurement_id"),
                                 on="measurement_id", how="left")
                r["global_comparison"]["by_source_mode_fit_kind"] = {
                    f"{a}/{b}/{k}": {"rows": int(len(g)), "e2e_mape": mape(g["measured_ms"], g["e2e_ms"]),
                                     "global_mape": mape(g["measured_ms"], g["global_ms"])}
                    for (a, b, k), g in src.groupby(["source", "mode", "fit_kind"])}
            results[ctx][proto] = r
            pred["context"], pred["protocol"] = ctx, proto
            preds_all.append(pred)
            log.info("e2e %s/%s: %d rows, e2e MAPE %.2f %%%s", ctx, proto, r["rows"], r["e2e_mape"],
                     f", global {r['global_comparison']['global_mape']:.2f} % vs e2e "
                     f"{r['global_comparison']['e2e_mape']:.2f} % on {r['global_comparison']['rows']} rows"
                     if "global_comparison" in r else "")
    mirror = Path(s["iterations_mirror"])
    mirror = mirror if mirror.is_absolute() else (REPO_ROOT / mirror).resolve()
    try:
        samples = iterations.read_samples(mirror)
        ev = iterations.evaluate(samples, int(s["iterations_fit"]))
        left_out = iterations.skipped(samples, int(s["iterations_fit"]))
        if ev.empty:
            longest = int(samples.groupby(["file", "model"]).size().max())
            raise ValueError(f"e2e.iterations_fit={s['iterations_fit']}: no per-iteration series can be scored "
                             f"(the longest has {longest} iterations; a profile needs at most half of them)")
        ev.to_csv(out_dir / "iterations.csv", index=False)
        iter_summary = iterations.summary(ev)
        iter_summary["skipped_series"] = {str(k): int(v) for k, v in left_out["reason"].value_counts().items()}
        for reason, group in left_out.groupby("reason"):
            log.warning("iterations: %d series left out (%s), e.g. %s", len(group), reason,
                        ", ".join(f"{f} [{m}]" for f, m in group[["file", "model"]].head(3).to_numpy()))
        log.info("iterations: %d series, total time from a %d-iteration profile: MAPE %.2f %% (iters * step)",
                 iter_summary["all"]["series"], s["iterations_fit"], iter_summary["all"]["product_short_mape"])
    except FileNotFoundError as exc:
        iter_summary = {"skipped": str(exc)}
        log.warning("iterations check skipped: %s", exc)
    preds = pd.concat(preds_all, ignore_index=True) if preds_all else pd.DataFrame()
    # ~6 MB uncompressed; gzip without a timestamp, so a rerun on the same data writes the same bytes
    preds.to_csv(out_dir / "heldout_predictions.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    plot_comparison(results, out_dir / "e2e_vs_global.png")
    commit, dirty = git_commit()
    summary = {"settings": s, "results": results, "iterations": iter_summary,
               "data_version": file_md5(REPO_ROOT / cfg["data"]["measurements"])}
    # metrics.json is committed: only what code and data determine; commit and timing go to the run log
    (out_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")

    setup(cfg["mlflow"]["tracking_uri"], s["experiment"], cfg["mlflow"]["artifact_root"])
    with mlflow.start_run(run_name="e2e"):
        mlflow.set_tags({"run_kind": "e2e", "data_version": summary["data_version"], "git_commit": commit})
        mlflow.log_params({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in s.items()})
        for ctx, protos in results.items():
            for proto, r in protos.items():
                for k in ("rows", "groups", "e2e_mape", "proportional_mape"):
                    if k in r:
                        mlflow.log_metric(f"{ctx}.{proto}.{k}", float(r[k]))
                for k, v in (r.get("global_comparison") or {}).items():
                    if not isinstance(v, dict):
                        mlflow.log_metric(f"{ctx}.{proto}.same_rows.{k}", float(v))
        for mode, v in iter_summary.items():
            if isinstance(v, dict):
                mlflow.log_metrics({f"iterations.{mode}.{k}": float(x) for k, x in v.items()})
        mlflow.log_artifacts(str(out_dir), artifact_path="e2e")
    summary.update({"wall_seconds": time.perf_counter() - t0, "git_commit": commit, "git_dirty": dirty})
    write_run_log(out_dir, "e2e", {k: summary[k] for k in ("wall_seconds", "git_commit", "git_dirty")})
    return summary
