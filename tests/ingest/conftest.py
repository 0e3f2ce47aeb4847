from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MIRROR = (REPO / ".." / "shared" / "data" / "raw").resolve()


@pytest.fixture(scope="session")
def mirror() -> Path:
    if not MIRROR.is_dir():
        pytest.fail(f"the raw data mirror {MIRROR} is missing: clone the project with ../shared beside it")
    return MIRROR


def copy_mirror_file(mirror: Path, tmp_path: Path, rel: str) -> Path:
    """A writable copy of one mirror file at the same relative path under tmp_path (for corrupt-copy tests)."""
    import shutil

    target = tmp_path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(mirror / rel, target)
    return target
