"""The row format our profiler writes: the measurement schema (docs/data-schema.md) plus own-only columns.

`python -m src.profiling run` writes one CSV per invocation under data/own/. Its first columns are exactly the
measurement schema's columns, in the documented order (`MEASUREMENT_COLUMNS`), with `source == "own"`; after them
come the columns only our profiler can fill (`OWN_EXTRA_COLUMNS`: driver, clocks seen, profiling wall time...).
The ingest stage checks a file's header against `OWN_COLUMNS` and keeps `MEASUREMENT_COLUMNS`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

# docs/data-schema.md, `measurements.parquet`, in order.
MEASUREMENT_COLUMNS: list[str] = [
    "measurement_id", "source", "source_file", "upstream_commit", "gpu", "device_raw", "is_cpu", "num_gpus",
    "framework", "framework_version", "cuda_version", "precision", "memory_layout", "compile_mode", "data_mode",
    "variant", "model", "model_key", "model_source", "family", "is_cnn", "img_size", "batch_size", "mode",
    "latency_ms", "throughput", "latency_stat", "latency_spread_ms", "n_samples", "param_count_m", "gmacs",
    "activations_m", "scenario", "source_rows",
]

# Columns only our own measurements have (NaN/empty where not applicable, e.g. clocks on a CPU).
OWN_EXTRA_COLUMNS: list[str] = [
    "run_id",               # one id per `python -m src.profiling run` invocation
    "measured_at_utc",      # ISO 8601 time the configuration finished
    "driver_version",       # NVIDIA driver (empty on CPU)
    "cudnn_version",        # torch.backends.cudnn.version() (empty on CPU)
    "compute_capability",   # e.g. "9.0" (empty on CPU)
    "gpu_memory_gb",        # total device memory seen by torch
    "sm_clock_mhz_min",     # SM clock samples taken while the timed iterations ran
    "sm_clock_mhz_median",
    "sm_clock_mhz_max",
    "mem_clock_mhz_median",
    "clock_samples",        # how many clock samples the three numbers above come from (0: none available)
    "clock_source",         # nvml, nvidia-smi or none
    "timer",                # cuda_event or perf_counter
    "warmup_iters",         # iterations run and discarded before timing (include torch.compile's compilation)
    "latency_mean_ms",
    "latency_min_ms",
    "latency_max_ms",
    "build_s",              # wall seconds: model construction and move to the device
    "warmup_s",             # wall seconds of the warm-up iterations (compilation included)
    "timed_s",              # wall seconds of the timed iterations
    "profiling_wall_s",     # build_s + warmup_s + timed_s + bookkeeping: the cost of measuring this row
]

OWN_COLUMNS: list[str] = MEASUREMENT_COLUMNS + OWN_EXTRA_COLUMNS

PRECISIONS = ("fp32", "fp16", "amp_fp16", "amp_bf16", "bf16", "fp64")
LAYOUTS = ("nchw", "nhwc")
COMPILE_MODES = ("eager", "torch_compile", "cuda_graphs", "xla", "tensorrt", "xla_tensorrt")
MODES = ("inference", "training")
LATENCY_STATS = ("mean", "median", "from_throughput")
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "caffe", "caffe2")
# The schema lists timm/torchvision/tf_cnn_benchmarks/dlinfbench; the profiler adds keras (Keras applications
# built by the model zoo) and custom (a torch.nn.Module handed in directly, e.g. by the tests).
MODEL_SOURCES = ("timm", "torchvision", "tf_cnn_benchmarks", "dlinfbench", "keras", "custom")
CLOCK_SOURCES = ("nvml", "nvidia-smi", "none")
TIMERS = ("cuda_event", "perf_counter")

_STR = {
    "measurement_id", "source", "source_file", "upstream_commit", "gpu", "device_raw", "framework", "data_mode",
    "variant",
    "framework_version", "cuda_version", "precision", "memory_layout", "compile_mode", "model", "model_key",
    "model_source", "family", "mode", "latency_stat", "run_id", "measured_at_utc", "driver_version",
    "cudnn_version", "compute_capability", "clock_source", "timer", "scenario",
}
_INT = {"num_gpus", "img_size", "batch_size", "n_samples", "clock_samples", "warmup_iters", "source_rows"}
_BOOL = {"is_cpu", "is_cnn"}
_FLOAT = set(OWN_COLUMNS) - _STR - _INT - _BOOL
# Must be present (non-empty / finite) in every own row.
_REQUIRED = {
    "measurement_id", "source", "source_file", "gpu", "device_raw", "framework", "framework_version",
    "precision", "memory_layout", "compile_mode", "model", "model_key", "model_source", "family", "img_size",
    "batch_size", "mode", "latency_ms", "throughput", "latency_stat", "latency_spread_ms", "n_samples",
    "run_id", "measured_at_utc", "timer", "warmup_iters", "latency_mean_ms", "latency_min_ms",
    "latency_max_ms", "build_s", "warmup_s", "timed_s", "profiling_wall_s", "num_gpus", "clock_samples",
    "clock_source", "is_cpu", "is_cnn", "data_mode", "source_rows",
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "memory_layout": LAYOUTS,
    "compile_mode": COMPILE_MODES,
    "mode": MODES,
    "latency_stat": LATENCY_STATS,
    "framework": FRAMEWORKS,
    "model_source": MODEL_SOURCES,
    "clock_source": CLOCK_SOURCES,
    "timer": TIMERS,
    "source": ("own",),
    "data_mode": ("synthetic", "real", "real_distorted"),
}


class OwnSchemaError(ValueError):
    """A row that does not follow the own-measurement format; the message names file, line and field."""


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value == ""


def _check_value(column: str, value: Any) -> str | None:
    """Return why `value` is not acceptable for `column`, or None."""
    if _is_missing(value):
        return "missing" if column in _REQUIRED else None
    if column in _STR:
        if not isinstance(value, str):
            return f"expected text, got {type(value).__name__} {value!r}"
        if column in _CHOICES and value not in _CHOICES[column]:
            return f"{value!r} is not one of {list(_CHOICES[column])}"
        return None
    if column in _BOOL:
        return None if isinstance(value, bool) else f"expected true/false, got {value!r}"
    if column in _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer, got {value!r}"
        return None if value >= 0 else f"negative value {value}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {value!r}"
    if not math.isfinite(float(value)):
        return f"non-finite value {value!r}"
    if value < 0:
        return f"negative value {value}"
    return None


def validate_rows(rows: Iterable[Mapping[str, Any]], where: str = "<rows>", first_line: int = 2) -> None:
    """Raise OwnSchemaError listing every bad field (`where:line: field: why`); line = CSV line of the row."""
    problems: list[str] = []
    seen_ids: dict[str, int] = {}
    for index, row in enumerate(rows):
        line = first_line + index
        here: list[str] = []
        extra = sorted(set(row) - set(OWN_COLUMNS))
        missing = [c for c in OWN_COLUMNS if c not in row]
        if extra:
            here.append(f"unknown columns {extra}")
        if missing:
            here.append(f"columns absent {missing}")
        for column in OWN_COLUMNS:
            why = _check_value(column, row[column]) if column in row else None
            if why:
                here.append(f"{column}: {why}")
        if not here:
            if row["is_cpu"] is True and not str(row["gpu"]).startswith("cpu:"):
                here.append(f"gpu: CPU rows must be named 'cpu:<name>', got {row['gpu']!r}")
            lat, thr, bs = row["latency_ms"], row["throughput"], row["batch_size"]
            if lat <= 0:
                here.append(f"latency_ms: must be > 0, got {lat}")
            elif abs(thr - bs / (lat / 1000.0)) > 1e-4 * max(1.0, thr):
                here.append(f"throughput: {thr} != batch_size / latency = {bs / (lat / 1000.0):.6g}")
        mid = row.get("measurement_id")
        if isinstance(mid, str) and mid:
            if mid in seen_ids:
                here.append(f"measurement_id: duplicate of line {seen_ids[mid]} ({mid!r})")
            seen_ids.setdefault(mid, line)
        problems.extend(f"{where}:{line}: {p}" for p in here)
    if problems:
        shown = "\n  ".join(problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise OwnSchemaError(f"{len(problems)} schema problem(s):\n  {shown}{more}")


def rows_to_frame(rows: list[Mapping[str, Any]]) -> pd.DataFrame:
    """Own rows as a DataFrame with exactly OWN_COLUMNS, in order."""
    return pd.DataFrame([{c: row.get(c) for c in OWN_COLUMNS} for row in rows], columns=OWN_COLUMNS)


def write_own_csv(rows: list[Mapping[str, Any]], path: Path) -> Path:
    """Validate and write rows as CSV (header = OWN_COLUMNS); writes nothing when a row is invalid."""
    validate_rows(rows, where=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rows_to_frame(rows).to_csv(tmp, index=False, float_format="%.6g")
    tmp.replace(path)
    return path


def _coerce(column: str, text: str, where: str) -> Any:
    if text == "":
        return float("nan") if column in _FLOAT else ""
    if column in _BOOL:
        if text in ("True", "true"):
            return True
        if text in ("False", "false"):
            return False
        raise OwnSchemaError(f"{where}: {column}: expected True/False, got {text!r}")
    if column in _INT:
        try:
            return int(text)
        except ValueError:
            raise OwnSchemaError(f"{where}: {column}: expected an integer, got {text!r}") from None
    if column in _FLOAT:
        try:
            return float(text)
        except ValueError:
            raise OwnSchemaError(f"{where}: {column}: expected a number, got {text!r}") from None
    return text


def read_own_csv(path: Path) -> pd.DataFrame:
    """Read and validate one own-measurement CSV; raises OwnSchemaError naming file, line and field."""
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise OwnSchemaError(f"{path}: empty file, expected header {OWN_COLUMNS}") from None
        if header != OWN_COLUMNS:
            missing = [c for c in OWN_COLUMNS if c not in header]
            extra = [c for c in header if c not in OWN_COLUMNS]
            raise OwnSchemaError(
                f"{path}:1: header does not match OWN_COLUMNS (missing {missing}, unknown {extra}, "
                f"or order differs)"
            )
        rows: list[dict[str, Any]] = []
        for fields in reader:
            line = reader.line_num
            if len(fields) != len(header):
                raise OwnSchemaError(f"{path}:{line}: expected {len(header)} fields, got {len(fields)}")
            rows.append({c: _coerce(c, t, f"{path}:{line}") for c, t in zip(header, fields, strict=True)})
    validate_rows(rows, where=str(path))
    return rows_to_frame(rows)
