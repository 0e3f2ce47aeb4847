"""How the Decision Tree's distillation was chosen: CV on the `random` protocol's training part only.

For each grouping (configuration, GPU, family) the training part of the `random` protocol (no held-out row) is
split into `--folds` grouped folds; in each, the Decision Tree (conf/model/dt.yaml at its warm start) is grown as
each variant says and scored on the other fold: `plain` (on the measurements, `model.distill=null`), or
`<blocks>x<copies>` (distilled from XGBoost at its warm start, each block swapped in its own synthetic rows, e.g.
`cnn+gpu x3`, the default), beside XGBoost itself. Prints the CV MAPE table and writes
reports/bench/distill_bench.json (+ .csv), logged to MLflow (experiment cnnperf-bench).

    python benchmarks/distill_bench.py [--variants plain,cnn+gpu:3,cnn:3] [--groupings configuration,gpu,family]
        [--folds 2] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_part_cv import GROUPINGS, check_groupings, training_part_folds  # noqa: E402

from src.config import REPO_ROOT, compose  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train.fit import make_model, ptx_columns  # noqa: E402
from src.train.metrics import mape  # noqa: E402
from src.train.run import load_dataset  # noqa: E402


def variant_config(c: dict, variant: str) -> dict:
    """The dt config of a variant: `plain`, or `<block>[+<block>]:<copies>[:<donors>]` (e.g. `cnn+gpu:3`,
    `cnn+gpu:2:distinct`; donors default to the config's `distill.donors`)."""
    if variant == "plain":
        return {**c, "model": {**c["model"], "distill": None}}
    blocks, _, rest = variant.partition(":")
    copies, _, donors = rest.partition(":")
    if not copies.isdigit():
        raise SystemExit(f"--variants: {variant!r} is not `plain` or `<block>[+<block>]:<copies>[:<donors>]`")
    distill = {**(c["model"].get("distill") or {"teacher": "xgb"}), "swap": blocks.split("+"), "copies": int(copies)}
    if donors:
        distill["donors"] = donors
    return {**c, "model": {**c["model"], "distill": distill}}


def fit_score(c: dict, ptx: list[str], X: pd.DataFrame, y: np.ndarray, tr: np.ndarray, va: np.ndarray,
              model: str | None = None) -> tuple[float, float]:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make_model(c, None, ptx, model).fit(X.iloc[tr], y[tr])
    return mape(y[va], est.predict(X.iloc[va])), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="plain,cnn+gpu:3")
    ap.add_argument("--groupings", default=",".join(GROUPINGS))
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "distill_bench.json"))
    args = ap.parse_args()
    groupings = check_groupings(args.groupings)
    c = OmegaConf.to_container(compose(["model=dt"]), resolve=True)
    df = load_dataset(c)
    ptx = ptx_columns(c, df)
    X, y = df[input_columns(c["features"], ptx)], df["target"].to_numpy(dtype=float)
    training, folds = training_part_folds(df, c, groupings, args.folds)
    variants = args.variants.split(",")
    configs = {v: variant_config(c, v) for v in variants}
    rows = []
    for grouping, k, tr, va in folds:
        for name, cfg, model in [("xgb", c, "xgb"), *[(v, configs[v], None) for v in variants]]:
            score, seconds = fit_score(cfg, ptx, X, y, tr, va, model)
            rows.append({"grouping": grouping, "fold": k, "variant": name, "mape": score, "fit_s": seconds,
                         "train_rows": len(tr), "validation_rows": len(va)})
    table = pd.DataFrame(rows)
    cv = table.groupby(["variant", "grouping"])["mape"].mean().unstack("grouping")
    cv = cv.reindex(["xgb", *variants])
    print(f"CV MAPE % on the random protocol's training part ({len(training)} rows, {args.folds} folds):")
    print(cv.round(2).to_string())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out.with_suffix(".csv"), index=False)
    metrics = {f"{g}_{v.replace(':', 'x').replace('+', '_')}": float(cv.loc[v, g])
               for v in cv.index for g in cv.columns}
    record_benchmark({"training_rows": int(len(training)), "folds": args.folds, "cv_mape": cv.round(4).to_dict(),
                      "rows": rows}, out, None if args.no_mlflow else c["mlflow"], "benchmark/distill",
                     {"variants": args.variants, "folds": args.folds}, metrics, artifacts=[out.with_suffix(".csv")])
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
