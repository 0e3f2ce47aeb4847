"""How far off a CNN described by its numbers only is, against the same CNN named, on the same held-out rows.

A request for a CNN outside the zoo (`python -m src.predict rank --params-m ... --gmacs ...`, or a served row whose
`model_key` names no kernel profile) is priced from its whole-network numbers, without a layer profile, its PTX
counts imputed from its GMACs. This benchmark asks the question of every held-out row twice: as it is (the CNN
named, its kernel profile and PTX counts found) and renamed to a CNN nobody measured, then scores both against the
measurement. Each `--shares` value is `target.by_numbers_share` (src/features/baseline.py): the share of training
rows priced that way, so that the learner has seen that pricing on every GPU. `--learner` adds the variant the
served model uses (`target.by_numbers_learner`): share 0 and a second learner, fitted on every training row priced
by its numbers, for the rows without a layer profile.

The model is fitted at its hand-set warm start (conf/model/<name>.yaml), no tuning, on each protocol's folds of
the pipeline's dataset (params.yaml `train:` features, target, seed and GPU groups), so the shares compare on the
same rows and folds. Writes reports/bench/by_numbers_bench.json and an MLflow run (experiment cnnperf-bench)
unless --no-mlflow.

    python benchmarks/by_numbers_bench.py [--model xgb] [--protocols random,leave_model_out] [--shares 0,0.1]
        [--learner]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.train_time_bench import pipeline_overrides  # noqa: E402

# The name a request for a CNN outside the zoo carries: in no kernel profile or PTX table.
UNKNOWN_CNN = "a CNN nobody measured"


# Batch-size bins of the by-numbers error (a CNN described by its numbers is priced without per-kernel waves and
# floors, so its error can depend on the batch more than a named CNN's).
BATCH_BINS = ((1, 8), (9, 64), (65, 256), (257, 1 << 20))


def overrides(model: str, share: float, extra: list[str] | None = None) -> list[str]:
    """The train stage's Hydra overrides (params.yaml), for one model and one by-numbers share, then `extra`."""
    return [*pipeline_overrides(), f"model={model}", f"target.by_numbers_share={share}", *(extra or [])]


def score(model: str, share: float, protocols: list[str], learner: bool = False,
          extra: list[str] | None = None) -> dict:
    """Per protocol: held-out MAPE % with the CNN named and described by its numbers (pooled and per batch bin),
    and the rows. `learner`: the model fits its by-numbers learner (`by_numbers_learner`); `extra`: Hydra
    overrides after the pipeline's (e.g. physics.by_numbers_memory_passes=0)."""
    from src.config import compose
    from src.train.protocols import outer_folds
    from src.train.run import Trainer

    c = OmegaConf.to_container(compose(overrides(model, share, extra)), resolve=True)
    trainer = Trainer(c)
    warm = dict(c["model"]["warm_start"])
    out = {}
    for protocol in protocols:
        folds, _ = outer_folds(trainer.df, protocol, c["split"], trainer.seed)
        named, numbers, batches = [], [], []
        for fold in tqdm(folds, desc=f"{model} share {share} {protocol}", leave=False):
            estimator = trainer.make_model(warm).set_params(by_numbers_learner=learner)
            fitted = estimator.fit(trainer.X.iloc[fold.train], trainer.y[fold.train])
            X, y = trainer.X.iloc[fold.test], trainer.y[fold.test]
            unknown = X.assign(model_key=UNKNOWN_CNN)
            named.append(np.abs(fitted.predict(X) / y - 1))
            numbers.append(np.abs(fitted.predict(unknown) / y - 1))
            batches.append(X["batch_size"].to_numpy(dtype=float))
        err, batch = np.concatenate(numbers), np.concatenate(batches)
        bins = {f"{lo}-{hi}": (batch >= lo) & (batch <= hi) for lo, hi in BATCH_BINS}
        out[protocol] = {"rows": int(sum(len(n) for n in named)),
                         "named_mape": float(100 * np.concatenate(named).mean()),
                         "by_numbers_mape": float(100 * err.mean()),
                         "by_numbers_mape_by_batch": {k: float(100 * err[m].mean()) for k, m in bins.items()
                                                      if m.any()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--protocols", default="random,leave_model_out")
    ap.add_argument("--shares", default="0,0.1")
    ap.add_argument("--learner", action="store_true", help="also score share 0 with the by-numbers learner")
    ap.add_argument("--out", default="reports/bench/by_numbers_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra Hydra overrides, e.g. physics.by_numbers_memory_passes=0 (the rule before 2026-11-30)")
    a = ap.parse_args()
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    mlflow_cfg = benchmark_store(a.no_mlflow)
    protocols = a.protocols.split(",")
    results = {}
    variants = [(str(float(s)), float(s), False) for s in a.shares.split(",") if s] + (
        [("learner", 0.0, True)] if a.learner else [])
    for key, share, learner in variants:
        results[key] = score(a.model, share, protocols, learner, a.set)
        for protocol, r in results[key].items():
            print(f"{a.model} {'by-numbers learner' if learner else f'by_numbers_share {share:<4}'} {protocol:16s} "
                  f"({r['rows']} rows): named {r['named_mape']:6.2f} %, described by its numbers "
                  f"{r['by_numbers_mape']:6.2f} % (by batch: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in r["by_numbers_mape_by_batch"].items()) + ")")
    out = {"model": a.model, "fit": "warm start, no tuning", "overrides": pipeline_overrides() + a.set,
           "shares": results}
    metrics = {f"{p}_{kind}_share_{s}": r[f"{kind}_mape"] for s, per in results.items() for p, r in per.items()
               for kind in ("named", "by_numbers")}
    record_benchmark(out, REPO_ROOT / a.out, mlflow_cfg, f"by_numbers/{a.model}", {"model": a.model}, metrics)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
