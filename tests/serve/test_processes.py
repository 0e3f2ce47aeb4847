"""stop_process_group: the leader and its children are gone, also when the leader ignores SIGTERM."""

import os
import subprocess
import sys
import time

import pytest

from src.serve.processes import stop_process_group

# A leader that starts a child in its group and prints the child's pid; `ignore` makes both ignore SIGTERM.
LEADER = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                          "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                          "time.sleep(120)", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped by init) counts as gone
        return f.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("mode", ["obey", "ignore"])
def test_leader_and_children_are_stopped(mode):
    proc = subprocess.Popen([sys.executable, "-c", LEADER, mode], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = int(proc.stdout.readline())
    assert _alive(child)
    t0 = time.monotonic()
    stop_process_group(proc, grace_s=1.0, children_s=5.0)
    assert proc.returncode is not None and not _alive(child)
    assert time.monotonic() - t0 < 8.0
    proc.stdout.close()
    stop_process_group(proc, grace_s=1.0, children_s=1.0)  # a second stop of a gone group is harmless
