"""How to read the MAPE point's shift from training rows: the rules compared before `target.point: mape`.

The pipeline shifts each fold model's learned log efficiency by a MAPE-optimal constant read from its training
part only (src/train/point.py; docs/experiments.md "The point MAPE asks for"). This script scores the ways of reading
that constant that were compared, on the pipeline's folds, each model at its hand-set `warm_start` (no tuning):
- `none`: no shift (the learner's middle: `target.point=median`);
- `oof`: the MAPE-optimal shift of out-of-fold predictions of a grouped CV inside the training part;
- `median`: minus the median out-of-fold log ratio (the bias alone);
- `632` (adopted): Efron's .632 blend of `oof` and the final model's in-sample shift on the same CV rows.
The CV is grouped like the protocol (`cv_splits` over `group_labels`), with `--cv-folds` folds on at most
`--max-rows` training rows (the pipeline's tuning CV: 2 folds on 3,000 rows; `--max-rows 0`: all rows).
Prints pooled held-out MAPE per rule and protocol and each fold's shift, writes reports/bench/point_shift_bench.json
and logs an MLflow run (experiment cnnperf-bench).

    python benchmarks/point_shift_bench.py [--model xgb] [--rules none,oof,median,632] [--cv-folds 2]
        [--max-rows 3000] [--protocols random,leave_model_out,...]
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
from src.train.point import blended_shift, mape_optimal_shift  # noqa: E402
from src.train.protocols import cv_splits, group_labels, subsample  # noqa: E402

RULES = ("none", "oof", "median", "632")


def rule_shift(rule: str, oof: np.ndarray, in_sample: np.ndarray) -> float:
    """The log shift a rule reads from out-of-fold and in-sample log(predicted / measured) ratios."""
    if rule == "none":
        return 0.0
    if rule == "oof":
        return mape_optimal_shift(oof)
    if rule == "median":
        return -float(np.median(oof))
    if rule == "632":
        return blended_shift(mape_optimal_shift(in_sample), mape_optimal_shift(oof))
    raise ValueError(f"unknown rule {rule!r}: one of {list(RULES)}")


def pooled_mape(log_ratio: np.ndarray) -> float:
    return float(np.mean(np.abs(np.exp(log_ratio) - 1.0)) * 100.0)


def fit(c: dict, X: pd.DataFrame, y: np.ndarray, rows: np.ndarray, ptx: list[str]):
    est = make_model(c, None, ptx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X.iloc[rows], y[rows])


def score(c: dict, df: pd.DataFrame, protocol: str, rules: list[str], cv_folds: int, max_rows: int | None,
          seed: int) -> dict:
    """Per rule: pooled held-out MAPE % and each fold's shift; every fold's models are fitted once for all rules."""
    ptx = ptx_columns(c, df)
    X, y = df[input_columns(c["features"], ptx)], df["target"].to_numpy(dtype=float)
    labels = group_labels(df, protocol)
    folds, _ = outer_folds(df, protocol, c["split"], seed)
    held, shifts = [], {r: [] for r in rules}
    for f in folds:
        idx = subsample(f.train, max_rows, seed)
        oof = np.concatenate([np.log(fit(c, X, y, idx[a], ptx).predict(X.iloc[idx[v]]) / y[idx[v]])
                              for a, v in cv_splits(len(idx), labels[idx], cv_folds, seed)])
        model = fit(c, X, y, f.train, ptx)
        in_sample = np.log(model.predict(X.iloc[idx]) / y[idx])
        held.append(np.log(model.predict(X.iloc[f.test]) / y[f.test]))
        for r in rules:
            shifts[r].append(rule_shift(r, oof, in_sample))
    out = {}
    for r in rules:
        shifted = np.concatenate([h + s for h, s in zip(held, shifts[r], strict=True)])
        out[r] = {"mape": pooled_mape(shifted), "fold_shifts": dict(zip([f.name for f in folds], shifts[r],
                                                                             strict=True))}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = grid_parser(__doc__, "point_shift_bench.json")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--cv-folds", type=int, default=2)
    ap.add_argument("--max-rows", type=int, default=3000, help="CV rows per training part (0: all)")
    args = ap.parse_args(argv)
    protocols, overrides = protocols_and_overrides(args)
    rules = listed(args.rules, RULES, "rule")
    if args.cv_folds < 2:
        raise SystemExit(f"--cv-folds must be >= 2, got {args.cv_folds}")
    c = config(args.model, "physics_ptx/efficiency", overrides)
    df = pd.read_parquet(REPO_ROOT / c["data"]["dataset"])
    seed, max_rows = int(c["seed"]), (args.max_rows or None)
    t0 = time.perf_counter()
    results = {p: score(c, df, p, rules, args.cv_folds, max_rows, seed) for p in tqdm(protocols, desc="protocol")}
    out = {"model": args.model, "rules": rules, "protocols": protocols, "cv_folds": args.cv_folds,
           "max_rows": max_rows, "seed": seed, "rows": int(len(df)), "overrides": overrides,
           "params": "the model's warm_start (no tuning)", "results": results,
           "wall_seconds": time.perf_counter() - t0}
    print(f"{args.model}, rows: {len(df)}, CV {args.cv_folds} folds on {max_rows or 'all'} rows; "
          "pooled held-out MAPE %")
    print(f"{'rule':8s} " + " ".join(f"{p:>17s}" for p in protocols))
    for r in rules:
        print(f"{r:8s} " + " ".join(f"{results[p][r]['mape']:17.2f}" for p in protocols))
    record_benchmark(out, Path(args.out), None if args.no_mlflow else c["mlflow"], "benchmark/point_shift",
                     {"model": args.model, "cv_folds": args.cv_folds, "max_rows": max_rows},
                     {f"{r}/{p}/mape": results[p][r]["mape"] for p in protocols for r in rules})
    return out


if __name__ == "__main__":
    main()
