"""What a cheaper setting of one model costs in accuracy: CV on the `random` protocol's training part only.

Why: the quick main job (issue 12, `make pipeline` within 15 min on 2 cores) is mostly the forest's and the
distilled tree's fits. A setting that fits faster is only worth it if it scores as well, and the choice must not
look at any held-out row, so, as benchmarks/distill_bench.py does for the distillation, each variant is fitted on
one grouped half of the `random` protocol's training part and scored on the other, for three groupings
(configuration, GPU, family).

A variant is `name=key:value[;key:value...]`, applied to the model's config: a warm-start parameter
(`n_estimators:50`), a fixed estimator parameter (`max_samples:0.3`) or a distillation setting
(`distill.copies:2`); `warm` is the config as it is.

    python benchmarks/cost_variants_bench.py --model rf \
        --variants "warm,trees50=n_estimators:50,half_rows=max_samples:0.3" [--folds 2] [--no-mlflow]

Prints CV MAPE % and fit seconds per variant and grouping; writes reports/bench/cost_variants_<model>.json (+ .csv)
and an MLflow run (experiment cnnperf-bench) unless --no-mlflow.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_part_cv import GROUPINGS, check_groupings, training_part_folds  # noqa: E402

from src.config import REPO_ROOT, compose  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train.fit import make_model, ptx_columns  # noqa: E402
from src.train.metrics import mape  # noqa: E402
from src.train.run import load_dataset  # noqa: E402


def parse_variant(spec: str) -> tuple[str, dict[str, object]]:
    """`name=key:value;...` -> (name, {key: value}); `warm` alone is the config unchanged."""
    name, _, body = spec.partition("=")
    if not body:
        if name != "warm":
            raise SystemExit(f"--variants: {spec!r} is not `warm` or `name=key:value[;key:value...]`")
        return name, {}
    changes = {}
    for item in body.split(";"):
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise SystemExit(f"--variants: {item!r} in {spec!r} is not `key:value`")
        changes[key] = yaml.safe_load(value)
    return name, changes


def variant_config(c: dict, changes: dict[str, object]) -> tuple[dict, dict]:
    """(config, warm-start params) of a variant: each key changes the warm start, the fixed estimator parameters
    or (`distill.<key>`) the distillation, whichever holds it; a key none of them holds is an error."""
    c = copy.deepcopy(c)
    model = c["model"]
    params = dict(model.get("warm_start") or {})
    for key, value in changes.items():
        if key.startswith("distill."):
            if not model.get("distill"):
                raise SystemExit(f"--variants: model {model['name']} is not distilled, so {key} means nothing")
            model["distill"][key.split(".", 1)[1]] = value
        elif key in params:
            params[key] = value
        elif key in (model.get("fixed") or {}):
            model["fixed"][key] = value
        else:
            raise SystemExit(f"--variants: {key!r} is neither a warm-start nor a fixed parameter of "
                             f"{model['name']} (warm start {sorted(params)}, fixed {sorted(model.get('fixed') or {})})")
    return c, params


def fit_score(c: dict, params: dict, ptx: list[str], X: pd.DataFrame, y: np.ndarray, tr: np.ndarray,
              va: np.ndarray) -> tuple[float, float]:
    """(validation MAPE %, fit seconds) of one variant on one CV fold."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make_model(c, params, ptx).fit(X.iloc[tr], y[tr])
    seconds = time.perf_counter() - t0
    return mape(y[va], est.predict(X.iloc[va])), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="rf")
    ap.add_argument("--variants", default="warm")
    ap.add_argument("--groupings", default=",".join(GROUPINGS))
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    groupings = check_groupings(args.groupings)
    c = OmegaConf.to_container(compose([f"model={args.model}"]), resolve=True)
    variants = dict(parse_variant(v) for v in args.variants.split(","))
    configs = {name: variant_config(c, changes) for name, changes in variants.items()}
    df = load_dataset(c)
    ptx = ptx_columns(c, df)
    X, y = df[input_columns(c["features"], ptx)], df["target"].to_numpy(dtype=float)
    training, folds = training_part_folds(df, c, groupings, args.folds)
    rows = []
    for grouping, k, tr, va in folds:
        for name, (cfg, params) in configs.items():
            score, seconds = fit_score(cfg, params, ptx, X, y, tr, va)
            rows.append({"grouping": grouping, "fold": k, "variant": name, "mape": score, "fit_s": seconds,
                         "train_rows": len(tr), "validation_rows": len(va)})
    table = pd.DataFrame(rows)
    cv = table.groupby(["variant", "grouping"])["mape"].mean().unstack("grouping").reindex(list(configs))
    fit_s = table.groupby("variant")["fit_s"].sum().reindex(list(configs))
    summary = cv.assign(fit_s=fit_s, fit_ratio=fit_s / fit_s.iloc[0])
    print(f"{args.model}: CV MAPE % on the random protocol's training part ({len(training)} rows, {args.folds} "
          f"folds per grouping); fit_s: seconds of all its fits, fit_ratio: against {summary.index[0]}")
    print(summary.round(3).to_string())
    out = Path(args.out or REPO_ROOT / "reports" / "bench" / f"cost_variants_{args.model}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out.with_suffix(".csv"), index=False)
    metrics = {f"{g}_{v}": float(cv.loc[v, g]) for v in cv.index for g in cv.columns}
    metrics.update({f"fit_s_{v}": float(fit_s[v]) for v in fit_s.index})
    record_benchmark({"model": args.model, "variants": {k: dict(v) for k, v in variants.items()},
                      "training_rows": int(len(training)), "folds": args.folds,
                      "cv_mape": cv.round(4).to_dict(), "fit_s": fit_s.round(2).to_dict(), "rows": rows}, out,
                     None if args.no_mlflow else c["mlflow"], f"benchmark/cost_variants_{args.model}",
                     {"model": args.model, "variants": args.variants, "folds": args.folds}, metrics,
                     artifacts=[out.with_suffix(".csv")])
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
