"""`python -m src.train.worker [--models dt,lr] [hydra overrides]`: one of N workers tuning shared studies.

Start it in as many processes, on as many machines, as you like, all with the same overrides (at least
`sweep=postgres`, usually `mlflow=server`; docs/scale-out.md). Every worker joins each study of each model (one
per protocol fold, named as `python -m src.train` names it) and runs its queued trials until the study's budget is
spent (src/train/shared.py). Workers fit no final model: when they are done, one
`python -m src.train model=<m> <same overrides>` (or `python -m src.train.sweep`) joins the finished studies,
runs no further trial, refits the best parameters and logs, exactly as a one-process run does.

Exit codes: 0 done; 2 configuration or study mismatch; 3 database unreachable after every retry (finished
trials are kept: start the worker again to resume). SIGTERM and Ctrl-C re-queue the running trial first.
A worker that seems stuck prints every thread's stack to its log on SIGUSR1 (`kill -USR1 PID`) and runs on.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from threadpoolctl import threadpool_limits

from src.config import compose
from src.train import shared
from src.train.sweep import MODELS

log = logging.getLogger("cnnperf.worker")


def study_run(exp_id: str, tags: dict, name: str, prefix: str, budget: int) -> str:
    """The MLflow run that holds a shared study's trial runs; open until the study's budget is spent."""
    client = MlflowClient()
    run = client.create_run(exp_id, run_name=f"{prefix}/study", tags={
        **tags, "run_kind": "shared_study", "optuna_study": name})
    client.log_param(run.info.run_id, "budget", budget)
    return run.info.run_id


def close_study_run(study, now: dict) -> None:
    """Finish the study's MLflow run (once every trial is done), with the trial counts as metrics."""
    run_id = (shared.settings(study) or {}).get("mlflow_run_id")
    if not run_id:
        return
    client = MlflowClient()
    if client.get_run(run_id).info.status != "RUNNING":
        return  # another worker finished it
    finished = [t.value for t in study.get_trials(deepcopy=False) if t.value is not None]
    metrics = {f"trials_{k.lower()}": float(v) for k, v in now.items()}
    if finished:
        metrics["best_cv_mape"] = float(min(finished))
    for k, v in metrics.items():
        client.log_metric(run_id, k, v)
    client.set_terminated(run_id, "FINISHED")


@dataclass
class StudyJob:
    """One shared study this worker tunes (a model's protocol fold), with what tuning it needs."""

    model: str
    study: optuna.Study
    tune: Callable[[bool], object]  # drain -> tune the study through its queue
    seconds: float = 0.0


def study_jobs(c: dict, policy: shared.FaultPolicy) -> list[StudyJob]:
    """Join (or create) every study (protocol x fold) of the configured model; nothing is tuned yet."""
    from src.tracking import setup
    from src.train.protocols import cv_splits, group_labels, iter_protocols, outer_folds
    from src.train.protocols import subsample as sub
    from src.train.run import Trainer
    from src.train.tuning import tune

    exp_id = setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    tr = Trainer(c)
    b = tr.budget()
    warm = dict(c["model"].get("warm_start") or {}) or None
    jobs = []
    for protocol in iter_protocols(list(c["split"]["protocols"])):
        folds, _ = outer_folds(tr.df, protocol, c["split"], tr.seed)
        # The same tuning rows and CV splits as Trainer.fit_fold, so that the study is the one it would run.
        labels = None if protocol == "random_rows" else group_labels(tr.df, protocol)
        for fold in folds:
            idx = sub(fold.train, b["tune_max_rows"], tr.seed)
            splits = cv_splits(len(idx), None if labels is None else labels[idx], b["cv_folds"], tr.seed)
            name = tr.study_name(protocol, fold.name)
            prefix = f"{tr.name}/{protocol}" + ("" if len(folds) == 1 else f"/{fold.name}")
            tags = {**tr.tags, "protocol": protocol}
            study = shared.join(name, c["sweep"]["storage"], tr.seed, b["n_trials"], warm, policy,
                                on_create=lambda n=name, p=prefix, t=tags: {
                                    "mlflow_run_id": study_run(exp_id, t, n, p, b["n_trials"])})
            jobs.append(StudyJob(tr.name, study, lambda drain, s=study, i=idx, sp=splits, p=prefix: tune(
                s, c["model"]["search_space"], tr.make_model, tr.X.iloc[i], tr.y[i], sp, b["n_trials"],
                bool(c["mlflow"]["log_trials"]), p, policy=policy, drain=drain)))
    return jobs


def work(jobs: list[StudyJob]) -> list[dict]:
    """Empty every study's queue, moving on as soon as one is empty; then wait for each study's last trials
    (other workers', or retries of dead ones) before finishing its MLflow run."""
    for drain in (False, True):
        for job in jobs:
            t0 = time.perf_counter()
            job.tune(drain)
            job.seconds += time.perf_counter() - t0
    out = []
    for job in jobs:
        now = shared.counts(job.study)
        close_study_run(job.study, now)
        out.append({"model": job.model, "study": job.study.study_name, "seconds": job.seconds, **now})
        log.info("%s: %s", job.study.study_name, now)
    return out


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="comma-separated subset of lr,knn,rf,dt,xgb (default: the "
                                                   "config's `model`)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, the same on every worker, e.g. sweep=postgres")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # two lines per trial otherwise
    signal.signal(signal.SIGTERM, _stop)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a stuck worker waits, without stopping it
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else [None]
    unknown = sorted(set(models) - set(MODELS) - {None})
    if unknown:
        ap.error(f"--models: unknown {unknown}; choose from {MODELS}")
    configs = [OmegaConf.to_container(compose(list(args.overrides) + ([f"model={m}"] if m else [])), resolve=True)
               for m in models]
    url, tracking = configs[0]["sweep"]["storage"], configs[0]["mlflow"]["tracking_uri"]
    if url.startswith("sqlite"):
        log.warning("sweep.storage is SQLite (%s): run ONE worker on it; SQLite has no row locks, so two workers "
                    "can pop the same trial. Several workers need sweep=postgres", shared.safe_url(url))
    try:
        # Every model's studies are joined first, so that a worker moves on from an emptied queue to the next.
        # BLAS/OpenMP threads as the estimators' (sweep.n_jobs): N workers on a machine must not oversubscribe it.
        with threadpool_limits(limits=int(configs[0]["sweep"]["n_jobs"])):
            jobs = [job for c in configs for job in study_jobs(c, shared.FaultPolicy.from_sweep(c["sweep"]))]
            results = work(jobs)
    except shared.StorageUnavailable as exc:
        print(f"worker: {exc} (storage {shared.safe_url(url)})", file=sys.stderr)
        return 3
    except shared.SharedStudyError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"worker: stopped ({exc or 'interrupt'}); its running trial was re-queued", file=sys.stderr)
        return 130
    except Exception as exc:
        if not shared.is_outage(exc):
            raise
        print(f"worker: cannot reach the Optuna storage {shared.safe_url(url)} or the MLflow tracking server "
              f"{tracking}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}. Finished trials are kept: "
              f"start the worker again once both are up", file=sys.stderr)
        return 3
    print(json.dumps({"worker": shared.worker_id(), "studies": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
