"""src.train.shared on a SQLite file (one process): the budget queue, retries after outages, stale trials, joining.

The same code on a real PostgreSQL server with several worker processes: tests/scaleout (concurrency needs its row
locks: SQLite has none, two workers on it can pop the same trial).
"""

from __future__ import annotations

import optuna
import pytest
import requests
import sqlalchemy.exc

from src.train import shared
from src.train.tuning import create_study

POLICY = shared.FaultPolicy(heartbeat_interval=1, grace_period=2, max_retry=2, storage_retries=2,
                            storage_backoff_s=0.01, prepare_timeout_s=1)


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def objective(trial: optuna.Trial) -> float:
    return trial.suggest_float("x", 0.0, 1.0) ** 2


def test_join_queues_exactly_the_budget_warm_start_first(url):
    study = shared.join("s", url, 0, 5, {"x": 0.5}, POLICY, on_create=lambda: {"mlflow_run_id": None})
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.number for t in waiting] == [0, 1, 2, 3, 4]
    assert waiting[0].system_attrs["fixed_params"] == {"x": 0.5}
    assert shared.settings(study) == {"budget": 5, "heartbeat_interval": 1, "grace_period": 2, "max_retry": 2,
                                      "mlflow_run_id": None}
    # A second worker joins the same study: nothing enqueued twice.
    again = shared.join("s", url, 0, 5, None, POLICY)
    assert len(again.trials) == 5
    with pytest.raises(shared.SharedStudyError, match="created for 5 trials, this run asks 7"):
        shared.join("s", url, 0, 7, None, POLICY)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_no_trial_beyond_the_budget(url):
    study = shared.join("s", url, 0, 3, None, POLICY)
    assert shared.run_queue(study, objective, POLICY)["COMPLETE"] == 3
    with pytest.raises(shared.BudgetSpent):  # study.ask() may not create a 4th trial (Optuna's cache included)
        study.ask()
    assert len(study.trials) == 3


def test_plain_create_study_joins_a_shared_study_and_refuses_another_budget(url):
    shared.run_queue(shared.join("s", url, 0, 4, None, POLICY), objective, POLICY)
    joined = create_study("s", url, seed=0)  # what `python -m src.train` calls: the study is not replaced
    assert shared.settings(joined)["budget"] == 4 and len(joined.trials) == 4
    shared.check_budget(joined, 4)
    with pytest.raises(shared.SharedStudyError):
        shared.check_budget(joined, 6)
    plain = create_study("p", url, seed=0)
    assert shared.settings(plain) is None


def test_a_plain_study_of_the_same_name_is_not_joined(url):
    create_study("p", url, seed=0).optimize(objective, n_trials=1)
    with pytest.raises(shared.SharedStudyError, match="not a shared study"):
        shared.join("p", url, 0, 3, None, POLICY)


def test_outage_inside_a_trial_fails_and_requeues_it(url):
    study = shared.join("s", url, 0, 4, None, POLICY)
    calls = []

    def flaky(trial: optuna.Trial) -> float:
        calls.append(trial.number)
        x = objective(trial)
        if len(calls) == 2:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionError("server closed the connection"))
        return x

    now = shared.run_queue(study, flaky, POLICY)
    assert now == {"COMPLETE": 4, "PRUNED": 0, "FAIL": 1, "RUNNING": 0, "WAITING": 0, "retried": 1}
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))[0]
    [retry] = [t for t in study.trials if t.system_attrs.get("failed_trial") == failed.number]
    assert retry.params == failed.params and retry.state.name == "COMPLETE"


def test_a_bug_in_the_objective_is_raised_not_retried(url):
    study = shared.join("s", url, 0, 3, None, POLICY)

    def broken(trial: optuna.Trial) -> float:
        raise ValueError("bad feature column")

    with pytest.raises(ValueError, match="bad feature column"):
        shared.run_queue(study, broken, POLICY)
    assert shared.counts(study)["retried"] == 0


def test_interrupt_requeues_the_running_trial(url):
    study = shared.join("s", url, 0, 3, None, POLICY)

    def interrupted(trial: optuna.Trial) -> float:
        raise KeyboardInterrupt("signal 15")

    with pytest.raises(KeyboardInterrupt):
        shared.run_queue(study, interrupted, POLICY)
    now = shared.counts(study)
    assert (now["FAIL"], now["retried"], now["WAITING"]) == (1, 1, 3)
    assert shared.run_queue(study, objective, POLICY)["COMPLETE"] == 3


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_trial_of_a_dead_worker_goes_stale_and_is_retried(url):
    study = shared.join("s", url, 0, 3, None, POLICY)
    dead = study.ask()  # popped and running, with a first heartbeat, and then never heard of again
    dead.suggest_float("x", 0.0, 1.0)
    now = shared.run_queue(study, objective, POLICY)  # waits out the grace period, fails it, runs its retry
    assert now == {"COMPLETE": 3, "PRUNED": 0, "FAIL": 1, "RUNNING": 0, "WAITING": 0, "retried": 1}
    assert study.trials[dead.number].state.name == "FAIL"


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_pop_whose_reply_was_lost_is_failed_and_retried(url):
    """A worker pops a trial, the database commits RUNNING, and the reply is lost (a restart in between): no worker
    runs it and it has no heartbeat row, which Optuna never finds stale. Unheld, every worker drained forever."""
    study = shared.join("s", url, 0, 3, None, POLICY)
    backend = study._storage._backend
    [orphan, *_] = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert optuna.storages.RDBStorage.set_trial_state_values(backend, orphan._trial_id,
                                                             optuna.trial.TrialState.RUNNING)
    now = shared.run_queue(study, objective, POLICY)
    assert now == {"COMPLETE": 3, "PRUNED": 0, "FAIL": 1, "RUNNING": 0, "WAITING": 0, "retried": 1}
    assert study.trials[orphan.number].state.name == "FAIL"
    [retry] = [t for t in study.trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert retry.state.name == "COMPLETE"


def test_storage_that_stays_down_stops_with_a_clear_message(url, monkeypatch):
    study = shared.join("s", url, 0, 2, None, POLICY)
    down = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionError("connection refused"))
    monkeypatch.setattr(optuna.Study, "user_attrs", property(lambda self: (_ for _ in ()).throw(down)))
    with pytest.raises(shared.StorageUnavailable, match="stayed unreachable .* start the worker again"):
        shared._await_storage(study, POLICY, down)


def test_is_outage():
    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("terminating connection"))
    try:
        try:
            raise lost
        except Exception as exc:
            raise optuna.exceptions.StorageInternalError("commit failed") from exc
    except Exception as wrapped:
        assert shared.is_outage(wrapped)
    assert shared.is_outage(requests.ConnectionError("refused"))
    assert not shared.is_outage(ValueError("bad column"))
    assert list(shared.FaultPolicy(storage_retries=4, storage_backoff_s=10).delays()) == [10, 20, 30, 30]
