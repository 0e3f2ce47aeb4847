"""How well cnnperf predicts our own measurements (`source = own`, e.g. the H200 rows of data/own/).

Two views on the same rows of data/processed/dataset.parquet:
- `--registered`: the models registered in the MLflow store (default `cnnperf-best@champion` and
  `cnnperf-dt@champion`) predict every own row through the served pyfunc, with the request fields a user sends.
  Run this before the pipeline retrains on the new rows: it is the honest unseen-data test (the registered
  models never saw them).
- `--pipeline`: the train stage's held-out predictions (reports/train/<model>/<protocol>/predictions.csv)
  restricted to own rows: after a pipeline run that includes them, what each grouped protocol gives on them.

MAPE % is reported overall and by (mode, precision, batch) and family; per-row errors go to a CSV.
Writes reports/bench/own_rows_<tag>.json (+ .csv) and logs an MLflow run `benchmark/own_rows`.

Usage:
  python benchmarks/own_rows_check.py --registered --tag before
  python benchmarks/own_rows_check.py --pipeline --tag after
  python benchmarks/own_rows_check.py --registered --gpus "H100 SXM5 80 GB" --tag h100_before
  python benchmarks/own_rows_check.py --registered --ids sweep_infer_bs2_128,train_fp32_amp_bs64 --tag sweep_before
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from pipeline_predictions import held_out_predictions

ROOT = Path(__file__).resolve().parents[1]
REQUEST_FIELDS = ["gpu", "model_key", "param_count_m", "gmacs", "activations_m", "batch_size", "img_size",
                  "precision", "mode", "memory_layout", "compile_mode", "framework", "framework_version", "family"]
MODELS = ("lr", "knn", "rf", "dt", "xgb")
PROTOCOLS = ("random", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out")


def ape(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    return np.abs(predicted - measured) / measured * 100.0


def breakdown(frame: pd.DataFrame, column: str) -> dict:
    """MAPE % overall and per configuration group / family of the per-row errors in `column`."""
    setting = frame["mode"] + " " + frame["precision"] + " bs" + frame["batch_size"].astype(str)
    return {
        "rows": int(len(frame)),
        "mape": float(frame[column].mean()),
        "median_ape": float(frame[column].median()),
        "within_20pct": float((frame[column] <= 20).mean()),
        "by_setting": {k: round(float(v), 2) for k, v in frame.groupby(setting)[column].mean().items()},
        "by_family_worst10": {k: round(float(v), 2) for k, v in
                              frame.groupby("family")[column].mean().sort_values().tail(10).items()},
        "median_ratio_pred_over_measured": {
            k: round(float(v), 3) for k, v in frame.assign(setting=setting).groupby("setting")[
                column.replace("ape_", "ratio_")].median().items()},
    }


def own_rows(source: str, gpus: list[str] | None = None, ids: list[str] | None = None) -> pd.DataFrame:
    data = pd.read_parquet(ROOT / "data" / "processed" / "dataset.parquet")
    keep = data["source"] == source
    if ids:
        keep &= data["measurement_id"].str.contains("|".join(map(re.escape, ids)))
    if gpus:
        unknown = sorted(set(gpus) - set(data.loc[keep, "gpu"]))
        if unknown:
            raise SystemExit(f"--gpus {unknown} have no rows of source {source!r}; "
                             f"it has: {sorted(data.loc[keep, 'gpu'].unique())}")
        keep &= data["gpu"].isin(gpus)
    rows = data[keep].reset_index(drop=True).rename(columns={"target": "latency_ms"})
    if rows.empty:
        raise SystemExit(f"no rows of source {source!r} (measurement ids containing {ids or 'anything'}) in "
                         "data/processed/dataset.parquet: run `dvc repro features`")
    return rows


def registered(rows: pd.DataFrame, uris: list[str], tracking_uri: str) -> tuple[dict, pd.DataFrame]:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient()
    out: dict = {}
    table = rows[["measurement_id", "gpu", "model_key", "family", "mode", "precision", "batch_size",
                  "latency_ms"]].copy()
    for uri in uris:
        name, alias = uri.removeprefix("models:/").split("@")
        version = client.get_model_version_by_alias(name, alias)
        model = mlflow.pyfunc.load_model(uri)
        pred = model.predict(rows[REQUEST_FIELDS].copy())
        short = name.removeprefix("cnnperf-")
        table[f"pred_{short}"] = pred["latency_ms"].to_numpy()
        table[f"ratio_{short}"] = table[f"pred_{short}"] / table["latency_ms"]
        table[f"ape_{short}"] = ape(table["latency_ms"].to_numpy(), table[f"pred_{short}"].to_numpy())
        out[uri] = {"version": version.version, "run_id": version.run_id,
                    "git_commit": (version.tags or {}).get("git_commit", ""),
                    "in_training_range_share": float(pred["in_training_range"].mean()),
                    **breakdown(table, f"ape_{short}")}
    return out, table


def pipeline(rows: pd.DataFrame, source: str) -> tuple[dict, pd.DataFrame]:
    out: dict = {}
    meta = rows.set_index("measurement_id")[["mode", "precision", "batch_size", "latency_ms"]]
    frames = []
    for protocol, model, pred in held_out_predictions(PROTOCOLS, MODELS):
        pred = pred[pred["measurement_id"].isin(meta.index)].join(meta, on="measurement_id")
        if pred.empty:
            continue
        pred["ape_x"] = ape(pred["measured"].to_numpy(), pred["predicted"].to_numpy())
        pred["ratio_x"] = pred["predicted"] / pred["measured"]
        out.setdefault(protocol, {})[model] = breakdown(pred, "ape_x")
        frames.append(pred.assign(model=model, protocol=protocol))
    return out, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def log_mlflow(result: dict, tag: str, tracking_uri: str) -> None:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment("benchmarks")
    with mlflow.start_run(run_name=f"benchmark/own_rows/{tag}"):
        mlflow.log_param("mode", result["mode"])
        for key, block in result["results"].items():
            if "mape" in block:
                mlflow.log_metric(f"{key.replace('models:/', '').replace('@', '_')}_mape", block["mape"])
            else:
                for model, sub in block.items():
                    mlflow.log_metric(f"{key}_{model}_mape", sub["mape"])
        mlflow.log_dict(result, f"own_rows_{tag}.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--registered", action="store_true", help="predict with the registered models")
    mode.add_argument("--pipeline", action="store_true", help="read the train stage's held-out predictions")
    parser.add_argument("--models", default="models:/cnnperf-best@champion,models:/cnnperf-dt@champion")
    parser.add_argument("--source", default="own")
    parser.add_argument("--gpus", default="", help="only these GPUs' rows (comma-separated canonical names)")
    parser.add_argument("--ids", default="", help="only rows whose measurement_id contains one of these "
                        "(comma-separated), e.g. a campaign's file stem")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--tracking-uri", default=f"sqlite:///{ROOT / 'mlflow.db'}")
    args = parser.parse_args()
    rows = own_rows(args.source, [g for g in args.gpus.split(",") if g], [i for i in args.ids.split(",") if i])
    if args.registered:
        results, table = registered(rows, args.models.split(","), args.tracking_uri)
    else:
        results, table = pipeline(rows, args.source)
    result = {"mode": "registered" if args.registered else "pipeline", "source": args.source,
              "rows": int(len(rows)), "gpus": sorted(rows["gpu"].unique()), "results": results}
    target = ROOT / "reports" / "bench" / f"own_rows_{args.tag}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table.to_csv(target.with_suffix(".csv"), index=False)
    for key, block in results.items():
        blocks = {"": block} if "mape" in block else block
        for model, sub in blocks.items():
            print(f"{key:40s} {model:4s} rows {sub['rows']:4d}  MAPE {sub['mape']:7.2f} %  median APE "
                  f"{sub['median_ape']:6.2f} %  " + "  ".join(f"{k}: {v}" for k, v in sub["by_setting"].items()))
    log_mlflow(result, args.tag, args.tracking_uri)
    print(f"-> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
