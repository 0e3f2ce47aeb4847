"""Validation of parsed rows with a pandera schema; every failing row goes to quarantine with its reason.

Checks: numbers parse (non-numeric text is named), times/sizes are positive, values are physically possible (a
training step never runs on an inference-only runtime), batch size is present, categorical columns hold known
values, and exact duplicates (same configuration and same measured values, different file) are kept once.
Invariant: ingested + quarantined = read.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pandera.pandas as pa

from .records import quarantined

NUMERIC_FIELDS = ("img_size", "batch_size", "latency_ms", "throughput")
PROVENANCE = ("measurement_id", "source_file", "upstream_commit", "device_raw", "source_rows")
COLUMNS = [
    "measurement_id", "source", "source_file", "upstream_commit", "gpu", "device_raw", "is_cpu", "num_gpus",
    "framework", "framework_version", "cuda_version", "precision", "memory_layout", "compile_mode",
    "data_mode", "variant", "model", "model_key", "model_source", "family", "is_cnn", "img_size", "batch_size",
    "mode", "latency_ms", "throughput", "latency_stat", "latency_spread_ms", "n_samples", "param_count_m",
    "gmacs", "activations_m", "scenario", "source_rows",
]
# `scenario`: how the source drove the GPU where it says so (MLPerf `offline` / `single_stream`, ...); empty for the
# benchmark loops of the other sources (a fixed batch timed back to back).
DEFAULTS: dict[str, Any] = {"data_mode": "synthetic", "variant": "", "scenario": "", "source_rows": 1}
SOURCES = ("timm", "ryujaehun", "dlinfbench", "lambda", "own", "mlperf", "paddleclas", "jcjohnson", "torch2trt")
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "caffe", "caffe2", "tensorrt", "paddle", "torch7")
PRECISIONS = ("fp32", "fp16", "amp_fp16", "amp_bf16", "bf16", "fp64", "int8")
COMPILE_MODES = ("eager", "torch_compile", "cuda_graphs", "xla", "tensorrt", "xla_tensorrt")
SCENARIOS = ("", "offline", "single_stream")
# Throughput and step time given together must agree within this factor (batch / step time vs reported rate).
CONSISTENCY_FACTOR = 2.0

MEASUREMENT_SCHEMA = pa.DataFrameSchema(
    {
        "measurement_id": pa.Column(str, unique=True),
        "source": pa.Column(str, pa.Check.isin(SOURCES)),
        "gpu": pa.Column(str),
        "is_cpu": pa.Column(bool),
        "num_gpus": pa.Column(int, pa.Check.in_range(1, 16)),
        "framework": pa.Column(str, pa.Check.isin(FRAMEWORKS)),
        "precision": pa.Column(str, pa.Check.isin(PRECISIONS)),
        "memory_layout": pa.Column(str, pa.Check.isin(["nchw", "nhwc"])),
        "compile_mode": pa.Column(str, pa.Check.isin(COMPILE_MODES)),
        "scenario": pa.Column(str, pa.Check.isin(SCENARIOS)),
        "mode": pa.Column(str, pa.Check.isin(["inference", "training"])),
        "model": pa.Column(str, pa.Check.str_length(min_value=1)),
        "img_size": pa.Column(int, pa.Check.in_range(16, 4096)),
        "batch_size": pa.Column(int, pa.Check.in_range(1, 1 << 20)),
        "latency_ms": pa.Column(float, [pa.Check.gt(0), pa.Check.le(1e7)]),
        "throughput": pa.Column(float, [pa.Check.gt(0), pa.Check.le(1e8)]),
        "latency_spread_ms": pa.Column(float, pa.Check.ge(0), nullable=True),
        "param_count_m": pa.Column(float, pa.Check.ge(0), nullable=True),
        "gmacs": pa.Column(float, pa.Check.ge(0), nullable=True),
        "activations_m": pa.Column(float, pa.Check.ge(0), nullable=True),
    },
    strict=False,
    coerce=False,
)


def _number_problems(row: dict[str, Any]) -> str | None:
    """First problem with the numeric fields of a parsed row, as a human-readable reason."""
    if row.get("batch_size") in (None, ""):
        return "missing batch size"
    for name in NUMERIC_FIELDS:
        value = row.get(name)
        if value is None or value == "":
            if name == "latency_ms" and row.get("latency_stat") == "from_throughput":
                continue
            return f"missing {name}"
        try:
            number = float(str(value).strip())
        except ValueError:
            return f"non-numeric {name}: {value!r}"
        if number != number:
            return f"missing {name} (NaN)"
        if number <= 0:
            return f"non-positive {name}: {number:g}"
        if name in ("img_size", "batch_size") and number != int(number):
            return f"impossible {name}: {number:g} is not a whole number"
    return None


def _complete(row: dict[str, Any]) -> dict[str, Any]:
    """Typed row: numbers coerced, the missing one of latency / throughput derived from the other."""
    out = {**DEFAULTS, **{k: v for k, v in row.items() if not k.startswith("_")}}
    out["img_size"] = int(float(out["img_size"]))
    out["batch_size"] = int(float(out["batch_size"]))
    out["throughput"] = float(out["throughput"])
    if out.get("latency_ms") in (None, ""):
        out["latency_ms"] = out["batch_size"] / out["throughput"] * 1000.0
    out["latency_ms"] = float(out["latency_ms"])
    return out


# Runtimes that build inference engines only: a training step labelled with one is a mislabelled run (Lambda's
# `_trt` systems were read as TensorRT until 2026-11-27; half of their runs were training steps).
INFERENCE_ONLY_RUNTIMES = ("tensorrt", "xla_tensorrt")


def _inconsistent(row: dict[str, Any]) -> str | None:
    if row["mode"] == "training" and row["compile_mode"] in INFERENCE_ONLY_RUNTIMES:
        return (f"impossible run: a training step with compile_mode {row['compile_mode']!r}, a runtime that "
                "builds inference engines only")
    if row["latency_stat"] == "from_throughput":
        return None
    implied = row["batch_size"] / (row["latency_ms"] / 1000.0)
    ratio = implied / row["throughput"]
    if ratio > CONSISTENCY_FACTOR or ratio < 1 / CONSISTENCY_FACTOR:
        return (f"impossible values: throughput {row['throughput']:g}/s disagrees with batch "
                f"{row['batch_size']} / step {row['latency_ms']:g} ms (x{ratio:.2f})")
    return None


def validate(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Split parsed rows into the validated measurement table and quarantine records."""
    quarantine: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    raws: dict[str, tuple[str, Any]] = {}
    for row in rows:
        reason = _number_problems(row)
        if reason is None:
            typed = _complete(row)
            reason = _inconsistent(typed)
        if reason:
            quarantine.append(quarantined(row["source"], row["source_file"], row["_row_key"], reason, row["_raw"]))
            continue
        raws[typed["measurement_id"]] = (row["_row_key"], row["_raw"])
        kept.append(typed)
    frame = _typed(pd.DataFrame(kept, columns=COLUMNS))
    if frame.empty:
        return frame, quarantine
    frame, failed = _schema_check(frame)
    for measurement_id, reason in failed:
        quarantine.append(_from_frame(frame_row_source(measurement_id), measurement_id, reason, raws))
    frame = frame[~frame["measurement_id"].isin({m for m, _ in failed})]
    frame, dups = _drop_exact_duplicates(frame)
    for measurement_id, first in dups:
        reason = f"exact duplicate of {first}"
        quarantine.append(_from_frame(frame_row_source(measurement_id), measurement_id, reason, raws))
    return frame.reset_index(drop=True), quarantine


def frame_row_source(measurement_id: str) -> tuple[str, str]:
    """(source, source file) encoded in a measurement id `<source>:<file>:<key>`."""
    source, rest = measurement_id.split(":", 1)
    return source, rest.rsplit(":", 1)[0]


def _from_frame(where: tuple[str, str], measurement_id: str, reason: str, raws: dict) -> dict[str, Any]:
    row_key, raw = raws[measurement_id]
    return quarantined(where[0], where[1], row_key, reason, raw)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.astype(
        {"img_size": "int64", "batch_size": "int64", "num_gpus": "int64", "latency_ms": "float64",
         "throughput": "float64", "is_cpu": "bool", "is_cnn": "bool", "source_rows": "int64"}
    )
    for col in ("latency_spread_ms", "n_samples", "param_count_m", "gmacs", "activations_m"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    for col in ("framework_version", "cuda_version", "variant", "data_mode", "upstream_commit", "scenario"):
        frame[col] = frame[col].fillna("").astype(str)
    return frame


def _schema_check(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Run the pandera schema lazily; return the rows that failed with '<column>: <check> (value)' reasons."""
    try:
        MEASUREMENT_SCHEMA.validate(frame, lazy=True)
        return frame, []
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases
        row_cases = cases[cases["index"].notna()]
        if len(row_cases) < len(cases):  # a column-level problem (missing column, wrong dtype) is a bug
            raise
        reasons: dict[str, list[str]] = {}
        for _, case in row_cases.iterrows():
            mid = frame.loc[int(case["index"]), "measurement_id"]
            reasons.setdefault(mid, []).append(f"{case['column']}: {case['check']} (value {case['failure_case']})")
        return frame, [(mid, "; ".join(r)) for mid, r in reasons.items()]


def _drop_exact_duplicates(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Rows equal in every non-provenance column: keep the first, report the others with the kept id."""
    content = [c for c in frame.columns if c not in PROVENANCE]
    dup_mask = frame.duplicated(subset=content, keep="first")
    first_ids = frame.groupby(content, dropna=False, sort=False)["measurement_id"].transform("first")
    dups = list(zip(frame.loc[dup_mask, "measurement_id"], first_ids[dup_mask], strict=True))
    return frame[~dup_mask], dups

