"""jcjohnson/cnn-benchmarks: the real mirror files (JSON outputs, old README), and small corrupt copies."""

import json
import shutil
import statistics

import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.sources import jcjohnson
from src.ingest.validate import validate

TOP = "jcjohnson-cnn-benchmarks"
ONE_JSON = f"{TOP}/outputs/1080_cudnn50/533635.json"


@pytest.fixture(scope="module")
def parsed(mirror):
    files = {p.relative_to(mirror).as_posix(): p for p in (mirror / TOP).rglob("*") if p.is_file()}
    result = jcjohnson.parse(files, {rel: "83d441f85213" for rel in files})
    frame, rejected = validate(result.rows)
    return result, frame, rejected


def test_real_files_accounting_and_coverage(parsed):
    result, frame, rejected = parsed
    # 120 JSON outputs x (forward, forward+backward) + 57 rows of the old README's tables x 2.
    assert result.n_read == 2 * 120 + 2 * 57 == len(result.rows) + len(result.quarantine)
    assert not rejected and len(frame) == len(result.rows) == 290
    reasons = {q["reason"] for q in result.quarantine}
    assert reasons == {"summary of a run that outputs/ holds as JSON (re-run there; ingested from the JSON)"}
    per_gpu = frame[~frame["is_cpu"]].groupby("gpu").size().to_dict()
    assert per_gpu == {"GeForce GTX 1080": 74, "GeForce GTX 1080 Ti": 30, "GeForce GTX TITAN X": 78,
                       "TITAN X Pascal": 58, "Tesla K40c": 34}
    assert frame.loc[frame["is_cpu"], "gpu"].unique().tolist() == ["cpu:Dual Intel Xeon E5-2630 v3"]
    assert set(frame["model_key"]) == {"alexnet", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34",
                                       "resnet50", "resnet101", "resnet152", "resnet200"}
    assert set(frame["framework"]) == {"torch7"} and set(frame["batch_size"]) == {16}
    assert frame["measurement_id"].is_unique


def test_json_rows_are_medians_of_the_passes(parsed, mirror):
    _, frame, _ = parsed
    record = json.loads((mirror / ONE_JSON).read_text())
    rows = frame[frame["source_file"] == ONE_JSON].set_index("mode")
    forward = [t * 1000 for t in record["forward_times"]]
    step = [(f + b) * 1000 for f, b in zip(record["forward_times"], record["backward_times"], strict=True)]
    assert rows.loc["inference", "latency_ms"] == pytest.approx(statistics.median(forward))
    assert rows.loc["training", "latency_ms"] == pytest.approx(statistics.median(step))
    assert rows.loc["training", "n_samples"] == 10
    assert rows.loc["inference", "variant"].startswith("nn;" if record["cudnn_version"] == "none" else "cudnn ")


def test_k40c_rows_come_from_the_old_readme(parsed):
    _, frame, _ = parsed
    k40 = frame[(frame["gpu"] == "Tesla K40c") & (frame["model_key"] == "vgg16")].set_index(["variant", "mode"])
    # |Tesla K40c (cuDNN 5005)|265.77|654.44|920.21|  and  |Tesla K40c (nn)|340.79|890.22|1231.01|
    assert k40.loc[("cudnn 5.0.05; forward of a training-mode model (batch-norm batch statistics)", "inference"),
                   "latency_ms"] == 265.77
    assert k40.loc[("nn; forward + backward, no optimizer step", "training"), "latency_ms"] == 1231.01


def _copy_tree(mirror, tmp_path):
    shutil.copytree(mirror / TOP, tmp_path / TOP)
    return {p.relative_to(tmp_path).as_posix(): p for p in (tmp_path / TOP).rglob("*") if p.is_file()}


def test_bad_time_and_missing_field_are_quarantined(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    path = files[ONE_JSON]
    record = json.loads(path.read_text())
    record["backward_times"][3] = "abc"
    path.write_text(json.dumps(record))
    other = files[f"{TOP}/outputs/1080_cudnn50/234830.json"]
    broken = json.loads(other.read_text())
    del broken["opt"]
    other.write_text(json.dumps(broken))
    result = jcjohnson.parse(files, {})
    by_file = {}
    for q in result.quarantine:
        by_file.setdefault(q["source_file"], []).append(q["reason"])
    assert by_file[ONE_JSON] == ["non-positive or non-numeric time in backward_times: 'abc'"]
    assert by_file[f"{TOP}/outputs/1080_cudnn50/234830.json"] == ["unreadable benchmark output: KeyError: 'opt'"] * 2
    assert result.n_read == len(result.rows) + len(result.quarantine) == 354


def test_truncated_json_is_quarantined_not_lost(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    path = files[ONE_JSON]
    path.write_text(path.read_text()[:100])
    result = jcjohnson.parse(files, {})
    reasons = [q["reason"] for q in result.quarantine if q["source_file"] == ONE_JSON]
    assert len(reasons) == 2 and reasons[0].startswith("unreadable benchmark output: JSONDecodeError")


def test_unknown_device_stops_naming_it(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    path = files[ONE_JSON]
    record = json.loads(path.read_text())
    record["gpu_name"] = "GeForce GTX 980"
    path.write_text(json.dumps(record))
    with pytest.raises(UnknownGPUError, match="GeForce GTX 980"):
        jcjohnson.parse(files, {})


def test_wrong_readme_header_names_file_and_line(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    path = files[jcjohnson.HISTORY_README]
    path.write_text(path.read_text().replace("|GPU|Forward (ms)|Backward (ms)|Total (ms)|", "|GPU|Fwd|Bwd|Total|", 1))
    with pytest.raises(jcjohnson.MarkdownTableError, match=r"README.md:56: unexpected table header"):
        jcjohnson.parse(files, {})


def test_truncated_readme_row_is_quarantined(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    path = files[jcjohnson.HISTORY_README]
    row = "|Tesla K40c (cuDNN 5005)|18.32|43.16|61.48|"
    path.write_text(path.read_text().replace(row, "|Tesla K40c (cuDNN 5005)|18.32|"))
    result = jcjohnson.parse(files, {})
    reasons = [q["reason"] for q in result.quarantine if q["row_key"].startswith("line 60:")]
    assert reasons == ["truncated row: 2 of 4 cells"] * 2
