"""Ablation of the physics predictor: feature sets x targets x models under every protocol, on the same rows.

Every variant is fitted with its model's hand-set `warm_start` parameters (no tuning: nothing but the features
and the target change), the same seed and the same dataset (data/processed/dataset.parquet, built with
features=physics, whose rows every other set shares: static, engineered and physics add columns, not filters).
The PTX variants need a table with the PTX columns: build it once with
`python -m src.features features=physics_ptx data.dataset=/tmp/abl/dataset_ptx.parquet ...` and pass
`data.dataset=/tmp/abl/dataset_ptx.parquet`; then every variant runs on its rows (those with PTX counts).
Variants (FEATURES/TARGET):
- `paper/latency`: the paper's inputs: static CNN features + executed PTX counts + GPU specs + run configuration;
- `static/latency`: static CNN features + GPU specs + run configuration, log latency;
- `engineered/latency`: + whole-network roofline features (the pipeline's default before the physics predictor);
- `physics/latency`: + the per-kernel physics estimate and its aggregates, log latency (monotone constraints
  for XGBoost);
- `physics/efficiency`: the same features, target log(measured / estimate);
- `physics_ptx/efficiency`, `physics_ptx/latency`: + the executed PTX counts of the CNN;
- `estimate_only`: no learner: the physics estimate times the median efficiency of the training rows.
The distilled Decision Tree is grown on the measurements under the latency variants (its teacher answers
efficiencies): `config`.
Prints pooled held-out MAPE (and median / worst group) per variant and protocol, writes
reports/bench/physics_bench.json and logs an MLflow run (experiment cnnperf-bench).

    python benchmarks/physics_bench.py [--models xgb,dt] [--protocols random,leave_gpu_out] [--variants ...]
        [--predictions DIR]
"""

from __future__ import annotations

import argparse
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
from src.train import PROTOCOLS, fit_model, outer_folds  # noqa: E402
from src.train.fit import make_model, ptx_columns  # noqa: E402
from src.train.metrics import all_metrics  # noqa: E402

VARIANTS = ("paper/latency", "static/latency", "engineered/latency", "physics/latency", "physics/efficiency",
            "physics_ptx/latency", "physics_ptx/efficiency", "estimate_only")
#: Variants run when --variants is not given (the PTX ones need a dataset with PTX columns, see above).
DEFAULT_VARIANTS = ("static/latency", "engineered/latency", "physics/latency", "physics/efficiency", "estimate_only")
MODELS = ("lr", "knn", "rf", "dt", "xgb")


def config(model: str, variant: str, overrides: list[str]) -> dict:
    """The model's config for a variant. A distilled model (conf/model/dt.yaml `distill`) learns its teacher's
    efficiency answers, so under the latency target it is grown on the measurements (`model.distill=null`)."""
    feats, target = ("physics", "efficiency") if variant == "estimate_only" else variant.split("/")
    c = OmegaConf.to_container(compose([f"model={model}", f"features={feats}", f"target={target}", *overrides]),
                               resolve=True)
    if c["model"].get("distill") and c["target"].get("baseline") != "physics":
        c = OmegaConf.to_container(compose([f"model={model}", f"features={feats}", f"target={target}",
                                            *overrides, "model.distill=null"]), resolve=True)
    return c


def predict_fold(c: dict, df: pd.DataFrame, train: np.ndarray, test: np.ndarray, variant: str) -> np.ndarray:
    cols = input_columns(c["features"], ptx_columns(c, df))
    if variant == "estimate_only":
        est = make_model(c)  # unfitted: only its PerfFeatures step prices rows
        perf = est.regressor.named_steps["features"].named_steps["perf"].fit(df.iloc[train][cols])
        base_train = perf.physics_frame(df.iloc[train][cols])["t_physics_ms"].to_numpy()
        eff = float(np.median(df["target"].to_numpy()[train] / base_train))
        return eff * perf.physics_frame(df.iloc[test][cols])["t_physics_ms"].to_numpy()
    return fit_model(c, df, train).predict(df.iloc[test][cols])


def score(c: dict, df: pd.DataFrame, protocol: str, variant: str, seed: int,
          predictions: Path | None = None) -> dict:
    folds, skipped = outer_folds(df, protocol, c["split"], seed)
    y = df["target"].to_numpy(dtype=float)
    parts = [pd.DataFrame({"row": f.test, "predicted": predict_fold(c, df, f.train, f.test, variant)}) for f in folds]
    p = pd.concat(parts).sort_values("row")
    p["measured"] = y[p["row"]]
    by = "family" if protocol in ("leave_family_out", "leave_model_out") else "gpu"
    p["group"] = df[by].to_numpy()[p["row"]]
    if predictions is not None:  # per-row held-out predictions, to compare two runs on the same rows
        predictions.parent.mkdir(parents=True, exist_ok=True)
        p.assign(measurement_id=df["measurement_id"].to_numpy()[p["row"]]).to_csv(predictions, index=False)
    ape = np.abs(p["predicted"] - p["measured"]) / p["measured"] * 100
    groups = ape.groupby(p["group"]).agg(["size", "mean"])
    groups = groups[groups["size"] >= int(c["split"]["min_group_rows"])]
    m = all_metrics(p["measured"], p["predicted"], 1)
    return {"mape": m["mape"], "median_ape": float(ape.median()), "r2_log": m["r2_log"], "rows": int(len(p)),
            "folds": len(folds), "skipped": skipped, "group_median_mape": float(groups["mean"].median()),
            "group_worst_mape": float(groups["mean"].max()), "worst_group": str(groups["mean"].idxmax())}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="xgb")
    ap.add_argument("--protocols", default=",".join(p for p in PROTOCOLS if p != "random_rows"))
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "physics_bench.json"))
    ap.add_argument("--predictions", default=None,
                    help="folder for per-row held-out predictions (<variant>__<protocol>.csv)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.dataset=/tmp/dataset.parquet")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    protocols = [p for p in args.protocols.split(",") if p]
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS)) + sorted(set(models) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown variant/model {unknown}; variants {VARIANTS}, models {MODELS}")
    base = config(models[0], "physics/efficiency", args.overrides)
    df = pd.read_parquet(REPO_ROOT / base["data"]["dataset"])
    no_ptx = [v for v in variants if v.startswith(("paper", "physics_ptx"))
              and not ptx_columns(config(models[0], v, args.overrides), df)]
    if no_ptx:
        raise SystemExit(f"variants {no_ptx} need PTX columns, but {base['data']['dataset']} has none: build it "
                         "with `python -m src.features features=physics_ptx data.dataset=...` (see the docstring)")
    seed = int(base["seed"])
    jobs = [(m, v, p) for m in models for v in variants for p in protocols
            if not (v == "estimate_only" and m != models[0])]
    t0 = time.perf_counter()
    results: dict = {}
    for model, variant, protocol in tqdm(jobs, desc="model x variant x protocol"):
        name = "estimate_only" if variant == "estimate_only" else f"{model}:{variant}"
        t = time.perf_counter()
        pred_csv = (Path(args.predictions) / f"{name.replace(':', '__').replace('/', '_')}__{protocol}.csv"
                    if args.predictions else None)
        r = score(config(model, variant, args.overrides), df, protocol, variant, seed, pred_csv)
        r["seconds"] = time.perf_counter() - t
        results.setdefault(name, {})[protocol] = r
    out = {"models": models, "variants": variants, "protocols": protocols, "seed": seed, "rows": int(len(df)),
           "dataset": base["data"]["dataset"], "params": "each model's warm_start (no tuning)", "results": results,
           "wall_seconds": time.perf_counter() - t0}
    print(f"rows: {len(df)}; pooled held-out MAPE % (median group / worst group)")
    print(f"{'variant':28s} " + " ".join(f"{p:>24s}" for p in protocols))
    for name, by_p in results.items():
        cells = [f"{by_p[p]['mape']:7.2f} ({by_p[p]['group_median_mape']:5.1f}/{by_p[p]['group_worst_mape']:6.1f})"
                 if p in by_p else " " * 24 for p in protocols]
        print(f"{name:28s} " + " ".join(f"{c:>24s}" for c in cells))
    record_benchmark(out, Path(args.out), None if args.no_mlflow else base["mlflow"], "benchmark/physics",
                     {"models": ",".join(models)},
                     {f"{n.replace(':', '__').replace('/', '_')}/{p}/{k}": v for n, by_p in results.items()
                      for p, r in by_p.items() for k, v in r.items() if isinstance(v, float)})
    return out


if __name__ == "__main__":
    main()
