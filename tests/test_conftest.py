"""tests/conftest.py's worker groups: a folder with shared session fixtures stays on one pytest-xdist worker."""

from tests.conftest import worker_group


def test_a_folder_with_a_conftest_is_one_group():
    # tests/serve/conftest.py holds the trained store and the running server all its files share
    assert worker_group("tests/serve/test_load.py::test_concurrent_valid_and_malformed_requests") == "tests/serve"
    assert worker_group("tests/serve/test_api.py::test_x[a-b]") == "tests/serve"
    assert worker_group("tests/scaleout/test_workers.py::test_y") == "tests/scaleout"


def test_elsewhere_each_file_is_a_group():
    assert worker_group("tests/train/test_train_e2e.py::test_logged_metric_names_and_tags") == \
        "tests/train/test_train_e2e.py"
    assert worker_group("tests/test_dvc_stages.py::test_stage_reads_and_writes_are_declared[ingest]") == \
        "tests/test_dvc_stages.py"
    # a parameter that looks like a path does not change the group
    assert worker_group("tests/train/test_fit.py::test_z[tests/serve/x]") == "tests/train/test_fit.py"
