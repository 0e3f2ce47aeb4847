"""MLPerf Inference results (cm4mlperf-results): the real mirror files, and small corrupt copies of them."""

import json
import shutil
from collections import Counter

import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.sources import mlperf
from src.ingest.validate import validate

TOP = "mlcommons-cm4mlperf-results"
DC_OFFLINE = "experiment/mlperf-inference--all--datacenter--closed--image-classification--offline"
EDGE_SS = "experiment/mlperf-inference--all--edge--closed--image-classification--singlestream"


def _files(root):
    return {p.relative_to(root).as_posix(): p for p in (root / TOP).rglob("*.json")}


@pytest.fixture(scope="module")
def parsed(mirror):
    files = _files(mirror)
    result = mlperf.parse(files, {rel: "84d8b84c6d6e" for rel in files})
    frame, rejected = validate(result.rows)
    return result, frame, rejected


def test_real_files_accounting(parsed):
    result, frame, rejected = parsed
    # SOURCE.md: 227 + 131 + 131 + 202 + 60 + 60 results in the six experiments.
    assert result.n_read == 811 == len(result.rows) + len(result.quarantine)
    reasons = Counter(q["reason"].split(" '")[0].split(" (")[0] for q in result.quarantine)
    assert reasons["no accelerator"] == 130  # 'N/A', '-' and None
    assert reasons["non-NVIDIA accelerator"] == 70
    assert reasons["MIG slice"] == 6 and reasons["virtualised GPU"] == 5
    assert sum(v for k, v in reasons.items() if k.startswith("software stack")) == 31
    assert [r["reason"].split(" of ")[0] for r in rejected] == ["exact duplicate"] * len(rejected)
    assert len(frame) == len(result.rows) - len(rejected) >= 540


def test_real_rows_cover_the_new_datacenter_gpus(parsed):
    _, frame, _ = parsed
    gpus = set(frame["gpu"])
    assert {"H100 SXM5 80 GB", "H100 PCIe 80 GB", "H100 NVL 94 GB", "H200 SXM 141 GB", "L4", "L40S", "A30 PCIe",
            "A10 PCIe", "A2 PCIe", "Tesla T4", "Jetson AGX Orin 64 GB"} <= gpus
    assert set(frame["precision"]) == {"int8"} and set(frame["compile_mode"]) == {"tensorrt"}
    assert set(frame["scenario"]) == {"offline", "single_stream"}
    single = frame[frame["scenario"] == "single_stream"]
    assert set(single["batch_size"]) == {1} and set(single["latency_stat"]) == {"p90"}
    offline = frame[frame["scenario"] == "offline"]
    assert set(offline["batch_size"]) == {mlperf.OFFLINE_NOMINAL_BATCH} and set(offline["num_gpus"]) == {1}


def test_offline_is_divided_per_gpu(parsed, mirror):
    _, frame, _ = parsed
    path = next((mirror / TOP / DC_OFFLINE).glob("*/cm-result.json"))
    record = json.loads(path.read_text())[0]  # ASUSTeK 4x H100-NVL-94GB, 270891 samples/s, TensorRT 10.2.0
    row = frame[frame["measurement_id"].str.endswith(f"{record['uid']}:offline")].iloc[0]
    assert row["gpu"] == "H100 NVL 94 GB"
    assert row["throughput"] == pytest.approx(270891 / 4)
    assert row["latency_ms"] == pytest.approx(mlperf.OFFLINE_NOMINAL_BATCH / (270891 / 4) * 1000)
    assert (row["framework_version"], row["cuda_version"]) == ("10.2.0", "12.4")
    assert "divided per GPU" in row["variant"]


def _copy(mirror, tmp_path, experiment):
    src = next((mirror / TOP / experiment).glob("*/cm-result.json"))
    dst = tmp_path / TOP / experiment / src.parent.name / src.name
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    return dst, f"{TOP}/{experiment}/{src.parent.name}/{src.name}"


def _first_kept(records):
    return next(i for i, r in enumerate(records) if mlperf._exclusion(r) is None)


def test_bad_values_are_quarantined_with_reasons(mirror, tmp_path):
    path, rel = _copy(mirror, tmp_path, EDGE_SS)
    records = json.loads(path.read_text())
    i = _first_kept(records)
    j = _first_kept(records[i + 1:]) + i + 1
    records[i]["Result"] = "fast"
    records[j]["accelerators_per_node"] = "N/A"
    path.write_text(json.dumps(records))
    result = mlperf.parse_file(path, rel, "")
    reasons = {q["row_key"].split("]")[0] + "]": q["reason"] for q in result.quarantine}
    assert reasons[f"[{i}]"] == "non-numeric or non-positive Result: 'fast'"
    assert reasons[f"[{j}]"] == "accelerators_per_node is not a whole number >= 1: 'N/A'"
    assert result.n_read == len(records) == len(result.rows) + len(result.quarantine)


def test_missing_field_is_quarantined(mirror, tmp_path):
    path, rel = _copy(mirror, tmp_path, EDGE_SS)
    records = json.loads(path.read_text())
    i = _first_kept(records)
    del records[i]["framework"]
    path.write_text(json.dumps(records))
    result = mlperf.parse_file(path, rel, "")
    assert any(q["reason"] == "missing field(s) ['framework']" for q in result.quarantine)


def test_unknown_nvidia_gpu_stops_naming_it(mirror, tmp_path):
    path, rel = _copy(mirror, tmp_path, EDGE_SS)
    records = json.loads(path.read_text())
    records[_first_kept(records)]["accelerator_model_name"] = "NVIDIA B200-SXM-180GB"
    path.write_text(json.dumps(records))
    with pytest.raises(UnknownGPUError, match="NVIDIA B200-SXM-180GB"):
        mlperf.parse_file(path, rel, "")


def test_truncated_file_is_an_error_naming_it(mirror, tmp_path):
    path, rel = _copy(mirror, tmp_path, EDGE_SS)
    path.write_text(path.read_text()[:500])
    with pytest.raises(ValueError, match=r"cm-result.json: not valid JSON"):
        mlperf.parse_file(path, rel, "")
