"""Own rows: the same columns as docs/data-schema.md, validated, and read back with errors naming file/line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from src.profiling.schema import (
    MEASUREMENT_COLUMNS,
    OWN_COLUMNS,
    OwnSchemaError,
    read_own_csv,
    validate_rows,
    write_own_csv,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "data-schema.md"


def _doc_measurement_columns() -> list[str]:
    """Column names of the `measurements.parquet` table in docs/data-schema.md, in order."""
    text = DOC.read_text()
    section = text.split("## `measurements.parquet`", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)` \|", section, re.MULTILINE)]


def good_row(**changes) -> dict:
    row = {c: float("nan") for c in OWN_COLUMNS}
    row.update({
        "measurement_id": "own:data/own/t.csv:custom:m|fp32|nchw|eager|inference|bs8|img224", "source": "own",
        "source_file": "data/own/t.csv", "upstream_commit": "", "gpu": "H100 SXM5 80 GB",
        "device_raw": "NVIDIA H100 80GB HBM3", "is_cpu": False, "num_gpus": 1, "framework": "pytorch",
        "framework_version": "2.9.1", "cuda_version": "12.8", "precision": "fp32", "memory_layout": "nchw",
        "compile_mode": "eager", "data_mode": "synthetic", "variant": "", "model": "resnet50",
        "model_key": "resnet50", "model_source": "torchvision", "family": "resnet", "is_cnn": True, "img_size": 224,
        "batch_size": 8, "mode": "inference", "latency_ms": 4.0,
        "throughput": 2000.0, "latency_stat": "median", "latency_spread_ms": 0.05, "n_samples": 50,
        "param_count_m": 25.557032, "gmacs": 4.1, "source_rows": 1, "run_id": "r1",
        "measured_at_utc": "2026-11-21T12:00:00+00:00",
        "driver_version": "580.65", "cudnn_version": "91002", "compute_capability": "9.0", "gpu_memory_gb": 79.1,
        "sm_clock_mhz_min": 1755.0, "sm_clock_mhz_median": 1980.0, "sm_clock_mhz_max": 1980.0,
        "mem_clock_mhz_median": 2619.0, "clock_samples": 12, "clock_source": "nvml", "timer": "cuda_event",
        "warmup_iters": 10, "latency_mean_ms": 4.1, "latency_min_ms": 3.9, "latency_max_ms": 5.2, "build_s": 1.2,
        "warmup_s": 0.4, "timed_s": 0.3, "profiling_wall_s": 2.0,
    })
    row.update(changes)
    return row


def test_measurement_columns_equal_the_documented_schema():
    assert _doc_measurement_columns() == MEASUREMENT_COLUMNS
    assert OWN_COLUMNS[: len(MEASUREMENT_COLUMNS)] == MEASUREMENT_COLUMNS
    assert len(set(OWN_COLUMNS)) == len(OWN_COLUMNS)


def test_round_trip(tmp_path: Path):
    rows = [good_row(), good_row(measurement_id="own:x:2", batch_size=1, throughput=250.0)]
    path = write_own_csv(rows, tmp_path / "own.csv")
    frame = read_own_csv(path)
    assert list(frame.columns) == OWN_COLUMNS and len(frame) == 2
    assert frame.loc[1, "batch_size"] == 1
    assert frame.loc[1, "throughput"] == pytest.approx(250.0)
    assert not frame.loc[0, "is_cpu"]
    assert frame.loc[0, "latency_ms"] == pytest.approx(4.0)
    assert frame.loc[0, "gpu"] == "H100 SXM5 80 GB"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"precision": "fp8"}, r"t.csv:2: precision: 'fp8' is not one of"),
        ({"latency_ms": float("nan")}, r"t.csv:2: latency_ms: missing"),
        ({"throughput": 1000.0}, r"t.csv:2: throughput: 1000.0 != batch_size / latency"),
        ({"batch_size": 8.0}, r"t.csv:2: batch_size: expected an integer"),
        ({"source": "timm"}, r"t.csv:2: source: 'timm' is not one of \['own'\]"),
        ({"is_cpu": True}, r"t.csv:2: gpu: CPU rows must be named 'cpu:<name>'"),
        ({"latency_spread_ms": -1.0}, r"t.csv:2: latency_spread_ms: negative value"),
    ],
)
def test_bad_rows_name_file_line_and_field(change, message):
    with pytest.raises(OwnSchemaError, match=message):
        validate_rows([good_row(**change)], where="t.csv")


def test_duplicate_ids_and_unknown_columns_are_errors():
    with pytest.raises(OwnSchemaError, match=r"t.csv:3: measurement_id: duplicate of line 2"):
        validate_rows([good_row(), good_row()], where="t.csv")
    with pytest.raises(OwnSchemaError, match=r"unknown columns \['extra'\]"):
        validate_rows([good_row(extra=1)], where="t.csv")


def test_invalid_rows_write_nothing(tmp_path: Path):
    with pytest.raises(OwnSchemaError):
        write_own_csv([good_row(mode="serving")], tmp_path / "bad.csv")
    assert not (tmp_path / "bad.csv").exists()


def test_reading_a_damaged_file_names_the_line(tmp_path: Path):
    path = write_own_csv([good_row(), good_row(measurement_id="own:x:2")], tmp_path / "own.csv")
    lines = path.read_text().splitlines()
    (tmp_path / "cut.csv").write_text("\n".join(lines[:2] + [lines[2][:40]]) + "\n")
    with pytest.raises(OwnSchemaError, match=r"cut.csv:3: expected \d+ fields"):
        read_own_csv(tmp_path / "cut.csv")
    (tmp_path / "text.csv").write_text("\n".join([lines[0], lines[1].replace(",8,inference,", ",eight,inference,")]))
    with pytest.raises(OwnSchemaError, match=r"text.csv:2: batch_size: expected an integer, got 'eight'"):
        read_own_csv(tmp_path / "text.csv")
    (tmp_path / "header.csv").write_text(lines[0].replace("gmacs", "gflops") + "\n")
    with pytest.raises(OwnSchemaError, match=r"header.csv:1: header does not match OWN_COLUMNS"):
        read_own_csv(tmp_path / "header.csv")
