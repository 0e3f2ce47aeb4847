"""What a model's trial-selection rule did, apart from everything else: the pipeline's run against argmin.

For every fold of every protocol of the last `python -m src.train model=<m>` (its studies in the Optuna storage,
its held-out predictions in reports/train/<m>/<protocol>/predictions.csv), the trial the model's `selection`
picked (conf/model/<m>.yaml; dt: CART's one-standard-error rule) is compared with the lowest-CV-MAPE trial. Where
they differ, the argmin trial's parameters are refitted on the fold's training part and scored on the same
held-out rows; elsewhere the pipeline's predictions stand for both. Prints and writes pooled MAPE per protocol,
argmin vs the rule, and the folds that changed (reports/bench/selection_rule_bench.json, MLflow experiment
cnnperf-bench). Needs the train stage's run of the same config (same dataset version: study names carry it).

    python benchmarks/selection_rule_bench.py [--model dt] [--no-mlflow] [Hydra overrides of the train stage ...]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from omegaconf import OmegaConf
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT, compose  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train.protocols import outer_folds  # noqa: E402
from src.train.run import Trainer  # noqa: E402
from src.train.tuning import select_trial  # noqa: E402

GROUPED = ("random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out",
           "leave_runtime_out")


def mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)) * 100)


def protocol_effect(tr: Trainer, protocol: str, reports: Path) -> dict:
    """Pooled MAPE with the rule's trials (the pipeline's predictions) and with argmin's, on the same rows."""
    pred = pd.read_csv(reports / tr.name / protocol / "predictions.csv")
    c = tr.c
    folds, _ = outer_folds(tr.df, protocol, c["split"], tr.seed)
    argmin_pred = pred.set_index("measurement_id")["predicted"].copy()
    changed = []
    for fold in folds:
        study = optuna.load_study(study_name=tr.study_name(protocol, fold.name), storage=c["sweep"]["storage"])
        best = select_trial(study)
        chosen = select_trial(study, c["model"].get("selection"), c["model"]["search_space"])
        if best.number == chosen.number:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = tr.make_model(dict(best.params)).fit(tr.X.iloc[fold.train], tr.y[fold.train])
        p = model.predict(tr.X.iloc[fold.test])
        ids = tr.df["measurement_id"].to_numpy()[fold.test]
        argmin_pred.loc[ids] = p
        ours = pred.set_index("measurement_id").loc[ids]
        changed.append({"fold": fold.name, "rows": int(len(ids)), "argmin_params": dict(best.params),
                        "argmin_cv": float(best.value), "rule_params": dict(chosen.params),
                        "rule_cv": float(chosen.value), "argmin_mape": mape(tr.y[fold.test], p),
                        "rule_mape": mape(ours["measured"], ours["predicted"])})
    measured = pred.set_index("measurement_id")["measured"]
    return {"rows": int(len(pred)), "folds": len(folds), "argmin_mape": mape(measured, argmin_pred.loc[measured.index]),
            "rule_mape": mape(pred["measured"], pred["predicted"]), "changed_folds": changed}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dt")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "selection_rule_bench.json"))
    ap.add_argument("--no-mlflow", action="store_true")
    args, overrides = ap.parse_known_args(argv)
    c = OmegaConf.to_container(compose([*overrides, f"model={args.model}", "progress=false"]), resolve=True)
    t0 = time.perf_counter()
    tr = Trainer(c)
    reports = REPO_ROOT / c["reports_dir"]
    protocols = [p for p in c["split"]["protocols"] if p in GROUPED]
    results = {p: protocol_effect(tr, p, reports) for p in tqdm(protocols, desc="protocols")}
    out = {"model": args.model, "selection": c["model"].get("selection") or {"rule": "best"},
           "overrides": overrides, "results": results, "wall_seconds": time.perf_counter() - t0}
    print(f"{'protocol':18s} {'rows':>6s} {'argmin %':>9s} {'rule %':>8s}  folds changed")
    for p, r in results.items():
        print(f"{p:18s} {r['rows']:6d} {r['argmin_mape']:9.2f} {r['rule_mape']:8.2f}  "
              f"{len(r['changed_folds'])} of {r['folds']}")
        for f in r["changed_folds"]:
            print(f"  {f['fold']}: {f['argmin_mape']:.2f} -> {f['rule_mape']:.2f} % ({f['rows']} rows; "
                  f"CV {f['argmin_cv']:.2f} -> {f['rule_cv']:.2f})")
    metrics = {f"{p}/{k}": r[k] for p, r in results.items() for k in ("argmin_mape", "rule_mape")}
    record_benchmark(out, Path(args.out), None if args.no_mlflow else c["mlflow"], "benchmark/selection_rule",
                     {"model": args.model}, metrics)
    return out


if __name__ == "__main__":
    main()
