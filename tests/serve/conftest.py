"""One trained tiny store and one real server (2 uvicorn workers) shared by the serving tests of a session."""

import pytest

from tests.serve.server import start, stop
from tests.train.tiny import trained_store


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> dict:
    # the served run is the random protocol's; the grouped protocols would only add training time here
    return trained_store(tmp_path_factory.mktemp("serve"), protocols="[random]")


@pytest.fixture(scope="session")
def server(store, tmp_path_factory):
    proc, url = start("models:/cnnperf-dt@champion", store["cfg"]["mlflow"]["tracking_uri"],
                      tmp_path_factory.mktemp("serve-log") / "server.log", workers=2)
    try:
        yield url
    finally:
        stop(proc)
