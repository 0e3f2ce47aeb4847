"""Stopping a server started in its own session: `mlflow models serve` and `mlflow server` run uvicorn workers and
job consumers as children, so stopping only the leader leaves them holding the port and the store."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def stop_process_group(proc: subprocess.Popen, grace_s: float = 20.0, children_s: float = 10.0) -> None:
    """SIGTERM the process group `proc` leads (started with `start_new_session=True`), SIGKILL it after `grace_s`
    seconds, then wait up to `children_s` seconds for every member of the group to exit (SIGKILL what is left)."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(timeout=children_s)
    deadline = time.monotonic() + children_s
    while time.monotonic() < deadline:
        if not _signal_group(proc.pid, 0):
            return
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True
