"""How much each protocol asks of a predictor, on the same rows with the same model: twins, grouping, versions.

Same XGBoost (its hand-set `warm_start` parameters, no tuning, so nothing but the split changes), same seed,
same dataset (data/processed/dataset.parquet), every protocol of src/train/protocols.py, and three encodings of
the framework version:
- `onehot`: the raw version strings one-hot encoded (the landed pipeline's feature; git hashes included);
- `release`: what a user can give: major.minor release and whether fp32 convolutions default to TF32 (default);
- `none`: no version information at all.
Prints pooled held-out MAPE / R² / adjusted R² with the median and worst group, the number of configurations
split across train and test, and the twin statistics of the table; writes reports/bench/protocol_bench.json and
logs an MLflow run (experiment cnnperf-bench).

    python benchmarks/protocol_bench.py [--protocols random_rows,random] [--encodings release] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT, compose  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train import PROTOCOLS, config_ids, fit_model, outer_folds  # noqa: E402
from src.train.metrics import all_metrics  # noqa: E402

ENCODINGS = ("onehot", "release", "none")


def features_for(c: dict, encoding: str) -> dict:
    """The config with the framework version encoded one way."""
    c = copy.deepcopy(c)
    f = c["features"]
    if encoding == "onehot":
        f["release_column"] = None
    elif encoding == "none":
        f["release_column"] = None
        f["categorical_inputs"] = [x for x in f["categorical_inputs"] if x != "framework_version"]
    return c


def twin_stats(df: pd.DataFrame) -> dict:
    """Rows whose configuration holds another row (by framework release or repeated run), and their spread."""
    ids = config_ids(df)
    size = pd.Series(ids).map(pd.Series(ids).value_counts()).to_numpy()
    twin = size > 1
    t = df.loc[twin].assign(cid=ids[twin])
    versions = t.groupby("cid")["framework_version"].nunique()
    by_version = int(t["cid"].isin(versions[versions > 1].index).sum())
    spread = t.groupby("cid")["target"].agg(lambda s: (s.max() - s.min()) / s.median() * 100)
    return {"rows": int(len(df)), "configurations": int(len(set(ids))), "rows_with_twin": int(twin.sum()),
            "rows_with_twin_by_version": by_version, "twin_spread_median_pct": float(spread.median())}


def score(c: dict, df: pd.DataFrame, protocol: str, seed: int) -> dict:
    folds, _ = outer_folds(df, protocol, c["split"], seed)
    y = df["target"].to_numpy(dtype=float)
    ids = config_ids(df)
    preds, split_cfgs, n_feat = [], 0, 0
    for fold in folds:
        model = fit_model(c, df, fold.train)
        n_feat = len(model.regressor_.named_steps["features"].get_feature_names_out())
        cols = input_columns(c["features"], [])
        preds.append(pd.DataFrame({"row": fold.test, "predicted": model.predict(df.iloc[fold.test][cols])}))
        split_cfgs += len(set(ids[fold.train]) & set(ids[fold.test]))
    p = pd.concat(preds).sort_values("row")
    p["measured"], p["gpu"], p["family"] = y[p["row"]], df["gpu"].to_numpy()[p["row"]], df["family"].to_numpy()[
        p["row"]]
    by = "family" if protocol in ("leave_family_out", "leave_model_out") else "gpu"
    groups = p.groupby(by).apply(lambda g: pd.Series({"rows": len(g), "mape": float(
        np.mean(np.abs(g["predicted"] - g["measured"]) / g["measured"]) * 100)}), include_groups=False)
    groups = groups[groups["rows"] >= int(c["split"]["min_group_rows"])]
    m = all_metrics(p["measured"], p["predicted"], n_feat)
    return {"mape": m["mape"], "r2": m["r2"], "adj_r2": m["adj_r2"], "rows": int(len(p)), "folds": len(folds),
            "group_median_mape": float(groups["mape"].median()), "group_worst_mape": float(groups["mape"].max()),
            "worst_group": str(groups["mape"].idxmax()), "configurations_split": int(split_cfgs)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--encodings", default=",".join(ENCODINGS))
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "protocol_bench.json"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.dataset=/tmp/dataset.parquet")
    args = ap.parse_args(argv)
    c = OmegaConf.to_container(compose([f"model={args.model}", *args.overrides]), resolve=True)
    df = pd.read_parquet(REPO_ROOT / c["data"]["dataset"])
    seed = int(c["seed"])
    protocols = [p for p in args.protocols.split(",") if p]
    encodings = [e for e in args.encodings.split(",") if e]
    t0 = time.perf_counter()
    results: dict = {}
    jobs = [(e, p) for e in encodings for p in protocols]
    for enc, protocol in tqdm(jobs, desc="protocol x encoding"):
        results.setdefault(enc, {})[protocol] = score(features_for(c, enc), df, protocol, seed)
    out = {"model": args.model, "params": c["model"]["warm_start"], "seed": seed, "dataset": c["data"]["dataset"],
           "twins": twin_stats(df), "results": results, "wall_seconds": time.perf_counter() - t0}
    print(json.dumps(out["twins"]))
    print(f"{'encoding':9s} {'protocol':17s} {'MAPE %':>7s} {'R2':>7s} {'adjR2':>7s} {'median grp':>10s} "
          f"{'worst grp':>9s}  cfgs split")
    for enc, by_p in results.items():
        for p, r in by_p.items():
            print(f"{enc:9s} {p:17s} {r['mape']:7.2f} {r['r2']:7.4f} {r['adj_r2']:7.4f} {r['group_median_mape']:10.2f} "
                  f"{r['group_worst_mape']:9.2f}  {r['configurations_split']}")
    metrics = {f"{e}/{p}/{k}": v for e, by_p in results.items() for p, r in by_p.items()
               for k, v in r.items() if isinstance(v, float)}
    record_benchmark(out, Path(args.out), None if args.no_mlflow else c["mlflow"], "benchmark/protocols",
                     {"model": args.model}, {**metrics, **{f"twins/{k}": v for k, v in out["twins"].items()}})
    return out


if __name__ == "__main__":
    main()
