"""Worker processes and study tallies for the scale-out tests and benchmark."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna

from src.config import REPO_ROOT
from tests.scaleout.servers import child_env


def start_worker(overrides: list[str], log: Path, models: str = "dt", env: dict | None = None) -> subprocess.Popen:
    """`python -m src.train.worker` in its own process (group), output to `log`."""
    full = child_env(**(env or {}))
    return subprocess.Popen([sys.executable, "-m", "src.train.worker", "--models", models, *overrides],
                            cwd=REPO_ROOT, env=full, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_all(procs: list[subprocess.Popen], timeout: float = 240) -> list[int]:
    """Exit codes; a worker still running after `timeout` (shared by all) first prints its threads' stacks to its
    log (SIGUSR1, src/train/worker.py), so that the failing test shows where it was stuck, then is killed."""
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1.0)))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)
            time.sleep(2)
            p.kill()
            codes.append(p.wait())
    return codes


def probe(url: str) -> optuna.storages.RDBStorage:
    """One storage (one connection pool, pre-pinged: it survives a server restart) for polling a test's studies."""
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def studies(storage: optuna.storages.RDBStorage, prefix: str) -> list[optuna.Study]:
    names = sorted(n for n in optuna.get_all_study_names(storage=storage) if n.startswith(f"{prefix}-"))
    return [optuna.load_study(study_name=n, storage=storage) for n in names]


def tally(study: optuna.Study) -> dict:
    """Trials requested / completed / failed / retried / duplicated (trial numbers seen twice)."""
    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    return {"requested": int(study.user_attrs.get("cnnperf:shared", {}).get("budget", 0)),
            "completed": sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials),
            "failed": sum(t.state.name == "FAIL" for t in trials),
            "retried": sum("failed_trial" in t.system_attrs for t in trials),
            "running": sum(t.state.name in ("RUNNING", "WAITING") for t in trials),
            "duplicated": len(numbers) - len(set(numbers))}
