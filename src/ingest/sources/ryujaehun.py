"""ryujaehun/pytorch-gpu-benchmark: per-iteration milliseconds, one column per torchvision model.

Each (file, model column) is one measured configuration. The scripts run warm-up iterations before timing
(5 in the 2020-2021 script, config.json WARM_UP); we additionally drop the first `warmup` recorded samples of
each column and report the median and inter-quartile range of the rest, with the sample count.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, read_csv_rows, to_float, workload

SOURCE = "ryujaehun"
NAME_PATTERN = re.compile(
    r"^(?P<device>.+?)_(?:(?P<gpus>\d+)_gpus__)?(?P<precision>float|single|half|double)_model_"
    r"(?P<mode>inference|training|train)_benchmark(?:\((?P<copy>\d)\))?\.csv$"
)
PRECISIONS = {"float": "fp32", "single": "fp32", "half": "fp16", "double": "fp64"}
# Folder -> (batch size per GPU, CUDA version) from config.json / system_info.txt / the scripts' defaults.
BATCH_PER_GPU = {
    "master/results/dgx-a100": (12, "11.1"),
    "master/results/TitanRTX": (12, "10.2"),
    "master/results/TITANXP": (12, "10.2"),
    "master/results/2080ti(2)": (12, "10.0"),
    "master/new_results": (12, "10.0"),
    "branch-dgx/results": (15, ""),
    "branch-ti/results": (15, ""),
}
UNRECORDED_BATCH = "missing batch size: not recorded for the 2018 15-model runs (script default 12, README 16)"


def batch_rule(folder: str, name: str) -> tuple[int | None, str]:
    """(batch size per GPU or None when the files do not record it, CUDA version)."""
    if folder in BATCH_PER_GPU:
        return BATCH_PER_GPU[folder]
    if folder == "master/results/2080TI" and "_1_gpus__" in name:
        return 12, "10.0"
    return None, ""


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def parse_file(path: Path, rel: str, commit: str, warmup: int = 1) -> ParseResult:
    """Parse one per-iteration file into one row per model column."""
    result = ParseResult()
    rel_in_source = rel.split("/", 1)[1]
    folder = rel_in_source.rsplit("/", 1)[0]
    if path.name == "dgx.csv":
        return _summary_table(path, rel)
    match = NAME_PATTERN.match(path.name)
    if not match:
        return result
    g = match.groupdict()
    device = resolve_device(g["device"], where=rel)
    num_gpus = int(g["gpus"] or 1)
    per_gpu, cuda = batch_rule(folder, path.name)
    header, rows = read_csv_rows(path)
    mode = "inference" if g["mode"] == "inference" else "training"
    for col, name in enumerate(header):
        result.n_read += 1
        key = f"column {name}"
        samples: list[float] = []
        problem = None
        for line_no, fields in rows:
            if col >= len(fields) or not fields[col].strip():
                problem = f"truncated: no sample for {name} at line {line_no}"
                break
            value = to_float(fields[col])
            if value is None:
                problem = f"non-numeric sample at line {line_no}: {fields[col]!r}"
                break
            samples.append(value)
        raw = {"column": name, "samples": [fields[col] if col < len(fields) else None for _, fields in rows]}
        if problem is None and per_gpu is None:
            problem = UNRECORDED_BATCH
        if problem is None and len(samples) <= warmup:
            problem = f"too few samples: {len(samples)} with {warmup} warm-up"
        if problem:
            result.quarantine.append(quarantined(SOURCE, rel, key, problem, raw))
            continue
        kept = samples[warmup:]
        median = statistics.median(kept)
        q1, q3 = _quartiles(kept)
        batch = per_gpu * num_gpus
        result.rows.append(
            {
                "measurement_id": f"{SOURCE}:{rel}:{name}",
                "source": SOURCE,
                "source_file": rel,
                "upstream_commit": commit,
                "gpu": device.gpu,
                "device_raw": g["device"],
                "is_cpu": device.is_cpu,
                "num_gpus": num_gpus,
                "framework": "pytorch",
                "framework_version": "",
                "cuda_version": cuda,
                "precision": PRECISIONS[g["precision"]],
                "memory_layout": "nchw",
                "compile_mode": "eager",
                **workload(name, "torchvision"),
                "img_size": 224,
                "batch_size": batch,
                "mode": mode,
                "latency_ms": median,
                "throughput": batch / (median / 1000.0) if median > 0 else None,
                "latency_stat": "median",
                "latency_spread_ms": q3 - q1,
                "n_samples": len(kept),
                "param_count_m": None,
                "gmacs": None,
                "activations_m": None,
                "_raw": raw,
                "_row_key": key,
            }
        )
    return result


def _summary_table(path: Path, rel: str) -> ParseResult:
    """master/results/dgx.csv: an aggregate without stated units; read and quarantined, never guessed."""
    result = ParseResult()
    header, rows = read_csv_rows(path)
    for line_no, fields in rows:
        result.n_read += 1
        raw = dict(zip(header, fields, strict=False))
        result.quarantine.append(
            quarantined(SOURCE, rel, f"line {line_no}", "summary table without stated units", raw)
        )
    return result
