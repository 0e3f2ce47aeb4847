"""Our own profiler's rows (`data/own/*.csv`, written by `python -m src.profiling`) in the measurement schema."""

from __future__ import annotations

from pathlib import Path

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, read_csv_rows, row_problem, workload

SOURCE = "own"
REQUIRED = ("gpu", "model", "batch_size", "img_size", "latency_ms", "throughput", "precision", "mode")
TEXT_DEFAULTS = {
    "framework": "pytorch", "framework_version": "", "cuda_version": "", "memory_layout": "nchw",
    "compile_mode": "eager", "model_source": "torchvision", "latency_stat": "median", "device_raw": "",
}


def parse_file(path: Path, rel: str) -> ParseResult:
    """Parse one profiler CSV; its `gpu` column is the device name as torch reports it."""
    result = ParseResult()
    header, rows = read_csv_rows(path)
    missing = [c for c in REQUIRED if c not in header]
    for line_no, fields in rows:
        result.n_read += 1
        raw = dict(zip(header, fields, strict=False))
        key = f"line {line_no}"
        problem = row_problem(header, fields, missing)
        if problem:
            result.quarantine.append(quarantined(SOURCE, rel, key, problem, raw))
            continue
        device = resolve_device(raw.get("device_raw") or raw["gpu"], where=rel)
        row = {**TEXT_DEFAULTS, **{k: v for k, v in raw.items() if v != ""}}
        row.update(
            measurement_id=f"{SOURCE}:{rel}:{line_no}",
            source=SOURCE,
            source_file=rel,
            upstream_commit="",
            gpu=device.gpu,
            device_raw=raw.get("device_raw") or raw["gpu"],
            is_cpu=device.is_cpu,
            num_gpus=int(raw.get("num_gpus") or 1),
            **{k: v for k, v in workload(raw["model"], row["model_source"]).items() if k != "model_source"},
            _raw=raw,
            _row_key=key,
        )
        for optional in ("latency_spread_ms", "n_samples", "param_count_m", "gmacs", "activations_m"):
            row[optional] = raw.get(optional) or None
        result.rows.append(row)
    return result
