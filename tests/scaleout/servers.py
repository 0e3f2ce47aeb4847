"""Throwaway servers on 127.0.0.1 for the scale-out tests and benchmark: PostgreSQL (initdb + pg_ctl in a temp
folder) and an `mlflow server` process on it.

PostgreSQL refuses to run as root (initdb: "cannot be run as root"). As root the server runs as an unprivileged
system user (`postgres`, which Debian's package creates, else `nobody`) through Popen's user/group switch; its
data folder is a fresh `mkdtemp` folder under /tmp owned by that user. As anyone else it runs as that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from src.serve.processes import stop_process_group

DB_USER = "cnnperf"


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child process: this interpreter's bin folder first on PATH (mlflow starts uvicorn by name),
    and none of MLflow's process-wide URIs that an earlier test of the session may have exported."""
    bin_dir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME",
                        "MLFLOW_RUN_ID")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bindir() -> Path | None:
    """Folder of initdb/pg_ctl/postgres: PATH, then Debian's /usr/lib/postgresql/<newest>/bin, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
                      if Path(p).parts[-3].isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def run_as() -> str | None:
    """The unprivileged account to run PostgreSQL as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


def missing_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None."""
    if pg_bindir() is None:
        return ("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH nor in /usr/lib/postgresql/*/bin: "
                "install Debian's `postgresql` package (.ci/run does) to run the scale-out tests")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install -e '.[dev]'"
    return None


class PgServer:
    """One PostgreSQL cluster in a temp folder, listening on 127.0.0.1:<port> only, trust auth for `cnnperf`."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        if self.bindir is None:
            raise RuntimeError(missing_reason())
        self.user = run_as()
        self.root = Path(tempfile.mkdtemp(prefix="cnnperf-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self._pg("initdb", "-D", str(self.data), "-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-locale",
                 "--no-sync")

    def _pg(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        kw = {}
        if self.user:
            pw = pwd.getpwnam(self.user)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        out = subprocess.run([str(self.bindir / tool), *args], capture_output=True, text=True, timeout=timeout,
                             cwd=self.root, env={**os.environ, "LC_ALL": "C"}, **kw)
        if out.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}\n"
                               f"{tail}")
        return out

    def _ctl(self, action: str) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._pg("pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-m", "fast",
                 "-o", opts)

    def start(self) -> PgServer:
        self._ctl("start")
        return self

    def stop(self) -> None:
        self._pg("pg_ctl", "stop", "-D", str(self.data), "-w", "-t", "60", "-m", "fast")

    def restart(self) -> None:
        """Fast restart: every open connection is cut, as in a server crash or failover."""
        self._ctl("restart")

    def running(self) -> bool:
        if not (self.data / "postmaster.pid").exists():
            return False
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def url(self, db: str, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://{DB_USER}@127.0.0.1:{self.port}/{db}"

    def createdb(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={DB_USER} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        try:
            if self.running():
                self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a database backend and proxied artifacts, in its own process group."""

    def __init__(self, backend_uri: str, artifacts: Path, workers: int = 2) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        artifacts.mkdir(parents=True, exist_ok=True)
        self.log_path = artifacts.parent / f"mlflow-server-{self.port}.log"
        bin_dir = Path(sys.executable).parent
        env = child_env()
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(bin_dir / "mlflow"), "server", "--backend-store-uri", backend_uri, "--artifacts-destination",
             artifacts.as_uri(), "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers),
             "--uvicorn-opts", "--timeout-graceful-shutdown 2"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def wait_ready(self, timeout: float = 120) -> MlflowServer:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not come up:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM the group (server, uvicorn workers, job consumers), SIGKILL what is left after 8 s."""
        stop_process_group(self.proc, grace_s=8.0)
        self._log.close()
