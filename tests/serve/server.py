"""Start and stop a real `mlflow models serve` on 127.0.0.1 for tests (free port, own process group)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from src.serve.processes import stop_process_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model_uri: str, tracking_uri: str, log_path: Path, workers: int = 2) -> tuple[subprocess.Popen, str]:
    """Serve `model_uri` with `workers` uvicorn workers; returns (process, base URL) once /ping answers."""
    port = free_port()
    # mlflow starts `uvicorn` by name: the interpreter's bin folder must be on PATH even without an activated venv
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = open(log_path, "w+")  # noqa: SIM115 - closed by stop()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "--env-manager",
                             "local", "-h", "127.0.0.1", "-p", str(port), "--workers", str(workers)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    for _ in range(360):
        try:
            if requests.get(f"{url}/ping", timeout=1).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        if proc.poll() is not None:
            log.seek(0)
            text = log.read()[-3000:]
            stop(proc)
            raise RuntimeError(f"server exited with {proc.returncode}:\n{text}")
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError("server did not answer /ping within 180 s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (uvicorn workers included), SIGKILL after 20 s; close its log."""
    stop_process_group(proc)
    log = getattr(proc, "log", None)
    if log is not None:
        log.close()
