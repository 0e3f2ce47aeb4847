"""The MLflow tracking server on PostgreSQL end to end: the four workers' study is finished by `python -m src.train`
(no trial added), the runs and metrics land on the server, `python -m src.register` sets `champion` there,
`python -m src.predict calibrate` puts the champion's calibration into its model folder through the server's
artifact proxy, and `mlflow models serve -m models:/cnnperf-dt@champion` serves predictions (with their
intervals) fetched through it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import requests
from mlflow.tracking import MlflowClient

from src.config import REPO_ROOT
from src.serve.processes import stop_process_group
from tests.scaleout.servers import child_env, free_port
from tests.scaleout.workers import studies, tally
from tests.serve.test_serve import VALID


def run_module(module: str, overrides: list[str], log, **env: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", module, *overrides], cwd=REPO_ROOT, env=child_env(**env),
                         capture_output=True, text=True, timeout=300)
    log.write_text(out.stdout + out.stderr)
    assert out.returncode == 0, f"{module} failed:\n{(out.stdout + out.stderr)[-4000:]}"
    return out


def serve(model_uri: str, tracking_url: str, log_path):
    """`mlflow models serve` of a registry URI resolved through the tracking server; yields its base URL."""
    port = free_port()
    env = child_env(MLFLOW_TRACKING_URI=tracking_url, MLFLOW_REGISTRY_URI=tracking_url)
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "--env-manager",
                             "local", "-h", "127.0.0.1", "-p", str(port)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}", log


def test_tracking_server_holds_runs_registry_and_serves(four_workers, storage, tracking, tiny, tmp_path):
    ov, [study], codes, _ = four_workers
    assert codes == [0, 0, 0, 0]
    run_module("src.train", ["model=dt", *ov], tmp_path / "train.log")
    # The finishing run joined the finished study: not one trial more.
    [again] = studies(storage, "four")
    assert tally(again)["completed"] == 16 and len(again.trials) == 16

    # The registry URI too: an earlier test of the session may have set MLflow's process-wide one elsewhere.
    client = MlflowClient(tracking.url, registry_uri=tracking.url)
    exp = client.get_experiment_by_name("cnnperf")
    [run] = client.search_runs([exp.experiment_id], f"tags.optuna_study = '{study.study_name}' and "
                                                    "tags.run_kind = 'study'")
    assert run.info.status == "FINISHED" and run.data.tags["model"] == "dt"
    assert {"mape", "r2", "cv_mape"} <= set(run.data.metrics)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # artifacts go through the server
    assert "report" in {f.path for f in client.list_artifacts(run.info.run_id)} and run.data.tags["model_uri"]

    from src.evaluate.__main__ import collect

    table, _ = collect(tiny[0] / "reports", ("dt",))
    (tmp_path / "metrics.json").write_text(json.dumps(table))
    run_module("src.register", [*ov, f"register.metrics={tmp_path / 'metrics.json'}", "register.allow_dirty=true"],
               tmp_path / "register.log")
    version = client.get_model_version_by_alias("cnnperf-dt", "champion")
    assert version.run_id == run.info.run_id
    # the pipeline's calibrate stage, against the server: the calibration travels through its artifact proxy
    out = run_module("src.predict", ["calibrate", "--model-uri", "models:/cnnperf-dt@champion", "--k", "2", "--kinds",
                                     "row", "--out", str(tmp_path), *ov], tmp_path / "calibrate.log",
                     MLFLOW_TRACKING_URI=tracking.url)
    assert "added to the served model" in out.stdout  # the served answer below shows it arrived

    proc, url, log = serve("models:/cnnperf-dt@champion", tracking.url, tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 150
        while True:
            try:
                if requests.get(f"{url}/ping", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            log.seek(0)
            assert proc.poll() is None, f"server exited:\n{log.read()[-3000:]}"
            assert time.monotonic() < deadline, "mlflow models serve did not answer /ping in 150 s"
            time.sleep(0.5)
        r = requests.post(f"{url}/invocations", json={"dataframe_records": [VALID]}, timeout=60)
        assert r.status_code == 200, r.text
        [answer] = r.json()["predictions"]
        assert answer["latency_ms"] > 0 and answer["interval_kind"] in ("cnn", "gpu_cnn")  # VALID names no CNN
        assert answer["latency_ms_lo_90"] < answer["latency_ms"] < answer["latency_ms_hi_90"]
    finally:
        stop_process_group(proc)
        log.close()
