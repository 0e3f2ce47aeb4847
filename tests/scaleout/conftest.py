"""One PostgreSQL server and one `mlflow server` on it per test session, plus tiny data, for the scale-out tests.

Skipped, with the reason, only where the PostgreSQL binaries (or psycopg) are absent; .ci/run installs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scaleout.servers import MlflowServer, PgServer, missing_reason
from tests.scaleout.workers import probe, start_worker, studies, wait_all

# Keys of tests.train.tiny.overrides that the scale-out runs set themselves.
REPLACED = ("sweep.storage", "mlflow.tracking_uri", "mlflow.artifact_root", "sweep.n_trials", "sweep.n_trials_slow",
            "model.n_trials")


@pytest.fixture(scope="session")
def pg():
    why = missing_reason()
    if why:
        pytest.skip(why)
    server = PgServer().start()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def tracking(pg, tmp_path_factory):
    """An MLflow tracking server on the session's PostgreSQL (database `mlflow`), artifacts proxied to a folder."""
    server = MlflowServer(pg.createdb("mlflow"), tmp_path_factory.mktemp("mlflow") / "artifacts").wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def optuna_url(pg) -> str:
    return pg.createdb("optuna")


@pytest.fixture(scope="session")
def storage(optuna_url):
    """The tests' own view of the Optuna database (one pool for all polling)."""
    store = probe(optuna_url)
    yield store
    store.engine.dispose()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, list[str]]:
    """Tiny tables and their feature table, once per session; (folder, overrides without stores or budget)."""
    from tests.train.tiny import overrides

    base = tmp_path_factory.mktemp("tiny")
    ov = overrides(base, protocols="[random]")
    return base, [o for o in ov if o.split("=", 1)[0] not in REPLACED]


@pytest.fixture(scope="session")
def cluster(tiny, optuna_url, tracking):
    """overrides(prefix, n_trials, **sweep) -> the Hydra overrides of one scale-out run on the session servers."""
    def make(prefix: str, n_trials: int, **sweep) -> list[str]:
        extra = {"heartbeat_interval": 1, "grace_period": 3, "storage_retries": 8, "storage_backoff_s": 0.5, **sweep}
        return [*tiny[1], "sweep=postgres", f"sweep.storage={optuna_url}", "mlflow=server",
                f"mlflow.tracking_uri={tracking.url}", f"sweep.study_prefix={prefix}", f"sweep.n_trials={n_trials}",
                f"sweep.n_trials_slow={n_trials}", f"model.n_trials={n_trials}",
                *[f"sweep.{k}={v}" for k, v in extra.items()]]
    return make


@pytest.fixture(scope="session")
def four_workers(cluster, storage, tmp_path_factory):
    """Four workers started together on one study of 16 trials; (overrides, study, exit codes, log folder)."""
    ov = cluster("four", 16)
    folder = tmp_path_factory.mktemp("four")
    procs = [start_worker(ov, folder / f"worker{i}.log") for i in range(4)]
    codes = wait_all(procs)
    return ov, studies(storage, "four"), codes, folder
