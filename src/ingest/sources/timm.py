"""timm `results/benchmark-*.csv`: mean step time over 50 timed iterations (10 warm-up) per model and file."""

from __future__ import annotations

import re
from pathlib import Path

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, read_csv_rows, row_problem, to_float, workload

SOURCE = "timm"
FILE_PATTERN = re.compile(
    r"^(?:benchmark-(?P<mode>infer|train)-(?P<precision>amp_bf16|amp|bf16|fp32)-(?P<layout>nchw|nhwc)"
    r"-pt(?P<torch>\d+)-(?:cu(?P<cuda>\d+)|(?P<cpu>cpu))-(?P<device>[A-Za-z0-9_]+?)(?P<dynamo>-dynamo)?"
    r"|model_benchmark_(?P<old_precision>amp)_(?P<old_layout>nchw|nhwc)_(?P<old_device>rtx3090))\.csv$"
)
PRECISIONS = {"amp": "amp_fp16", "amp_bf16": "amp_bf16", "bf16": "bf16", "fp32": "fp32"}
# The Jan 2022 files predate the pt110 ones; timm's CI then ran PyTorch 1.10 with CUDA 11.3.
OLD_FILE_CONTEXT = {"torch": "1.10", "cuda": "11.3"}


def _version(digits: str) -> str:
    """'240' -> '2.4.0', '110' -> '1.10', '291' -> '2.9.1' (timm's file-name convention)."""
    if digits.startswith("1") and len(digits) == 3:
        return f"1.{digits[1:]}"
    return ".".join(digits)


def _cuda(digits: str | None) -> str:
    return f"{digits[:-1]}.{digits[-1]}" if digits else ""


def file_context(name: str) -> dict[str, object] | None:
    """Configuration encoded in a timm benchmark file name; None for files that hold no measurements."""
    match = FILE_PATTERN.match(name)
    if not match:
        return None
    g = match.groupdict()
    if g["old_device"]:
        return {
            "mode": "inference", "precision": "amp_fp16", "memory_layout": g["old_layout"],
            "framework_version": OLD_FILE_CONTEXT["torch"], "cuda_version": OLD_FILE_CONTEXT["cuda"],
            "device": g["old_device"], "compile_mode": "eager", "is_cpu_file": False,
        }
    return {
        "mode": "inference" if g["mode"] == "infer" else "training",
        "precision": PRECISIONS[g["precision"]],
        "memory_layout": g["layout"],
        "framework_version": _version(g["torch"]),
        "cuda_version": _cuda(g["cuda"]),
        "device": f"cpu {g['device']}" if g["cpu"] else g["device"],
        "compile_mode": "torch_compile" if g["dynamo"] else "eager",
        "is_cpu_file": bool(g["cpu"]),
    }


def parse_file(path: Path, rel: str, commit: str) -> ParseResult:
    """Parse one benchmark CSV. Rows with unusable values are quarantined with the field named."""
    ctx = file_context(path.name)
    result = ParseResult()
    if ctx is None:
        return result
    device = resolve_device(str(ctx["device"]), where=rel)
    prefix = "infer" if ctx["mode"] == "inference" else "train"
    header, rows = read_csv_rows(path)
    required = ["model", f"{prefix}_samples_per_sec", f"{prefix}_step_time", f"{prefix}_batch_size",
                f"{prefix}_img_size"]
    missing_cols = [c for c in required if c not in header]
    for line_no, fields in rows:
        result.n_read += 1
        raw = dict(zip(header, fields, strict=False))
        key = f"line {line_no}"
        problem = row_problem(header, fields, missing_cols)
        if problem:
            result.quarantine.append(quarantined(SOURCE, rel, key, problem, raw))
            continue
        result.rows.append(
            {
                "measurement_id": f"{SOURCE}:{rel}:{line_no}",
                "source": SOURCE,
                "source_file": rel,
                "upstream_commit": commit,
                "gpu": device.gpu,
                "device_raw": str(ctx["device"]),
                "is_cpu": device.is_cpu,
                "num_gpus": 1,
                "framework": "pytorch",
                "framework_version": ctx["framework_version"],
                "cuda_version": "" if device.is_cpu else ctx["cuda_version"],
                "precision": ctx["precision"],
                "memory_layout": ctx["memory_layout"],
                "compile_mode": ctx["compile_mode"],
                **workload(raw["model"].strip(), "timm"),
                "img_size": raw[f"{prefix}_img_size"],
                "batch_size": raw[f"{prefix}_batch_size"],
                "mode": ctx["mode"],
                "latency_ms": raw[f"{prefix}_step_time"],
                "throughput": raw[f"{prefix}_samples_per_sec"],
                "latency_stat": "mean",
                "latency_spread_ms": None,
                "n_samples": 50,
                "param_count_m": to_float(raw.get("param_count")),
                "gmacs": to_float(raw.get("infer_gmacs")),
                "activations_m": to_float(raw.get("infer_macts")),
                "_raw": raw,
                "_row_key": key,
            }
        )
    return result
