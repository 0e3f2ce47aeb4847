"""Sweep wall time with 1, 2 and 4 workers on shared studies (PostgreSQL + MLflow tracking server, both local).

Starts a throwaway PostgreSQL server (initdb + pg_ctl in a temp folder, 127.0.0.1) and an `mlflow server` on it
(tests/scaleout/servers.py), writes the tiny test table (tests/train/tiny.py), then for each worker count runs
`python -m src.train.sweep --workers N --models <models>` on fresh studies (its own study prefix): N workers tune
the models' studies (all trials), then the sweep fits and logs each model. Prints and writes
reports/bench/scaleout.json: wall time of the workers' phase and of the whole sweep, and both as ratios to 1 worker.

    python benchmarks/scaleout_bench.py [--workers 1,2,4] [--models lr,knn,rf,dt,xgb] [--trials 24] [--slow-trials 12]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT  # noqa: E402
from tests.scaleout.servers import MlflowServer, PgServer, child_env, missing_reason  # noqa: E402
from tests.scaleout.workers import probe, studies, tally  # noqa: E402


def sweep(n: int, models: str, overrides: list[str], log: Path) -> dict:
    """One `src.train.sweep --workers n` run; its sweep.json plus the wall time measured here."""
    env = child_env()
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        code = subprocess.run([sys.executable, "-m", "src.train.sweep", "--workers", str(n), "--models", models,
                               *overrides], cwd=REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if code:
        raise SystemExit(f"sweep with {n} workers failed ({code}): {log.read_text()[-3000:]}")
    reports = next(o.split("=", 1)[1] for o in overrides if o.startswith("reports_dir="))
    return {**json.loads((Path(reports) / "sweep.json").read_text()), "measured_wall_seconds": wall}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--models", default="lr,knn,rf,dt,xgb")
    ap.add_argument("--trials", type=int, default=24, help="trials per study of lr, knn, dt")
    ap.add_argument("--slow-trials", type=int, default=12, help="trials per study of rf, xgb")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "scaleout.json"))
    args = ap.parse_args(argv)
    why = missing_reason()
    if why:
        raise SystemExit(why)
    from tests.train.tiny import overrides as tiny_overrides

    work = Path(tempfile.mkdtemp(prefix="cnnperf-scaleout-bench-"))
    replaced = ("sweep.storage", "mlflow.tracking_uri", "mlflow.artifact_root", "sweep.n_trials",
                "sweep.n_trials_slow")
    base = [o for o in tiny_overrides(work / "tiny", protocols="[random]") if o.split("=", 1)[0] not in replaced]
    pg = PgServer().start()
    server = MlflowServer(pg.createdb("mlflow"), work / "artifacts")
    try:
        server.wait_ready()
        url = pg.createdb("optuna")
        store = probe(url)
        runs = {}
        for n in [int(x) for x in args.workers.split(",")]:
            ov = [*base, "sweep=postgres", f"sweep.storage={url}", "mlflow=server", f"mlflow.tracking_uri={server.url}",
                  f"sweep.study_prefix=bench{n}", f"sweep.n_trials={args.trials}",
                  f"sweep.n_trials_slow={args.slow_trials}"]
            out = sweep(n, args.models, ov, work / f"sweep-{n}.log")
            counts = {s.study_name.split("-")[1]: tally(s) for s in studies(store, f"bench{n}")}
            runs[n] = {"workers_wall_seconds": out["workers_wall_seconds"], "sweep_wall_seconds": out["wall_seconds"],
                       "fit_and_log_seconds": out["wall_seconds"] - out["workers_wall_seconds"], "trials": counts}
            print(f"{n} worker(s): workers {out['workers_wall_seconds']:.1f} s, "
                  f"whole sweep {out['wall_seconds']:.1f} s", flush=True)
        store.engine.dispose()
    finally:
        server.stop()
        pg.destroy()
        shutil.rmtree(work, ignore_errors=True)
    one = runs[min(runs)]
    for r in runs.values():
        r["workers_speedup_vs_1"] = one["workers_wall_seconds"] / r["workers_wall_seconds"]
        r["sweep_speedup_vs_1"] = one["sweep_wall_seconds"] / r["sweep_wall_seconds"]
    result = {"what": "src.train.sweep --workers N on shared Optuna studies (PostgreSQL 127.0.0.1) with an MLflow "
                      "tracking server on PostgreSQL; tiny test table (tests/train/tiny.py), random protocol only",
              "models": args.models.split(","), "trials_per_study": {"lr/knn/dt": args.trials,
                                                                    "rf/xgb": args.slow_trials},
              "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
              "runs": {str(k): v for k, v in runs.items()}}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("workers  tuning s  speedup  sweep s  speedup")
    for n, r in runs.items():
        print(f"{n:>7}  {r['workers_wall_seconds']:8.1f}  {r['workers_speedup_vs_1']:7.2f}  "
              f"{r['sweep_wall_seconds']:7.1f}  {r['sweep_speedup_vs_1']:7.2f}")
    print(f"-> {path}")
    return result


if __name__ == "__main__":
    main()
