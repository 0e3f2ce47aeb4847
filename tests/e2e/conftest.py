import pytest

from tests.predict.realdata import overrides, processed_dir


@pytest.fixture(scope="session")
def real_overrides(tmp_path_factory) -> list[str]:
    tmp = tmp_path_factory.mktemp("real")
    return overrides(processed_dir(tmp), tmp)
