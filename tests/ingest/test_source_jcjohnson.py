"""jcjohnson/cnn-benchmarks: the real mirror files (JSON outputs, both READMEs), and small corrupt copies."""

import json
import shutil
import statistics
from collections import Counter

import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.pipeline import _reason_class
from src.ingest.sources import jcjohnson
from src.ingest.validate import COLUMNS, validate

TOP = "jcjohnson-cnn-benchmarks"
ONE_JSON = f"{TOP}/outputs/1080_cudnn50/533635.json"  # resnet-101, nn kernels; a repeat of 595867.json
SOLE_JSON = f"{TOP}/outputs/1080Ti_cudnn51/311738.json"  # resnet-50, cuDNN 5.1.10; the only run of its configuration
HEAD, HISTORY = jcjohnson.HEAD_README, jcjohnson.HISTORY_README


def _files(root):
    return {p.relative_to(root).as_posix(): p for p in (root / TOP).rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def parsed(mirror):
    result = jcjohnson.parse(_files(mirror), {})
    frame, rejected = validate(result.rows)
    return result, frame, rejected


def test_real_files_accounting_and_coverage(parsed):
    result, frame, rejected = parsed
    # 120 JSON outputs, 116 HEAD README rows and 57 old README rows, each twice (forward, forward + backward).
    assert result.n_read == 2 * (120 + 116 + 57) == len(result.rows) + len(result.quarantine) == 586
    assert not rejected and len(frame) == len(result.rows) == 2 * 120 + 2 * 17  # the JSON runs + 17 K40c rows
    # Grouped as the ingest report groups reasons (the text before ':' or ' (').
    by_file = Counter((q["source_file"], _reason_class(q["reason"])) for q in result.quarantine)
    superseded = "superseded by a JSON re-run of this GPU, cuDNN and model"
    assert by_file == {(HEAD, "summary of JSON output"): 2 * 108, (HEAD, "CPU-only system"): 2 * 8,
                       (HISTORY, superseded): 2 * 32, (HISTORY, "CPU-only system"): 2 * 8}
    per_gpu = frame.groupby("gpu").size().to_dict()
    assert per_gpu == {"GeForce GTX 1080": 74, "GeForce GTX 1080 Ti": 30, "GeForce GTX TITAN X": 78,
                       "TITAN X Pascal": 58, "Tesla K40c": 34}
    assert set(frame.loc[frame["source_file"] == HISTORY, "gpu"]) == {"Tesla K40c"}
    assert set(frame.loc[frame["gpu"] == "Tesla K40c", "latency_stat"]) == {"mean"}
    assert not frame["is_cpu"].any() and HEAD not in set(frame["source_file"])
    assert frame.groupby("model_source")["model_key"].unique().map(set).to_dict() == {
        "torchvision": {"alexnet", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34", "resnet50", "resnet101",
                        "resnet152"},
        "timm": {"resnet200"}}
    assert set(frame["framework"]) == {"torch7"} and set(frame["precision"]) == {"fp32"}
    assert set(frame["compile_mode"]) == {"eager"} and set(frame["batch_size"]) == {16}
    assert set(frame["img_size"]) == {224} and set(frame["num_gpus"]) == {1}
    assert frame.groupby("mode").size().to_dict() == {"inference": 137, "training": 137}
    assert frame["measurement_id"].is_unique and frame["is_cnn"].all()
    assert all(set(COLUMNS) <= set(row) for row in result.rows)


def test_json_rows_are_medians_of_the_passes(parsed, mirror):
    _, frame, _ = parsed
    record = json.loads((mirror / ONE_JSON).read_text())
    rows = frame[frame["source_file"] == ONE_JSON].set_index("mode")
    forward = [t * 1000 for t in record["forward_times"]]
    step = [(f + b) * 1000 for f, b in zip(record["forward_times"], record["backward_times"], strict=True)]
    assert rows.loc["inference", "latency_ms"] == pytest.approx(statistics.median(forward))
    assert rows.loc["training", "latency_ms"] == pytest.approx(statistics.median(step))
    assert rows.loc["training", "throughput"] == pytest.approx(16 / statistics.median(step) * 1000)
    q1, _, q3 = statistics.quantiles(step, n=4)
    assert rows.loc["training", "latency_spread_ms"] == pytest.approx(q3 - q1)
    assert rows.loc["training", "n_samples"] == 10 and rows.loc["training", "latency_stat"] == "median"
    assert rows.loc["inference", "variant"] == ("nn; forward only, of a training-mode model "
                                                "(batch-norm batch statistics)")
    assert rows.loc["training", "variant"] == "nn; forward + backward, no optimizer step"
    assert rows.loc["training", "model"] == "resnet101" and rows.loc["training", "cuda_version"] == "8.0"
    assert rows.loc["training", "measurement_id"] == f"jcjohnson:{ONE_JSON}:forward+backward"


def test_cudnn_release_and_pascal_titan_x(parsed):
    _, frame, _ = parsed
    pascal = frame[frame["source_file"].str.contains("/titan_xp_cudnn51/")]
    assert set(pascal["gpu"]) == {"TITAN X Pascal"} and set(pascal["device_raw"]) == {"TITAN X"}
    assert {v.split(";")[0] for v in pascal["variant"]} == {"cudnn 5.1.05", "nn"}
    ti = frame[frame["source_file"].str.contains("/1080Ti_cudnn51/")]
    assert {v.split(";")[0] for v in ti["variant"]} == {"cudnn 5.1.10"}


def test_kernel_backend_is_the_framework_version(parsed):
    """The learner sees the backend: nn and cuDNN runs of one CNN on one GPU differ by ~3x in the same inputs."""
    _, frame, _ = parsed
    assert (frame["framework_version"] == frame["variant"].str.split(";").str[0]).all()
    assert set(frame["framework_version"]) == {"nn", "cudnn 4.0.07", "cudnn 5.0.05", "cudnn 5.1.05", "cudnn 5.1.10"}
    pascal = frame[(frame["gpu"] == "TITAN X Pascal") & (frame["model_key"] == "resnet34")
                   & (frame["mode"] == "training")].groupby("framework_version")["latency_ms"].median()
    assert pascal["nn"] > 3 * pascal["cudnn 5.1.05"]


def test_head_readme_rows_name_the_json_they_summarise(parsed):
    result, _, _ = parsed
    reasons = {q["row_key"]: q["reason"] for q in result.quarantine if q["source_file"] == HEAD}
    # line 94: |GTX 1080|5.0.05|16.08|40.08|56.16| (Inception-V1) = the means of 422317.json, not of its repeat 327519
    assert reasons["line 94:forward"] == "summary of JSON output: outputs/1080_cudnn50/422317.json"
    assert reasons["line 94:forward+backward"] == reasons["line 94:forward"]


def test_old_readme_gtx1080_rows_are_superseded_by_the_json_reruns(parsed):
    result, _, _ = parsed
    reasons = {q["row_key"]: q["reason"] for q in result.quarantine if q["source_file"] == HISTORY}
    # line 58: |GeForce GTX 1080 (cuDNN 5005)|7.36|15.83|23.18| (AlexNet): re-run twice in Aug 2016, other values
    assert reasons["line 58:forward"] == (
        "superseded by a JSON re-run of this GPU, cuDNN and model (values differ; ingested from the JSON): "
        "outputs/1080_cudnn50/934144.json, outputs/1080_cudnn50/94136.json")


def test_k40c_rows_come_from_the_old_readme(parsed):
    _, frame, _ = parsed
    k40 = frame[(frame["gpu"] == "Tesla K40c") & (frame["model_key"] == "vgg16")].set_index(["variant", "mode"])
    # |Tesla K40c (cuDNN 5005)|265.77|654.44|920.21|  and  |Tesla K40c (nn)|340.79|890.22|1231.01|
    assert k40.loc[("cudnn 5.0.05; forward only, of a training-mode model (batch-norm batch statistics)",
                    "inference"), "latency_ms"] == 265.77
    assert k40.loc[("nn; forward + backward, no optimizer step", "training"), "latency_ms"] == 1231.01
    assert k40.loc[("nn; forward + backward, no optimizer step", "training"), "n_samples"] == 10


def _copy_tree(mirror, tmp_path):
    shutil.copytree(mirror / TOP, tmp_path / TOP)
    return _files(tmp_path)


def _edit_json(path, change):
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_bad_time_and_missing_field_are_quarantined(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    _edit_json(files[ONE_JSON], lambda r: r["backward_times"].__setitem__(3, "abc"))
    other = f"{TOP}/outputs/1080_cudnn50/234830.json"
    _edit_json(files[other], lambda r: r.pop("opt"))
    third = f"{TOP}/outputs/1080_cudnn50/243870.json"
    _edit_json(files[third], lambda r: r.pop("forward_times"))
    result = jcjohnson.parse(files, {})
    by_file = {}
    for q in result.quarantine:
        by_file.setdefault(q["source_file"], []).append(q["reason"])
    assert by_file[ONE_JSON] == ["non-positive or non-numeric time in backward_times: 'abc'"]  # forward row kept
    assert by_file[other] == ["unreadable benchmark output: KeyError: 'opt'"] * 2
    assert by_file[third] == ["missing field forward_times"] * 2
    assert result.n_read == len(result.rows) + len(result.quarantine) == 586
    assert len(result.rows) == 274 - 5


def test_truncated_json_falls_back_to_its_readme_summary(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    files[SOLE_JSON].write_text(files[SOLE_JSON].read_text()[:100])
    result = jcjohnson.parse(files, {})
    reasons = [q["reason"] for q in result.quarantine if q["source_file"] == SOLE_JSON]
    assert len(reasons) == 2 and reasons[0].startswith("unreadable benchmark output: JSONDecodeError")
    # The HEAD README row |GTX 1080 Ti|5.1.10|34.14|67.06|101.21| is then the only record of that run: ingested.
    rows = {r["mode"]: r for r in result.rows if r["source_file"] == HEAD}
    assert {m: (r["latency_ms"], r["gpu"], r["latency_stat"], r["model"]) for m, r in rows.items()} == {
        "inference": (34.14, "GeForce GTX 1080 Ti", "mean", "resnet50"),
        "training": (101.21, "GeForce GTX 1080 Ti", "mean", "resnet50")}
    assert result.n_read == len(result.rows) + len(result.quarantine) == 586


def test_batch_from_the_record_and_non_square_input(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    _edit_json(files[ONE_JSON], lambda r: r["opt"].__setitem__("batch_size", 32))
    _edit_json(files[SOLE_JSON], lambda r: r["opt"].__setitem__("image_width", 256))
    result = jcjohnson.parse(files, {})
    rows = [r for r in result.rows if r["source_file"] == ONE_JSON]
    assert [r["batch_size"] for r in rows] == [32, 32]
    assert rows[0]["throughput"] == pytest.approx(32 / rows[0]["latency_ms"] * 1000)
    assert [q["reason"] for q in result.quarantine if q["source_file"] == SOLE_JSON] == ["non-square input 224x256"] * 2


def test_cpu_run_and_inconsistent_backend_are_quarantined(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    _edit_json(files[ONE_JSON], lambda r: r.update(gpu_name="cpu"))
    _edit_json(files[SOLE_JSON], lambda r: r["opt"].__setitem__("use_cudnn", 0))
    result = jcjohnson.parse(files, {})
    reasons = {q["source_file"]: q["reason"] for q in result.quarantine}
    assert reasons[ONE_JSON] == "CPU-only system (gpu_name 'cpu'): not a GPU measurement"
    assert reasons[SOLE_JSON] == "use_cudnn=0 disagrees with cudnn_version 5110"


def test_unknown_device_stops_naming_it(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    _edit_json(files[ONE_JSON], lambda r: r.update(gpu_name="GeForce GTX 980"))
    with pytest.raises(UnknownGPUError, match="GeForce GTX 980"):
        jcjohnson.parse(files, {})


def test_unknown_readme_gpu_label_stops_naming_it(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    files[HEAD].write_text(files[HEAD].read_text().replace("|GTX 1080|5.0.05|16.08|", "|GTX 980|5.0.05|16.08|"))
    with pytest.raises(UnknownGPUError, match=r"'GTX 980' \(in jcjohnson-cnn-benchmarks/README.md:94\)"):
        jcjohnson.parse(files, {})


@pytest.mark.parametrize(("readme", "old", "new", "line"), [
    (HISTORY, "|GPU|Forward (ms)|Backward (ms)|Total (ms)|", "|GPU|Fwd|Bwd|Total|", 56),
    (HEAD, "|GPU|cuDNN|Forward (ms)|Backward (ms)|Total (ms)|", "|GPU|Forward (ms)|Backward (ms)|Total (ms)|", 71),
])
def test_wrong_readme_header_names_file_and_line(mirror, tmp_path, readme, old, new, line):
    files = _copy_tree(mirror, tmp_path)
    files[readme].write_text(files[readme].read_text().replace(old, new, 1))
    with pytest.raises(jcjohnson.MarkdownTableError, match=rf"{readme}:{line}: unexpected table header"):
        jcjohnson.parse(files, {})


def test_results_table_of_an_unknown_model_is_an_error(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    files[HEAD].write_text(files[HEAD].read_text().replace("## ResNet-200\n", "## ResNet-269\n"))
    with pytest.raises(jcjohnson.MarkdownTableError, match=r"README.md:\d+: results table under section 'ResNet-269'"):
        jcjohnson.parse(files, {})


def test_truncated_and_bad_readme_rows_are_quarantined(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    text = files[HISTORY].read_text()
    text = text.replace("|Tesla K40c (cuDNN 5005)|18.32|43.16|61.48|", "|Tesla K40c (cuDNN 5005)|18.32|")
    text = text.replace("|Tesla K40c (nn)|340.79|890.22|1231.01|", "|Tesla K40c (nn)|n/a|890.22|1231.01|")
    files[HISTORY].write_text(text)
    result = jcjohnson.parse(files, {})
    reasons = {q["row_key"]: q["reason"] for q in result.quarantine if q["source_file"] == HISTORY}
    assert reasons["line 60:forward"] == reasons["line 60:forward+backward"] == "truncated row: 2 of 4 cells"
    assert reasons["line 76:forward"] == "non-numeric or non-positive Forward (ms): 'n/a'"
    assert "line 76:forward+backward" not in reasons  # the total of that row is still read
    assert result.n_read == len(result.rows) + len(result.quarantine) == 586


def test_truncated_readme_file_keeps_the_rows_before_the_cut(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    text = files[HISTORY].read_text()
    files[HISTORY].write_text(text[: text.index("|Tesla K40c (nn)|340.79")])
    result = jcjohnson.parse(files, {})
    history = [r for r in result.rows if r["source_file"] == HISTORY]
    assert len(history) == 2 * 2  # the AlexNet and VGG-16 cuDNN K40c rows; nothing after the cut
    assert result.n_read == len(result.rows) + len(result.quarantine)


def test_missing_readme_is_an_error(mirror, tmp_path):
    files = _copy_tree(mirror, tmp_path)
    del files[HEAD]
    with pytest.raises(FileNotFoundError, match="README.md"):
        jcjohnson.parse(files, {})
