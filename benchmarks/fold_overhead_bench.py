"""What a training fold pays around its learner, before and after stop 68's changes, on the real dataset.

One model per name (`--models`), fitted at its warm start on 6,000 rows of data/processed/dataset.parquet and
scored on 1,000 others (the pipeline's features and target, params.yaml `train:`). Per model it times, best of
`--repeats`:
- `predict_point` through the fitted sklearn Pipeline (`generic_predict_point`, the path before) and through the
  array replay (`predict_point` now), and whether the answers are equal;
- permutation importance (every input column shuffled once) through sklearn's `permutation_importance`, one call
  per column (before), and `src.train.importance.permutation`, all shuffled copies in one call (now), on 200 rows
  (a grouped fold's share) and 1,000 (a single-fold protocol's), and the largest difference of the importances;
- the categorical one-hot encoding of the training rows: sklearn's OneHotEncoder.transform against the encoder's
  own tables (`StringOneHotEncoder`), and whether the matrices are equal.
Writes reports/bench/fold_overhead_bench.json and an MLflow run (experiment cnnperf-bench) unless --no-mlflow.
Wall time: run it on an otherwise idle machine.

    python benchmarks/fold_overhead_bench.py [--models lr,knn,rf,dt,xgb] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def best_of(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def bench_model(name: str, df: pd.DataFrame, repeats: int) -> dict:
    from sklearn.inspection import permutation_importance
    from sklearn.preprocessing import OneHotEncoder

    from benchmarks.train_time_bench import pipeline_overrides
    from src.config import compose
    from src.features.engineer import _unicode, input_columns
    from src.train.fit import fit_model, ptx_columns
    from src.train.importance import neg_mape_scorer, permutation

    c = OmegaConf.to_container(compose([f"model={name}", *pipeline_overrides()]), resolve=True)
    cols = input_columns(c["features"], ptx_columns(c, df))
    train = df.sample(6000, random_state=0)
    test = df.drop(train.index).sample(1000, random_state=1)
    model = fit_model(c, train)
    X, y = test[cols], test["target"].to_numpy(dtype=float)
    out: dict = {"model": name}
    t_generic, generic = best_of(lambda: model.generic_predict_point(X), repeats)
    t_fast, fast = best_of(lambda: model.predict_point(X), repeats)
    out["predict_point"] = {"generic_s": t_generic, "replay_s": t_fast, "speedup": t_generic / t_fast,
                            "max_rel_diff": float(np.max(np.abs(fast / generic - 1)))}
    for rows in (200, 1000):
        part, yp = X.iloc[:rows], y[:rows]
        t_old, old = best_of(lambda part=part, yp=yp: permutation_importance(
            model, part, yp, scoring=neg_mape_scorer, n_repeats=1, random_state=42), 1)
        t_new, new = best_of(lambda part=part, yp=yp, rows=rows: permutation(model, part, yp, cols, rows, 1, 42),
                             repeats)
        old = dict(zip(cols, old.importances_mean.tolist(), strict=True))
        out[f"permutation_{rows}_rows"] = {"per_column_calls_s": t_old, "one_call_s": t_new,
                                           "speedup": t_old / t_new,
                                           "max_abs_diff_pp": max(abs(new[k] - old[k]) for k in cols)}
    features = dict(dict(model.regressor_.steps)["features"].steps)
    cat_cols = next(list(cols) for part, _, cols in features["encode"].transformers_ if part == "cat")
    enc = features["encode"].named_transformers_["cat"]
    cats = features["perf"].transform(train[cols])[cat_cols]  # what the encoder is handed in the Pipeline
    t_sk, sk = best_of(lambda: OneHotEncoder.transform(enc, _unicode(cats)), repeats)
    t_tab, tab = best_of(lambda: enc.transform(cats), repeats)
    out["one_hot_6000_rows"] = {"sklearn_s": t_sk, "tables_s": t_tab, "speedup": t_sk / t_tab,
                                "equal": bool(np.array_equal(np.asarray(sk), np.asarray(tab)))}
    return out


def main() -> None:
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lr,knn,rf,dt,xgb")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="reports/bench/fold_overhead_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    a = ap.parse_args()
    mlflow_cfg = benchmark_store(a.no_mlflow)
    df = pd.read_parquet(REPO_ROOT / "data" / "processed" / "dataset.parquet")
    results = []
    for name in a.models.split(","):
        r = bench_model(name, df, a.repeats)
        results.append(r)
        p, q = r["predict_point"], r["permutation_200_rows"]
        print(f"{name:4s} predict_point {p['generic_s'] * 1e3:7.1f} -> {p['replay_s'] * 1e3:7.1f} ms "
              f"(x{p['speedup']:.2f}, max rel diff {p['max_rel_diff']:.1e}); permutation 200 rows "
              f"{q['per_column_calls_s']:.2f} -> {q['one_call_s']:.2f} s (x{q['speedup']:.1f}, max diff "
              f"{q['max_abs_diff_pp']:.3f} pp); one-hot x{r['one_hot_6000_rows']['speedup']:.1f} "
              f"equal={r['one_hot_6000_rows']['equal']}")
    metrics = {}
    for r in results:
        m = r["model"]
        metrics[f"{m}/predict_point_speedup"] = r["predict_point"]["speedup"]
        metrics[f"{m}/permutation_200_speedup"] = r["permutation_200_rows"]["speedup"]
        metrics[f"{m}/permutation_1000_speedup"] = r["permutation_1000_rows"]["speedup"]
        metrics[f"{m}/one_hot_speedup"] = r["one_hot_6000_rows"]["speedup"]
    record_benchmark({"models": results}, REPO_ROOT / a.out, mlflow_cfg, "fold_overhead", {}, metrics)


if __name__ == "__main__":
    main()
