from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MIRROR = (REPO / ".." / "shared" / "data" / "raw").resolve()


@pytest.fixture(scope="session")
def mirror() -> Path:
    if not MIRROR.is_dir():
        pytest.fail(f"the raw data mirror {MIRROR} is missing: clone the project with ../shared beside it")
    return MIRROR
