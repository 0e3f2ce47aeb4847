"""Experiment: shrink the learned efficiency correction toward the bare physics estimate, the weight chosen inside
the training part only, by a validation split that imitates the protocol's shift (issue 12; not the default).

The ablation (docs/experiments.md "Ablation") found that on leave_arch_out no learner beats the physics estimate times
the median training efficiency (24.1 % against 54.1 % for xgb). Prediction with weight w in [0, 1]:
    log(pred) = log(estimate) + (1 - w) * log(median training efficiency) + w * learned log-efficiency,
w = 1 is the default model, w = 0 the bare estimate. w is chosen on a validation split of the outer training part
only, grouped as the protocol holds out (leave_arch_out: the newest architecture of the training part;
leave_runtime_out: its largest non-eager runtime; leave_gpu_out / leave_family_out / leave_model_out / random: a
seeded third of the training GPUs / families / CNNs / configurations), then the model is refitted on the whole training
part and scored once on the held-out part with that w. Warm-start parameters (no tuning), same rows and folds as
the pipeline. Writes reports/bench/shrink_bench.json and an MLflow run (experiment cnnperf-bench).

    python benchmarks/shrink_bench.py [--model xgb] [--protocols leave_arch_out,leave_gpu_out] [overrides]
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

from src.config import REPO_ROOT, compose  # noqa: E402
from src.features.engineer import input_columns  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train import architecture_labels, config_ids, family_labels, fit_model, outer_folds  # noqa: E402
from src.train.fit import make_model  # noqa: E402
from src.train.protocols import ARCHITECTURES  # noqa: E402

WEIGHTS = np.round(np.linspace(0.0, 1.0, 11), 2)
ARCH_ORDER = [name for name, _, _ in ARCHITECTURES]


def estimate(c: dict, df: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The physics estimate (ms) of `rows`, as the Pipeline computes it."""
    cols = input_columns(c["features"], [])
    perf = make_model(c).regressor.named_steps["features"].named_steps["perf"].fit(df.iloc[rows][cols])
    return perf.physics_frame(df.iloc[rows][cols])["t_physics_ms"].to_numpy()


def validation_split(df: pd.DataFrame, train: np.ndarray, protocol: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner train, inner validation) rows of an outer training part, held out as the protocol holds out."""
    if protocol == "leave_arch_out":
        arch = architecture_labels(df)[train]
        newest = max(set(arch), key=ARCH_ORDER.index)
        val = arch == newest
    elif protocol == "leave_runtime_out":
        # the largest non-eager runtime left in the training part
        mode = df["compile_mode"].astype(str).to_numpy()[train]
        others = pd.Series(mode[mode != "eager"]).value_counts()
        val = mode == others.index[0]
    else:
        by = {"leave_gpu_out": df["gpu"].astype(str), "leave_family_out": family_labels(df),
              "leave_model_out": df["model_key"].astype(str), "random": pd.Series(config_ids(df).astype(str))}
        labels = by[protocol].to_numpy()[train]
        uniq = np.array(sorted(set(labels)))
        pick = np.random.default_rng(seed).permutation(len(uniq))[: max(1, len(uniq) // 3)]
        val = np.isin(labels, uniq[pick])
    return train[~val], train[val]


def shrunk(est: np.ndarray, learned: np.ndarray, log_eff_med: float, w: float) -> np.ndarray:
    return est * np.exp((1 - w) * log_eff_med + w * np.log(learned / est))


def mape(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.abs(p - y) / y) * 100)


def run_protocol(c: dict, df: pd.DataFrame, protocol: str, seed: int) -> dict:
    cols = input_columns(c["features"], [])
    y = df["target"].to_numpy(dtype=float)
    folds, _ = outer_folds(df, protocol, c["split"], seed)
    preds = {"chosen": [], "default": [], "estimate": []}
    held, chosen = [], {}
    for f in folds:
        inner_tr, inner_val = validation_split(df, f.train, protocol, seed)
        m = fit_model(c, df, inner_tr)
        est_val = estimate(c, df, inner_val)
        log_eff = float(np.median(np.log(y[inner_tr] / estimate(c, df, inner_tr))))
        learned = m.predict(df.iloc[inner_val][cols])
        w = float(min(WEIGHTS, key=lambda w: mape(y[inner_val], shrunk(est_val, learned, log_eff, w))))
        chosen[f.name] = w
        model = fit_model(c, df, f.train)
        est = estimate(c, df, f.test)
        log_eff = float(np.median(np.log(y[f.train] / estimate(c, df, f.train))))
        learned = model.predict(df.iloc[f.test][cols])
        preds["chosen"].append(shrunk(est, learned, log_eff, w))
        preds["default"].append(learned)
        preds["estimate"].append(shrunk(est, learned, log_eff, 0.0))
        held.append(f.test)
    y_test = y[np.concatenate(held)]
    return {"weights": chosen, **{k: mape(y_test, np.concatenate(v)) for k, v in preds.items()},
            "rows": int(len(y_test))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--protocols",
                    default="random,leave_model_out,leave_gpu_out,leave_family_out,leave_arch_out,leave_runtime_out")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "shrink_bench.json"))
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. split.leave_gpu_out.n_groups=8")
    a = ap.parse_args(argv)
    c = OmegaConf.to_container(compose([f"model={a.model}", "features=physics", "target=efficiency", *a.overrides]),
                               resolve=True)
    df = pd.read_parquet(REPO_ROOT / c["data"]["dataset"])
    t0 = time.perf_counter()
    results = {}
    for protocol in [p for p in a.protocols.split(",") if p]:
        results[protocol] = run_protocol(c, df, protocol, int(c["seed"]))
        r = results[protocol]
        print(f"{protocol:18s} default {r['default']:6.2f}  chosen w {r['chosen']:6.2f}  bare estimate "
              f"{r['estimate']:6.2f}  (w per fold {r['weights']})", flush=True)
    out = {"model": a.model, "overrides": a.overrides, "rows": int(len(df)), "weights_grid": WEIGHTS.tolist(),
           "results": results, "wall_seconds": time.perf_counter() - t0}
    record_benchmark(out, Path(a.out), None if a.no_mlflow else c["mlflow"], "benchmark/shrink", {"model": a.model},
                     {f"{p}/{k}": r[k] for p, r in results.items() for k in ("default", "chosen", "estimate")})
    return out


if __name__ == "__main__":
    main()
