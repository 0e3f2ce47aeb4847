"""`mlflow models serve` on 127.0.0.1: a valid request and malformed ones; the server keeps serving."""

import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
import requests
from mlflow.exceptions import MlflowException

from src.features.served import validate_request
from tests.train.tiny import trained_store

VALID = {"gpu": "GeForce RTX 4090", "param_count_m": 25.56, "gmacs": 4.11, "activations_m": 11.11,
         "batch_size": 32, "img_size": 224, "precision": "amp_fp16", "mode": "inference"}
META = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
        "categorical_inputs": ["precision", "mode", "memory_layout", "compile_mode", "family"], "ptx_features": [],
        "open_categorical": ["family"],
        "categories": {"precision": ["amp_fp16", "fp32"], "mode": ["inference", "training"],
                       "memory_layout": ["nchw"], "compile_mode": ["eager"]}}


@pytest.mark.parametrize("change,message", [
    ({"gmacs": float("nan")}, "field 'gmacs' row 0: value is NaN"),
    ({"batch_size": -4}, "field 'batch_size' row 0: -4 is not > 0"),
    ({"batch_size": 2.5}, "field 'batch_size' row 0: 2.5 is not a whole number"),
    ({"gpu": "RTX 4090"}, "unknown GPU 'RTX 4090'; closest known: ['GeForce RTX 4090'"),
    ({"precision": "int8"}, "field 'precision' row 0: 'int8' is not one of ['amp_fp16', 'fp32']"),
    ({"gmacs": "many"}, "field 'gmacs' row 0: 'many' is not a number"),
])
def test_validate_request_messages(change, message):
    with pytest.raises(MlflowException, match=None) as err:
        validate_request(pd.DataFrame([{**VALID, **change}]), META, ["GeForce RTX 4090", "GeForce RTX 3090"])
    assert message in err.value.message
    assert err.value.get_http_status_code() == 400


def test_validate_request_defaults_and_case():
    out = validate_request(pd.DataFrame([{**VALID, "gpu": "geforce rtx 4090"}]), META, ["GeForce RTX 4090"])
    assert out.loc[0, "gpu"] == "GeForce RTX 4090" and out.loc[0, "memory_layout"] == "nchw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = trained_store(tmp_path_factory.mktemp("serve"))
    port = free_port()
    # mlflow starts `uvicorn` by name: the interpreter's bin folder must be on PATH even without an activated venv
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "MLFLOW_TRACKING_URI": store["cfg"]["mlflow"]["tracking_uri"],
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = open(tmp_path_factory.mktemp("serve-log") / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/cnnperf-dt@champion",
                             "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if requests.get(f"{url}/ping", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read()[-3000:]}")
            time.sleep(0.5)
        else:
            raise RuntimeError("server did not answer /ping within 120 s")
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def post(url, records):
    return requests.post(f"{url}/invocations", json={"dataframe_records": records}, timeout=30)


def test_serve_valid_then_malformed_then_valid(server):
    r = post(server, [VALID, {**VALID, "gpu": "GeForce RTX 3090", "precision": "fp32", "mode": "training"}])
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert len(preds) == 2 and all(p["latency_ms"] > 0 for p in preds)

    missing = {k: v for k, v in VALID.items() if k != "gmacs"}
    r = post(server, [missing])
    assert r.status_code == 400 and "missing inputs ['gmacs']" in r.json()["message"]

    r = post(server, [{**VALID, "gmacs": None}])
    assert r.status_code == 400 and "field 'gmacs' row 0: value is NaN" in r.json()["message"]

    r = post(server, [{**VALID, "batch_size": -8}])
    assert r.status_code == 400 and "field 'batch_size' row 0: -8 is not > 0" in r.json()["message"]

    r = post(server, [{**VALID, "gpu": "RTX 9999"}])
    assert r.status_code == 400 and "unknown GPU 'RTX 9999'" in r.json()["message"]

    r = post(server, [{**VALID, "img_size": "big"}])
    assert r.status_code == 400

    r = post(server, [VALID])
    assert r.status_code == 200 and r.json()["predictions"][0]["latency_ms"] == pytest.approx(preds[0]["latency_ms"])


def test_serve_answers_any_gpu_and_marks_extrapolation(server):
    """A GPU nobody measured (the tiny table has four) is answered, flagged, with the reason; so is a batch size
    beyond the training range. In-range rows say so."""
    r = post(server, [VALID, {**VALID, "gpu": "H100 SXM5 80 GB"}, {**VALID, "batch_size": 4096},
                      {**VALID, "model_key": "resnet50"}])
    assert r.status_code == 200, r.text
    known, h100, huge, named = r.json()["predictions"]
    assert known["in_training_range"] is True and known["extrapolation"] == ""
    assert h100["in_training_range"] is False and "GPU not in the training data" in h100["extrapolation"]
    assert "memory_bandwidth_gbs" in h100["extrapolation"]  # faster memory than any measured GPU
    assert h100["latency_ms"] > 0
    assert huge["in_training_range"] is False and "batch_size 4096 outside the training range" in huge["extrapolation"]
    assert named["latency_ms"] > 0 and named["in_training_range"] is True
