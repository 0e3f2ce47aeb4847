"""`python -m src.train.sweep [hydra overrides]`: train all five models in one process and time the whole sweep.

Same as `python -m src.train -m model=lr,knn,rf,dt,xgb`, plus the sweep's wall time in
reports/train/sweep.json and an MLflow run `sweep` (metric sweep_wall_seconds). Add `models=[dt,xgb]`-style
selection with `--models dt,xgb`.

`--workers N` first tunes through N `python -m src.train.worker` processes on shared studies (needs a database
server: `sweep=postgres mlflow=server`, docs/scale-out.md; workers on other machines may join the same studies),
then fits and logs each model here, joining the finished studies (no further trial).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time

import mlflow
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose

MODELS = ["lr", "knn", "rf", "dt", "xgb"]
log = logging.getLogger("cnnperf.sweep")


def run_workers(n: int, models: list[str], overrides: list[str]) -> float:
    """Start `n` local workers on the models' shared studies and wait for all; returns their wall time."""
    c = OmegaConf.to_container(compose(list(overrides)), resolve=True)
    stores = {"sweep.storage": c["sweep"]["storage"], "mlflow.tracking_uri": c["mlflow"]["tracking_uri"]}
    local = [k for k, v in stores.items() if str(v).startswith(("sqlite", "file"))]
    if n > 1 and local:
        raise SystemExit(f"--workers {n}: {', '.join(local)} is a local file store, which concurrent processes "
                         f"corrupt or lock; use a database server: sweep=postgres mlflow=server (docs/scale-out.md)")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "src.train.worker", "--models", ",".join(models), *overrides]
    procs = [subprocess.Popen(cmd) for _ in range(n)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"--workers {n}: worker exit codes {codes} (3: database unreachable, rerun to resume; "
                         f"2: study mismatch); see their messages above")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of lr,knn,rf,dt,xgb")
    ap.add_argument("--workers", type=int, default=0,
                    help="tune first through this many local worker processes on shared studies (default 0: no)")
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
    tune_wall = run_workers(args.workers, models, list(args.overrides)) if args.workers > 0 else None
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
        mlflow.set_tags({"run_kind": "sweep", "models": ",".join(models), "overrides": " ".join(args.overrides),
                         "workers": str(args.workers)})
        mlflow.log_metrics({"sweep_wall_seconds": wall, **{f"wall_seconds/{m}": v for m, v in per_model.items()},
                            **({"workers_wall_seconds": tune_wall} if tune_wall is not None else {})})
    out = {"models": models, "overrides": args.overrides, "workers": args.workers, "wall_seconds": wall,
           "workers_wall_seconds": tune_wall, "per_model_seconds": per_model, "results": results}
    path = REPO_ROOT / c["reports_dir"] / "sweep.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    log.info("sweep of %d models: %.1f s wall -> %s", len(models), wall, path)
    return out


if __name__ == "__main__":
    main()
