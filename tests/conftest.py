"""How `pytest -n 2` (pytest-xdist; the README's test command) shares the tests among its workers.

A test folder with its own conftest.py shares session fixtures among its files (a trained store, a running
`mlflow models serve`, a PostgreSQL server): its tests go to one worker, which builds them once. Elsewhere each
file goes to one worker, so its module fixtures are built once too.

Why a scheduler and not `xdist_group` marks with `--dist loadgroup`: xdist 3.8 appends the group to `item._nodeid`,
which pytest 9's `nodeid` (read from `item._id`) no longer returns, so the marks are ignored and a folder's session
fixtures were built on both workers (measured: the serving store and the DVC audit twice, ~130-220 s each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def worker_group(nodeid: str) -> str:
    """The folder (relative to the repo) of a test whose folder has a conftest.py, else its file."""
    file = Path(nodeid.split("::", 1)[0])
    folder = TESTS.parent / file.parent
    if folder != TESTS and folder.is_relative_to(TESTS) and (folder / "conftest.py").exists():
        return file.parent.as_posix()
    return file.as_posix()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "load":  # an explicit --dist choice is kept
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return GroupScheduling(config, log)
