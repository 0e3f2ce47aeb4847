"""What the learner is asked to fit: its loss, and how much each training row counts, under every protocol.

Two questions the error bounds leave open (docs/experiments.md "What limits the grouped protocols"):
- **Loss.** The target is log(measured / estimate) and the headline metric is MAPE, about |log error| for small
  errors; squared error fits the conditional mean of the log efficiency, absolute error its median and a
  pseudo-Huber loss something in between, less pulled by the rows that run 20-40x slower than their peers.
- **Row weights.** 22,035 of the 28,836 rows are timm's, 11,829 on one GPU (the RTX 3090): the learner's splits
  follow that harness. Weighting each training row by n_group^-alpha (group = the row's source, or its source and
  GPU; mean weight 1) makes every group count more evenly.

Every variant fits the model at its hand-set `warm_start` (no tuning), the same seed, rows and folds as
benchmarks/physics_bench.py; only the loss (`+model.fixed.objective=...`, XGBoost) or the sample weights change.
Variants:
- `squared`: the default (XGBoost's reg:squarederror);
- `absolute`: reg:absoluteerror; `absolute@N`: the same with N trees (the warm start has 400);
- `huber@S`: reg:pseudohubererror with huber_slope S (in log units);
- `weights@COLS@ALPHA`: squared error, rows weighted by the size of their group (COLS joined by `+`) ^ -ALPHA.
Prints pooled held-out MAPE per variant and protocol, writes reports/bench/loss_weight_bench.json and logs an
MLflow run (experiment cnnperf-bench).

    python benchmarks/loss_weight_bench.py [--variants squared,absolute@800,weights@source@0.5] [--protocols ...]
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grid_args import grid_parser, listed, protocols_and_overrides  # noqa: E402
from physics_bench import config  # noqa: E402

from src.config import REPO_ROOT  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train import outer_folds  # noqa: E402
from src.train.fit import make_model, ptx_columns  # noqa: E402

DEFAULT_VARIANTS = ("squared", "absolute", "absolute@800", "huber@0.1", "weights@source+gpu@0.5",
                    "weights@source@0.5")


def variant_overrides(variant: str) -> list[str]:
    """Hydra overrides of a loss variant (none for `squared` and the weight variants)."""
    kind, *args = variant.split("@")
    if kind in ("squared", "weights"):
        return []
    if kind == "absolute":
        return ["+model.fixed.objective=reg:absoluteerror"] + (
            [f"model.warm_start.n_estimators={int(args[0])}"] if args else [])
    if kind == "huber":
        return ["+model.fixed.objective=reg:pseudohubererror", f"+model.fixed.huber_slope={float(args[0])}"]
    raise ValueError(f"unknown variant {variant!r}: squared, absolute[@N], huber@S or weights@COLS@ALPHA")


def group_weights(groups: np.ndarray, alpha: float) -> np.ndarray:
    """n_group^-alpha per row, scaled to mean 1 (alpha 0: every row 1; alpha 1: every group the same total)."""
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    w = counts[inverse].astype(float) ** (-float(alpha))
    return w / w.mean()


def row_groups(df: pd.DataFrame, variant: str) -> tuple[np.ndarray, float] | None:
    """(group label per row, alpha) of a weight variant, else None."""
    kind, *args = variant.split("@")
    if kind != "weights":
        return None
    if len(args) != 2:
        raise ValueError(f"weight variant {variant!r}: weights@COLS@ALPHA, e.g. weights@source+gpu@0.5")
    cols = args[0].split("+")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"weight variant {variant!r}: no column(s) {missing} in the dataset")
    return df[cols].astype(str).agg("|".join, axis=1).to_numpy(), float(args[1])


def score(c: dict, df: pd.DataFrame, protocol: str, variant: str, seed: int) -> dict:
    """Pooled held-out MAPE % of one variant under one protocol (each fold fitted at the warm start)."""
    ptx = ptx_columns(c, df)
    X, y = df[input_columns(c["features"], ptx)], df["target"].to_numpy(dtype=float)
    weighting = row_groups(df, variant)
    folds, _ = outer_folds(df, protocol, c["split"], seed)
    rows, preds = [], []
    for f in folds:
        fit_params = {} if weighting is None else {
            "model__sample_weight": group_weights(weighting[0][f.train], weighting[1])}
        est = make_model(c, None, ptx)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X.iloc[f.train], y[f.train], **fit_params)
        rows.append(f.test)
        preds.append(est.predict(X.iloc[f.test]))
    row, pred = np.concatenate(rows), np.concatenate(preds)
    ape = np.abs(pred / y[row] - 1.0) * 100.0
    return {"mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "median_log_ratio": float(np.median(np.log(pred / y[row]))), "rows": int(len(row)), "folds": len(folds)}


def main(argv: list[str] | None = None) -> dict:
    ap = grid_parser(__doc__, "loss_weight_bench.json")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    args = ap.parse_args(argv)
    protocols, overrides = protocols_and_overrides(args)
    variants = listed(args.variants, None, "variant")
    configs = {v: config(args.model, "physics_ptx/efficiency", [*overrides, *variant_overrides(v)]) for v in variants}
    base = configs[variants[0]]
    df = pd.read_parquet(REPO_ROOT / base["data"]["dataset"])
    for v in variants:
        row_groups(df, v)  # a malformed weight variant fails before any fit
    seed = int(base["seed"])
    t0 = time.perf_counter()
    results: dict = {}
    for variant, protocol in tqdm([(v, p) for v in variants for p in protocols], desc="variant x protocol"):
        t = time.perf_counter()
        results.setdefault(variant, {})[protocol] = {**score(configs[variant], df, protocol, variant, seed),
                                                     "seconds": time.perf_counter() - t}
    out = {"model": args.model, "variants": variants, "protocols": protocols, "seed": seed, "rows": int(len(df)),
           "overrides": overrides, "params": "the model's warm_start (no tuning)", "results": results,
           "wall_seconds": time.perf_counter() - t0}
    print(f"{args.model}, rows: {len(df)}; pooled held-out MAPE %")
    print(f"{'variant':26s} " + " ".join(f"{p:>17s}" for p in protocols))
    for variant, by_p in results.items():
        print(f"{variant:26s} " + " ".join(f"{by_p[p]['mape']:17.2f}" for p in protocols))
    record_benchmark(out, Path(args.out), None if args.no_mlflow else base["mlflow"], "benchmark/loss_weight",
                     {"model": args.model},
                     {f"{v.replace('@', '_').replace('+', '_')}/{p}/mape": r["mape"]
                      for v, by_p in results.items() for p, r in by_p.items()})
    return out


if __name__ == "__main__":
    main()
