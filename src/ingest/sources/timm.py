"""timm `results/benchmark-*.csv`: mean step time over 50 timed iterations (10 warm-up) per model and file."""

from __future__ import annotations

import re
from pathlib import Path

from ..gpus import resolve_device
from ..models import model_family, plain_model_key
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
# The PyTorch 2.9.1 files (Jan 2026) ran `benchmark.py --reparam`, which SOURCE.md does not say but their own
# figures do: for every re-parameterisable architecture (src.ingest.models.REPARAMETERIZABLE) their param_count
# and infer_gmacs are those of the fused form (mobileone_s0: 2.08 M parameters where the pt240 files say 5.29 M;
# RepVGG -10 %), and the times drop with them (mobileone_s1, RTX 4090, batch 1024: 217 ms in pt240, 92 ms in
# pt291, where resnet18 takes 39 and 38 ms). Earlier files report the training-time form.
REPARAM_FROM_TORCH = (2, 9)
# The PyTorch 1.10 and 1.11 files (timm 0.5) ran convnext_base's network under the names convnext_tiny_in22ft1k,
# convnext_small_in22ft1k and their _384 forms: their rows report convnext_base's 88.59 M parameters and GMACs, and
# convnext_base's times (RTX 3090, batch 1024: 1,257 ms for "convnext_tiny_in22ft1k", 1,254 ms for convnext_base,
# 617 ms for convnext_tiny). From pt112 on they report and time their own networks. Such rows get convnext_base's key.
CONVNEXT_RUN_AS_BASE = re.compile(r"^convnext_(tiny|small)(_384)?_in22ft1k$")
CONVNEXT_BASE_PARAMS_M = 88.59


def _network_ran(row: dict[str, object]) -> dict[str, object]:
    """The workload columns of the network the row ran (CONVNEXT_RUN_AS_BASE), else the row's own."""
    if (CONVNEXT_RUN_AS_BASE.match(plain_model_key(str(row["model"])))
            and row.get("param_count_m") == CONVNEXT_BASE_PARAMS_M):
        return {**row, "model_key": "convnext_base", "family": model_family("convnext_base")}
    return row


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
            "device": g["old_device"], "compile_mode": "eager", "is_cpu_file": False, "reparameterized": False,
        }
    version = _version(g["torch"])
    return {
        "mode": "inference" if g["mode"] == "infer" else "training",
        "precision": PRECISIONS[g["precision"]],
        "memory_layout": g["layout"],
        "framework_version": version,
        "cuda_version": _cuda(g["cuda"]),
        "device": f"cpu {g['device']}" if g["cpu"] else g["device"],
        "compile_mode": "torch_compile" if g["dynamo"] else "eager",
        "is_cpu_file": bool(g["cpu"]),
        "reparameterized": tuple(int(p) for p in version.split(".")[:2]) >= REPARAM_FROM_TORCH,
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
        result.rows.append(_network_ran(
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
                **workload(raw["model"].strip(), "timm", reparameterized=bool(ctx["reparameterized"])),
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
        ))
    return result
