"""`python -m src.train.sweep [hydra overrides]`: train all five models in one process and time the whole sweep.

Same as `python -m src.train -m model=lr,knn,rf,dt,xgb`, plus the sweep's wall time in
reports/train/sweep.json and an MLflow run `sweep` (metric sweep_wall_seconds). Add `models=[dt,xgb]`-style
selection with `--models dt,xgb`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import mlflow
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose

MODELS = ["lr", "knn", "rf", "dt", "xgb"]
log = logging.getLogger("cnnperf.sweep")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of lr,knn,rf,dt,xgb")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to every model, e.g. sweep.n_trials=5")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    from src.tracking import setup
    from src.train.run import train

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        ap.error(f"--models: unknown {unknown}; choose from {MODELS}")
    t0 = time.perf_counter()
    per_model, results = {}, {}
    for m in models:
        c = OmegaConf.to_container(compose(list(args.overrides) + [f"model={m}"]), resolve=True)
        t = time.perf_counter()
        s = train(c)
        per_model[m] = time.perf_counter() - t
        results[m] = {p: {k: r[k] for k in ("mape", "r2", "adj_r2")} for p, r in s["protocols"].items()}
        log.info("%s: %.1f s %s", m, per_model[m], results[m])
    wall = time.perf_counter() - t0
    c = OmegaConf.to_container(compose(list(args.overrides)), resolve=True)
    setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    with mlflow.start_run(run_name="sweep", nested=mlflow.active_run() is not None):
        mlflow.set_tags({"run_kind": "sweep", "models": ",".join(models), "overrides": " ".join(args.overrides)})
        mlflow.log_metrics({"sweep_wall_seconds": wall, **{f"wall_seconds/{m}": v for m, v in per_model.items()}})
    out = {"models": models, "overrides": args.overrides, "wall_seconds": wall, "per_model_seconds": per_model,
           "results": results}
    path = REPO_ROOT / c["reports_dir"] / "sweep.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    log.info("sweep of %d models: %.1f s wall -> %s", len(models), wall, path)
    return out


if __name__ == "__main__":
    main()
