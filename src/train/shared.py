"""Shared Optuna studies: many workers on one study in a server database, a fixed budget, faults survived.

Why a second kind of study: the default study (`tuning.create_study`) belongs to one process and is replaced on
every run. A shared study lives in a database server (PostgreSQL) and any number of workers, on any machines,
join it by name (`python -m src.train.worker`). Everything below is Optuna's own machinery, configured:
- the budget is the study's queue: the process that creates the study enqueues exactly `budget` trials (the
  first is the model's warm start) and records the study's settings in a user attribute (`SHARED_ATTR`).
  Workers only pop queued trials (Optuna's row-locked WAITING -> RUNNING), and `SharedStorage` refuses to
  create any other, so the study ends with exactly `budget` finished trials whatever the number of workers;
- heartbeats: every running trial beats every `heartbeat_interval` s; a trial silent for `grace_period` s (its
  worker was killed) is failed by the next worker that looks, and Optuna's RetryHeartbeatStaleTrialCallback
  (formerly RetryFailedTrialCallback) re-queues it with the same parameters; its MLflow run is closed FAILED.
  A RUNNING trial with no heartbeat at all (a pop the database committed but whose reply a restart lost: nobody
  runs it) is failed and re-queued the same way once a worker has seen it so for `grace_period` s;
- a lost database connection (server restart) is waited out with exponential back-off; past `storage_retries`
  tries the worker stops with `StorageUnavailable` (finished trials are kept: rerunning resumes the study).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import optuna
from optuna.exceptions import DuplicatedStudyError, ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._rdb import models  # the tables (RDBStorage's own, private): trials never heartbeated
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState

log = logging.getLogger("cnnperf.shared")

SHARED_ATTR = "cnnperf:shared"  # study user attribute: budget, heartbeat settings, MLflow parent run
RUN_ATTR = "mlflow_run_id"  # trial user attribute: the trial's MLflow run
WORKER_ATTR = "worker"  # trial user attribute: host:pid of the worker that ran it


class BudgetSpent(Exception):
    """The shared study's queue is empty: no worker may create a trial beyond the budget."""


class StorageUnavailable(RuntimeError):
    """The study's database stayed unreachable through every back-off retry."""


class SharedStudyError(RuntimeError):
    """A study of that name exists but cannot be joined as asked (not shared, or another budget)."""


@dataclass(frozen=True)
class FaultPolicy:
    """How a worker handles faults (`sweep.*` keys of the same names).

    The first three are fixed by whoever creates the study and stored in it, so all its workers agree.
    """

    heartbeat_interval: int = 10
    grace_period: int = 30
    max_retry: int = 3
    storage_retries: int = 8
    storage_backoff_s: float = 1.0
    prepare_timeout_s: float = 30.0

    @classmethod
    def from_sweep(cls, sweep: dict) -> FaultPolicy:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in sweep.items() if k in names and v is not None})

    def delays(self) -> Iterator[float]:
        """Back-off before each reconnection try: 1, 2, 4 ... x storage_backoff_s, at most 30 s each."""
        for k in range(int(self.storage_retries)):
            yield min(float(self.storage_backoff_s) * 2 ** k, 30.0)


def safe_url(url: str) -> str:
    """The storage URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is reported as given (it has no parsable password)
        return url.split("@")[-1]


def is_outage(exc: BaseException | None) -> bool:
    """True when `exc` (or anything it was raised from) is a lost connection to the database or tracking server."""
    import requests
    import sqlalchemy.exc as sa

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sa.OperationalError | sa.InterfaceError | requests.ConnectionError | ConnectionError):
            return True
        if isinstance(exc, sa.DBAPIError) and exc.connection_invalidated:
            return True
        if type(exc).__module__.startswith("psycopg") and type(exc).__name__ in ("OperationalError",
                                                                                 "InterfaceError"):
            return True
        if type(exc).__name__ == "MlflowException" and ("API request to" in str(exc) or "500" in str(exc)[:200]):
            return True  # the MLflow client's own retries ran out (server down, or its database down)
        exc = exc.__cause__ or exc.__context__
    return False


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_seed(seed: int) -> int:
    """Each worker samples its own points (the same seed everywhere would propose the same first trials)."""
    return (int(seed) * 1_000_003 + zlib.crc32(worker_id().encode())) % 2 ** 31


class SharedStorage(RDBStorage):
    """RDBStorage that creates trials only from a template (the queue), beats through outages, beats at once,
    and fails trials that never beat."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._silent_since: dict[int, dict[int, float]] = {}  # study id -> trial id -> first seen without beat

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._create_new_trial(study_id, template_trial)._trial_id

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        # Optuna's cache calls this one. A template comes from enqueue_trial or a retry; none means study.ask()
        # found the queue empty, and a new trial would exceed the budget.
        if template_trial is None:
            raise BudgetSpent(f"study {study_id}: no queued trial left")
        return super()._create_new_trial(study_id, template_trial)

    def record_heartbeat(self, trial_id: int) -> None:
        # An exception here would end Optuna's heartbeat thread for good, and a live trial would go stale.
        try:
            super().record_heartbeat(trial_id)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("trial id %d: heartbeat not recorded (database unreachable), next in %s s", trial_id,
                        self.heartbeat_interval)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        # Optuna skips a RUNNING trial that never beat. A live worker beats as it pops (`set_trial_state_values`)
        # and again every `heartbeat_interval` s, so one still silent after `grace_period` s of this worker's
        # own clock (no clock shared with other hosts is needed) was popped by nobody alive: stale too.
        stale = super()._get_stale_trial_ids(study_id)
        now, before = time.monotonic(), self._silent_since.get(study_id, {})
        since = {tid: before.get(tid, now) for tid in self._never_beat(study_id)}
        self._silent_since[study_id] = since
        grace = self.grace_period or 2 * self.heartbeat_interval
        return stale + [tid for tid, t0 in since.items() if now - t0 > grace]

    def _never_beat(self, study_id: int) -> list[int]:
        with _create_scoped_session(self.scoped_session) as session:
            rows = (session.query(models.TrialModel.trial_id)
                    .outerjoin(models.TrialHeartbeatModel)
                    .filter(models.TrialModel.study_id == study_id, models.TrialModel.state == TrialState.RUNNING,
                            models.TrialHeartbeatModel.trial_heartbeat_id.is_(None)).all())
        return [tid for (tid,) in rows]

    def set_trial_state_values(self, trial_id: int, state: TrialState, values=None) -> bool:
        changed = super().set_trial_state_values(trial_id, state=state, values=values)
        if changed and state == TrialState.RUNNING:
            # A trial without any heartbeat row is never found stale: beat before the heartbeat thread starts.
            self.record_heartbeat(trial_id)
        return changed


def _trial_run(client, study: optuna.Study, trial: FrozenTrial, exp_id: str):
    """The trial's MLflow run: the one its attribute names (a retry inherits its original's: check the tag), else
    the one tagged with its study and number, else None (the trial failed before its run was created)."""
    run_id = trial.user_attrs.get(RUN_ATTR)
    if run_id:
        run = client.get_run(run_id)
        if run.data.tags.get("optuna_trial") == str(trial.number):
            return run
    found = client.search_runs([exp_id], f"tags.optuna_study = '{study.study_name}' and "
                                         f"tags.optuna_trial = '{trial.number}'", max_results=1)
    return found[0] if found else None


def close_trial_run(study: optuna.Study, trial: FrozenTrial) -> None:
    """End the failed trial's MLflow run FAILED (tag trial_state=FAIL), creating one if the trial failed before
    its run existed, so that every trial has exactly one run. Never raises: tracking may be down too (the next
    worker start reconciles, `reconcile_runs`)."""
    parent = (settings(study) or {}).get("mlflow_run_id")
    if not parent:
        return
    try:
        from mlflow.tracking import MlflowClient
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

        client = MlflowClient()
        top = client.get_run(parent)
        run = _trial_run(client, study, trial, top.info.experiment_id)
        if run is None:
            name = f"{top.info.run_name.removesuffix('/study')}/trial-{trial.number}"
            run = client.create_run(top.info.experiment_id, run_name=name, tags={
                "run_kind": "trial", "optuna_study": study.study_name, "optuna_trial": str(trial.number),
                "worker": trial.user_attrs.get(WORKER_ATTR, "?"), MLFLOW_PARENT_RUN_ID: parent,
                MLFLOW_RUN_NAME: name, "mlflow.note.content": "failed before its run could start"})
        if run.info.status != "FAILED":
            client.set_tag(run.info.run_id, "trial_state", "FAIL")
            client.set_terminated(run.info.run_id, "FAILED")
    except Exception as exc:  # noqa: BLE001 - reconciled by the next start (reconcile_runs)
        log.warning("trial %d: its MLflow run could not be closed (%s); the next worker start closes it",
                    trial.number, exc)


class StaleTrialHandler:
    """Called by Optuna for each heartbeat-stale trial: re-queue it (same parameters), close its MLflow run."""

    def __init__(self, max_retry: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            self.retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.requeue(study, trial, "stopped sending heartbeats")

    def requeue(self, study: optuna.Study, trial: FrozenTrial, why: str) -> None:
        tries = len(trial.system_attrs.get("retry_history", []))
        log.warning("study %s: trial %d (worker %s) %s: FAIL, %s", study.study_name, trial.number,
                    trial.user_attrs.get(WORKER_ATTR, "?"), why,
                    "re-queued with the same parameters" if tries < self.max_retry else
                    f"not re-queued (already retried {tries} times)")
        self.retry(study, trial)
        close_trial_run(study, trial)


def open_storage(url: str, heartbeat_interval: int, grace_period: int, max_retry: int) -> SharedStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return SharedStorage(url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=int(heartbeat_interval),
                             grace_period=int(grace_period),
                             heartbeat_stale_trial_callback=StaleTrialHandler(int(max_retry)))


def _load(name: str, url: str, seed: int, settings: dict) -> optuna.Study:
    storage = open_storage(url, settings["heartbeat_interval"], settings["grace_period"], settings["max_retry"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=worker_seed(seed), constant_liar=True)
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner())


def pruner() -> optuna.pruners.BasePruner:
    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0)


def settings(study: optuna.Study) -> dict | None:
    """The shared study's settings, or None for a plain (one-process) study."""
    return study.user_attrs.get(SHARED_ATTR)


def open_if_shared(name: str, url: str, seed: int) -> optuna.Study | None:
    """The study `name` joined as a shared study if it is one, else None (absent, or a plain study)."""
    probe = RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    try:
        try:
            study_id = probe.get_study_id_from_name(name)
        except KeyError:
            return None
        found = probe.get_study_user_attrs(study_id).get(SHARED_ATTR)
    finally:
        probe.engine.dispose()
    return _load(name, url, seed, found) if found else None


def join(name: str, url: str, seed: int, budget: int, warm: dict | None, policy: FaultPolicy,
         on_create: Callable[[], dict] | None = None) -> optuna.Study:
    """Create the shared study with its queue of `budget` trials, or join the existing one of that name.

    Exactly one process wins the creation (the study name is unique in the database); it enqueues the budget,
    then publishes the settings (plus whatever `on_create()` returns, e.g. the MLflow parent run). The others
    wait up to `policy.prepare_timeout_s` for the settings to appear.
    """
    storage = open_storage(url, policy.heartbeat_interval, policy.grace_period, policy.max_retry)
    try:
        study = optuna.create_study(study_name=name, storage=storage, direction="minimize", pruner=pruner(),
                                    sampler=optuna.samplers.TPESampler(seed=worker_seed(seed)))
    except DuplicatedStudyError:
        storage.engine.dispose()
        return _join_existing(name, url, seed, budget, policy)
    if warm:
        study.enqueue_trial(dict(warm))
    for _ in range(budget - (1 if warm else 0)):
        study.enqueue_trial({})
    found = {"budget": int(budget), "heartbeat_interval": int(policy.heartbeat_interval),
             "grace_period": int(policy.grace_period), "max_retry": int(policy.max_retry),
             **((on_create or dict)())}
    study.set_user_attr(SHARED_ATTR, found)
    log.info("study %s created in %s: %d queued trials, heartbeat %d s, grace %d s, max %d retries", name,
             safe_url(url), budget, policy.heartbeat_interval, policy.grace_period, policy.max_retry)
    storage.engine.dispose()
    return _load(name, url, seed, found)


def _join_existing(name: str, url: str, seed: int, budget: int, policy: FaultPolicy) -> optuna.Study:
    deadline = time.monotonic() + float(policy.prepare_timeout_s)
    while True:
        study = open_if_shared(name, url, seed)
        if study is not None:
            break
        if time.monotonic() > deadline:
            raise SharedStudyError(
                f"study {name!r} in {safe_url(url)} exists but is not a shared study (no {SHARED_ATTR!r} "
                f"attribute after {policy.prepare_timeout_s:.0f} s): a plain `python -m src.train` run made it, or the "
                f"worker creating it died before publishing its queue. "
                f"Delete it (optuna delete-study --study-name {name} --storage <url>) or set another "
                f"sweep.study_prefix")
        time.sleep(0.2)
    check_budget(study, budget)
    reconcile_runs(study)
    return study


def check_budget(study: optuna.Study, budget: int) -> None:
    have = int(settings(study)["budget"])
    if have != int(budget):
        raise SharedStudyError(f"study {study.study_name!r} was created for {have} trials, this run asks {budget}: "
                               f"keep the model's n_trials, or delete the study (optuna delete-study) or set "
                               f"another sweep.study_prefix to start over")


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state, plus `retried` (trials that re-run a failed one)."""
    trials = study.get_trials(deepcopy=False)
    out = Counter(t.state.name for t in trials)
    out["retried"] = sum(1 for t in trials if "failed_trial" in t.system_attrs)
    return {k: int(out.get(k, 0)) for k in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING", "retried")}


def reconcile_runs(study: optuna.Study) -> None:
    """Close FAILED the MLflow runs still open of trials that Optuna failed (closing failed at the time)."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        close_trial_run(study, t)


class _Flight:
    """The trial this worker is running, and how its objective ended (for recovery after an exception)."""

    def __init__(self, objective: Callable[[optuna.Trial], float]) -> None:
        self.objective = objective
        self.number: int | None = None
        self.error: BaseException | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        self.number, self.error = trial.number, None
        try:
            return self.objective(trial)
        except optuna.TrialPruned:
            raise
        except BaseException as exc:
            self.error = exc
            raise

    def done(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.number, self.error = None, None


def _trial(study: optuna.Study, number: int) -> FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def _await_storage(study: optuna.Study, policy: FaultPolicy, exc: BaseException) -> None:
    waited = 0.0
    for k, delay in enumerate(policy.delays(), 1):
        log.warning("study %s: database unreachable (%s); retry %d/%d in %.1f s", study.study_name,
                    type(exc).__name__, k, policy.storage_retries, delay)
        time.sleep(delay)
        waited += delay
        try:
            _ = study.user_attrs  # one round trip to the database
            log.warning("study %s: database reachable again after %.1f s", study.study_name, waited)
            return
        except Exception as again:  # noqa: BLE001 - any failure here is the outage going on
            exc = again
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    raise StorageUnavailable(
        f"the database of Optuna study {study.study_name!r} stayed unreachable for {waited:.0f} s "
        f"({policy.storage_retries} tries; last error {type(exc).__name__}: {first}). Its finished trials are "
        f"kept: start the worker again once the database is up and it resumes the study") from exc


def _recover(study: optuna.Study, number: int, max_retry: int, why: str) -> None:
    """After an outage or a lost tell: the trial this worker was running is failed and re-queued (once)."""
    trial = _trial(study, number)
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return
    if trial.state == TrialState.RUNNING:
        trial = study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    retried = any(number in t.system_attrs.get("retry_history", []) for t in study.get_trials(deepcopy=False))
    if trial.state == TrialState.FAIL and not retried:
        StaleTrialHandler(max_retry).requeue(study, trial, why)
    else:
        log.warning("study %s: trial %d was failed by another worker (no heartbeat for its grace period) while "
                    "this one ran it; its result is discarded, its retry runs it again", study.study_name, number)
        close_trial_run(study, trial)


def run_queue(study: optuna.Study, objective: Callable[[optuna.Trial], float], policy: FaultPolicy,
              drain: bool = True) -> dict:
    """Run queued trials until the queue is empty; returns `counts(study)`.

    drain: then wait (polling every second at most) until no trial runs anywhere, so that a trial of a worker that
    dies now is failed and retried here; without it, return as soon as the queue is empty (a worker moves on to its
    next study and drains them all at the end). An error of the objective itself (a bug, not an outage) is raised:
    its trial is FAIL and not retried.
    """
    flight = _Flight(objective)
    found = settings(study)
    interval, max_retry = float(found["heartbeat_interval"]), int(found["max_retry"])
    while True:
        try:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ExperimentalWarning)
                    study.optimize(flight, callbacks=[flight.done], catch=(), show_progress_bar=False)
            except BudgetSpent:
                pass
            now = counts(study)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (src.train.worker): re-queue the trial now, then stop
            if flight.number is not None:
                _recover(study, flight.number, max_retry, "was interrupted")
            raise
        except Exception as exc:
            if flight.error is not None and not is_outage(flight.error):
                raise
            if is_outage(exc) or flight.error is not None:
                _await_storage(study, policy, exc)
            elif flight.number is None or _trial(study, flight.number).state != TrialState.FAIL:
                raise  # not an outage, and the trial was not failed under us: a real error
            if flight.number is not None:
                _recover(study, flight.number, max_retry, "lost its database or tracking connection")
            flight.number, flight.error = None, None
            continue
        if now["WAITING"] == 0 and (now["RUNNING"] == 0 or not drain):
            return now
        if now["WAITING"] == 0:
            time.sleep(min(interval, 1.0))
