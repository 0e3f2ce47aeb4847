"""Optuna workers on a real PostgreSQL server, tracked by a real `mlflow server`: concurrency, SIGKILL, restarts.

Every test runs `python -m src.train.worker` processes on one shared study (dt, tiny data, 1 s heartbeats, 3 s
grace) and counts what the study and the tracking server hold afterwards: exactly the budget of finished trials,
no trial number twice, one MLflow run per trial, every failed trial retried.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import optuna
from mlflow.tracking import MlflowClient

from tests.scaleout.workers import start_worker, studies, tally, wait_all


def logs(tmp_path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(tmp_path.glob("*.log")))


def trial_runs(tracking_url: str, study_name: str) -> list:
    client = MlflowClient(tracking_url)
    exp = client.get_experiment_by_name("cnnperf")
    return client.search_runs([exp.experiment_id], f"tags.optuna_study = '{study_name}' and tags.run_kind = 'trial'",
                              max_results=1000)


def finished(storage, prefix: str) -> int:
    found = studies(storage, prefix)
    return tally(found[0])["completed"] if found else 0


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def check_runs(tracking_url: str, study: optuna.Study) -> Counter:
    """One MLflow run per trial, closed with the trial's state (FAILED for a failed trial); returns statuses."""
    runs = trial_runs(tracking_url, study.study_name)
    per_number = Counter(int(r.data.tags["optuna_trial"]) for r in runs)
    trials = study.get_trials(deepcopy=False)
    assert per_number == Counter(t.number for t in trials), "each trial has exactly one MLflow run"
    by_number = {int(r.data.tags["optuna_trial"]): r for r in runs}
    want = {"COMPLETE": ("FINISHED", "COMPLETE"), "PRUNED": ("FINISHED", "PRUNED"), "FAIL": ("FAILED", "FAIL")}
    for t in trials:
        run = by_number[t.number]
        assert (run.info.status, run.data.tags.get("trial_state")) == want[t.state.name], t.number
        if t.state.name != "FAIL":  # a finished trial names its run
            assert t.user_attrs["mlflow_run_id"] == run.info.run_id
    return Counter(r.info.status for r in runs)


def test_four_workers_run_exactly_the_budget(four_workers, tracking):
    ov, found, codes, folder = four_workers
    assert codes == [0, 0, 0, 0], logs(folder)
    [study] = found
    print(f"\n[scaleout] 4 workers: {tally(study)}, workers that ran trials: "
          f"{len({t.user_attrs['worker'] for t in study.trials})}")
    assert tally(study) == {"requested": 16, "completed": 16, "failed": 0, "retried": 0, "running": 0,
                            "duplicated": 0}
    assert sorted(t.number for t in study.trials) == list(range(16))
    assert len({t.user_attrs["worker"] for t in study.trials}) >= 2, "the workers shared the study"
    assert check_runs(tracking.url, study) == Counter({"FINISHED": 16})
    # The study's own MLflow run was finished by the worker that saw the budget spent.
    parent = MlflowClient(tracking.url).get_run(study.user_attrs["cnnperf:shared"]["mlflow_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_complete"] + \
        parent.data.metrics["trials_pruned"] == 16


def freeze_in_trial(proc, storage, prefix: str, timeout: float = 90, while_frozen=None) -> int:
    """SIGSTOP `proc` inside a trial (RUNNING, its MLflow run open, parameters suggested), SIGKILL it; the number.

    Stopped between trials, it is resumed and tried again a moment later: the kill always lands mid-trial.
    `while_frozen` runs while it is stopped inside the trial, before the kill (e.g. starting the other workers,
    so that on a loaded machine they cannot finish the whole budget before the victim reaches a trial).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"worker exited ({proc.returncode}) before it could be killed mid-trial")
        os.kill(proc.pid, signal.SIGSTOP)
        found = studies(storage, prefix)
        mine = [t for t in (found[0].get_trials(deepcopy=False) if found else [])
                if t.state.name == "RUNNING" and t.user_attrs.get("worker", "").endswith(f":{proc.pid}")
                and "mlflow_run_id" in t.user_attrs and t.params]
        if mine:
            if while_frozen is not None:
                while_frozen()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return mine[0].number
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the worker was never caught inside a trial")


def test_sigkill_mid_trial_is_failed_and_retried(cluster, storage, tracking, tmp_path):
    ov = cluster("kill", 14)
    victim = start_worker(ov, tmp_path / "victim.log")
    others: list = []
    # The others start while the victim is frozen inside its first trial: started together, on a loaded machine
    # they could run all 14 trials before the victim reached one (it then exits 0 and cannot be killed mid-trial).
    killed = freeze_in_trial(victim, storage, "kill", while_frozen=lambda: others.extend(
        start_worker(ov, tmp_path / f"worker{i}.log") for i in range(2)))
    assert wait_all(others) == [0, 0], logs(tmp_path)
    assert victim.returncode == -signal.SIGKILL
    [study] = studies(storage, "kill")
    print(f"\n[scaleout] SIGKILL of 1 of 3 workers: {tally(study)}")
    assert tally(study) == {"requested": 14, "completed": 14, "failed": 1, "retried": 1, "running": 0,
                            "duplicated": 0}
    by_number = {t.number: t for t in study.trials}
    assert by_number[killed].state.name == "FAIL"
    [retry] = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed]
    assert retry.state.name in ("COMPLETE", "PRUNED")
    assert by_number[killed].params.items() <= retry.params.items()  # the retry reuses what was suggested
    assert check_runs(tracking.url, study) == Counter({"FINISHED": 14, "FAILED": 1})


def test_database_restart_during_sweep_is_survived(cluster, pg, storage, tracking, tmp_path):
    ov = cluster("restart", 20)
    procs = [start_worker(ov, tmp_path / f"worker{i}.log") for i in range(2)]
    wait_for(lambda: finished(storage, "restart") >= 6, 120, "six finished trials")
    pg.restart()
    codes = wait_all(procs)
    text = logs(tmp_path)
    assert set(codes) <= {0, 3}, text
    assert all("stayed unreachable" in (tmp_path / f"worker{i}.log").read_text() for i, c in enumerate(codes)
               if c == 3)
    if finished(storage, "restart") < 20:  # a worker gave up: the next start resumes the study
        assert wait_all([start_worker(ov, tmp_path / "resume.log")]) == [0], logs(tmp_path)
    [study] = studies(storage, "restart")
    t = tally(study)
    print(f"\n[scaleout] PostgreSQL restart under 2 workers: {t}, exit codes {codes}")
    assert (t["requested"], t["completed"], t["running"], t["duplicated"]) == (20, 20, 0, 0), t
    assert t["failed"] == t["retried"], t  # every trial that failed in the restart ran again
    check_runs(tracking.url, study)


def test_database_down_stops_worker_clearly_and_next_start_resumes(cluster, pg, storage, tracking, tmp_path):
    ov = cluster("down", 16, storage_retries=2, storage_backoff_s=0.5)
    fast_fail = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
    worker = start_worker(ov, tmp_path / "worker.log", env=fast_fail)
    wait_for(lambda: finished(storage, "down") >= 4, 120, "four finished trials")
    pg.stop()
    try:
        code = worker.wait(timeout=120)
    finally:
        pg.start()
    text = (tmp_path / "worker.log").read_text()
    assert code == 3, text
    assert "stayed unreachable" in text and "start the worker again" in text, text[-2000:]
    assert wait_all([start_worker(ov, tmp_path / "resume.log")]) == [0], logs(tmp_path)
    [study] = studies(storage, "down")
    t = tally(study)
    print(f"\n[scaleout] PostgreSQL down past the retries, then a new start: {t}, first exit code {code}")
    assert (t["requested"], t["completed"], t["running"], t["duplicated"]) == (16, 16, 0, 0), t
    assert t["failed"] == t["retried"], t
    check_runs(tracking.url, study)
