import pytest

from tests.predict.realdata import overrides, processed_dir


@pytest.fixture(scope="session")
def real_overrides(tmp_path_factory) -> list[str]:
    tmp = tmp_path_factory.mktemp("real")
    return overrides(processed_dir(tmp), tmp)


@pytest.fixture(scope="session")
def holdout_model(real_overrides):
    """A small real model (Decision Tree on 4000 rows of the real table, densenet family excluded), logged with
    the serving pyfunc into a temp MLflow store and registered as cnnperf-holdout-densenet@champion."""
    import mlflow

    from src.predict.holdout import fit_holdout

    res = fit_holdout(["densenet"], "dt", max_rows=8000, overrides=real_overrides)
    res["tracking_uri"] = mlflow.get_tracking_uri()
    return res
