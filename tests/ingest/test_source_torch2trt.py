"""torch2trt Jetson benchmarks: the real mirror files, and small corrupt copies of them."""


import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.sources import torch2trt
from src.ingest.validate import COLUMNS, validate
from tests.ingest.conftest import copy_mirror_file

NANO = "NVIDIA-AI-IOT-torch2trt/benchmarks/JETSON_NANO.md"
XAVIER = "NVIDIA-AI-IOT-torch2trt/benchmarks/JETSON_XAVIER.md"


@pytest.fixture(scope="module")
def parsed(mirror):
    files = {rel: mirror / rel for rel in (NANO, XAVIER)}
    result = torch2trt.parse(files, {rel: "4e820ae31b4e" for rel in files})
    frame, rejected = validate(result.rows)
    return result, frame, rejected


def test_real_files_two_runtimes_per_table_row(parsed):
    result, frame, rejected = parsed
    # SOURCE.md: 18 Nano rows + 29 Xavier rows, each an eager PyTorch and a TensorRT measurement.
    assert result.n_read == 2 * (18 + 29) == len(result.rows) + len(result.quarantine)
    assert not rejected and len(frame) == len(result.rows) == 93
    assert [q["row_key"] for q in result.quarantine] == ["line 9:tensorrt"]  # Nano resnet101, Max Error 1.01E+03
    assert "failed conversion" in result.quarantine[0]["reason"]
    counts = frame.groupby(["gpu", "compile_mode"]).size().to_dict()
    assert counts == {("Jetson AGX Xavier 16 GB", "eager"): 29, ("Jetson AGX Xavier 16 GB", "tensorrt"): 29,
                      ("Jetson Nano", "eager"): 18, ("Jetson Nano", "tensorrt"): 17}
    assert set(frame["precision"]) == {"fp16"} and set(frame["batch_size"]) == {1} and set(frame["img_size"]) == {224}
    assert frame["is_cnn"].all() and frame["measurement_id"].is_unique
    assert all(set(COLUMNS) <= set(row) for row in result.rows)


def test_real_values_copied_unchanged(parsed):
    _, frame, _ = parsed
    nano = frame[(frame["gpu"] == "Jetson Nano") & (frame["model_key"] == "resnet18")].set_index("compile_mode")
    # | torchvision.models.resnet.resnet18 | ... | 29.4 | 90.2 | 34.7 | 11.4 |
    assert nano.loc["eager", ["throughput", "latency_ms"]].tolist() == [29.4, 34.7]
    assert nano.loc["tensorrt", ["throughput", "latency_ms"]].tolist() == [90.2, 11.4]
    assert nano.loc["tensorrt", "measurement_id"] == f"torch2trt:{NANO}:line 6:tensorrt"
    assert nano.loc["eager", "measurement_id"] == f"torch2trt:{NANO}:line 6:pytorch"
    assert set(frame["framework"]) == {"pytorch"} and set(frame["latency_stat"]) == {"mean"}
    assert set(frame["model_source"]) == {"torchvision"} and set(frame["n_samples"]) == {50}
    xavier = frame[frame["gpu"] == "Jetson AGX Xavier 16 GB"]
    # | torch2trt.tests.torchvision.classification.mnasnet1_3 | ... | 67.4 | 573 | 15 | 2.02 |
    mnas = xavier[xavier["model"] == "mnasnet1_3"].set_index("compile_mode")
    assert mnas.loc["tensorrt", ["throughput", "latency_ms"]].tolist() == [573.0, 2.02]
    assert set(frame.loc[frame["gpu"] == "Jetson Nano", "model"]) == {
        "alexnet", "squeezenet1_0", "squeezenet1_1", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
        "densenet121", "densenet169", "densenet201", "densenet161", "vgg11", "vgg13", "vgg16", "vgg11_bn", "vgg13_bn",
        "vgg16_bn"}
    assert set(xavier["model"]) - set(frame.loc[frame["gpu"] == "Jetson Nano", "model"]) == {
        "vgg19", "vgg19_bn", "mobilenet_v2", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
        "shufflenet_v2_x2_0", "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3"}


def test_bad_number_is_quarantined_with_its_reason(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    path.write_text(path.read_text().replace("| 29.4 | 90.2 | 34.7 | 11.4 |", "| 29.4 | 90.2 | abc | -1 |"))
    result = torch2trt.parse_table(path, NANO, "", "Jetson Nano")
    reasons = {q["row_key"]: q["reason"] for q in result.quarantine}
    assert reasons["line 6:pytorch"] == "non-numeric Latency (PyTorch): 'abc'"
    assert reasons["line 6:tensorrt"] == "non-positive Latency (TensorRT): -1"
    assert result.n_read == len(result.rows) + len(result.quarantine) == 36


def test_wrong_header_names_file_and_line(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    path.write_text(path.read_text().replace("| Latency (TensorRT) |", "| Latency (TRT) |", 1))
    with pytest.raises(torch2trt.MarkdownTableError, match=r"JETSON_NANO.md:1: unexpected table header"):
        torch2trt.parse_table(path, NANO, "", "Jetson Nano")


def test_missing_column_is_a_header_error(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    path.write_text(path.read_text().replace(" Max Error |", "", 1))
    with pytest.raises(torch2trt.MarkdownTableError, match="unexpected table header"):
        torch2trt.parse_table(path, NANO, "", "Jetson Nano")


def test_truncated_file_quarantines_the_cut_row(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    text = path.read_text()
    path.write_text(text[: text.index("| torchvision.models.resnet.resnet34") + 60])
    result = torch2trt.parse_table(path, NANO, "", "Jetson Nano")
    assert [q["reason"] for q in result.quarantine][-2:] == ["truncated row: 3 of 9 cells"] * 2
    assert result.n_read == len(result.rows) + len(result.quarantine) == 10


def test_unknown_device_stops_naming_it(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    with pytest.raises(UnknownGPUError, match="Jetson Thor"):
        torch2trt.parse_table(path, NANO, "", "Jetson Thor")


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "JETSON_NANO.md"
    path.write_text("# no table here\n")
    with pytest.raises(torch2trt.MarkdownTableError, match="no Markdown table"):
        torch2trt.parse_table(path, NANO, "", "Jetson Nano")


def test_unknown_data_type_and_module_are_quarantined(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, NANO)
    text = path.read_text()
    text = text.replace("alexnet.alexnet | float16 |", "alexnet.alexnet | int8 |")
    text = text.replace("| torchvision.models.resnet.resnet18 |", "| mymodels.resnet18 |")
    path.write_text(text)
    result = torch2trt.parse_table(path, NANO, "", "Jetson Nano")
    reasons = {q["row_key"]: q["reason"] for q in result.quarantine}
    assert reasons["line 3:pytorch"] == reasons["line 3:tensorrt"] == "unknown data type 'int8'"
    assert reasons["line 6:pytorch"] == "model 'mymodels.resnet18' is not a torchvision module path"


def test_missing_benchmark_file_is_an_error(mirror):
    with pytest.raises(FileNotFoundError, match="JETSON_XAVIER.md"):
        torch2trt.parse({NANO: mirror / NANO}, {})
