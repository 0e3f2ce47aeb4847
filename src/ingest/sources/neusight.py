"""sitar-lab/NeuSight conv2d layer timings: one forward `torch.nn.Conv2d` per row, on five GPUs.

Files: `scripts/asplos/data/dataset/train/collect/conv/p<torch>/<device name>.csv` (see the mirror's SOURCE.md).
Each row is one `Conv2d(Cin, Cout, k, stride, padding, bias=False)` forward under `torch.no_grad()` on a
`(B, Cin, S, S)` input, PyTorch 2.1.0 / CUDA 12.1 / cuDNN 8.9.2, `cudnn.benchmark = True`. Precision is true
fp32: the collector sets `torch.backends.cudnn.allow_tf32 = False`, so the A100 does not use TF32 tensor cores
(PyTorch's default would). Latency = mean of the 5 fastest of 25 CUDA-event-timed calls, in ms. Kernel / grid /
block are the main conv kernel the profiler saw and its launch configuration. Dropped columns: Kernels (all
kernels of the op), Warps/Blocks per SM (derived by the authors), CUDA Version (always cu121).

Mapping: n=B, c=Input_Channel, h=w=Input_Size, k=Output_Channel, r=s=Kernel_Szie, stride=Stride, pad=Padding,
dilation 1, groups 1 (nn.Conv2d defaults, not varied by the collector). Rows that cannot be read (short row,
a required column missing from the header, a field that is not a number) are quarantined with the column named.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ..gpus import UnknownGPUError, resolve_device
from ..layers import INPUT_COLUMNS
from ..records import ParseResult, quarantined, read_csv_rows, row_problem, to_float

SOURCE = "neusight"
# Mirror-relative paths of the measurement files (the device_configs JSONs are specs, not measurements).
PATH_PATTERN = re.compile(r"^sitar-lab-NeuSight/(?:.+/)?collect/conv/[^/]+/[^/]+\.csv$")
# Schema column -> CSV column, whole numbers.
SHAPE_FIELDS = {"n": "B", "c": "Input_Channel", "k": "Output_Channel", "r": "Kernel_Szie", "h": "Input_Size",
                "stride": "Stride", "pad": "Padding"}
GRID = ("Grid x", "Grid y", "Grid z")
BLOCK = ("Block x", "Block y", "Block z")
# Without these a row is no measurement; the metadata columns (Device, versions, kernel, launch) may be absent.
REQUIRED = ["OPName", "Latency", *SHAPE_FIELDS.values()]


def cudnn_version(code: str) -> str:
    """cuDNN's CUDNN_VERSION integer as dotted text: '8902' -> '8.9.2' (v8: M*1000+m*100+p; v9: M*10000+m*100+p)."""
    text = code.strip()
    if not text.isdigit():
        return text
    value = int(text)
    major, rest = (value // 10000, value % 10000) if value >= 10000 else (value // 1000, value % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def torch_version(text: str) -> str:
    """'p2.1.0' (NeuSight's folder tag) -> '2.1.0'."""
    text = text.strip()
    return text[1:] if re.fullmatch(r"p\d+(?:\.\d+)*", text) else text


def layer_id(rel: str, line_no: int) -> str:
    """'neusight:<file name>:<line number>' (one folder, p2.1.0, so file names are unique)."""
    return f"{SOURCE}:{Path(rel).name}:{line_no}"


def _whole(raw: dict[str, str], column: str) -> tuple[int | None, str | None]:
    """A whole number from a CSV field, or the reason it is not one (naming the column)."""
    text = raw.get(column, "")
    value = to_float(text)
    if value is None:
        return None, f"non-numeric {column}: {text!r}"
    if not math.isfinite(value) or value != math.floor(value):
        return None, f"not a whole number {column}: {text!r}"
    return int(value), None


def _launch(raw: dict[str, str], header: list[str], columns: tuple[str, ...]) -> tuple[str, str | None]:
    """'x,y,z' of a launch configuration ('' when the file has no such columns), or the reason it is unreadable."""
    if not all(c in header for c in columns):
        return "", None
    parts = []
    for column in columns:
        value, problem = _whole(raw, column)
        if problem:
            return "", problem
        parts.append(str(value))
    return ",".join(parts), None


def parse_file(path: Path, rel: str, commit: str) -> ParseResult:
    """Parse one NeuSight conv CSV; an unknown device string raises UnknownGPUError naming it."""
    result = ParseResult()
    header, rows = read_csv_rows(path)
    missing_cols = [c for c in REQUIRED if c not in header]
    file_device = Path(rel).stem  # the collector names each file after torch.cuda.get_device_name()
    try:
        file_gpu = resolve_device(file_device).gpu
    except UnknownGPUError:
        file_gpu = None  # a renamed file: the Device column alone decides
    for line_no, fields in rows:
        result.n_read += 1
        raw = dict(zip(header, fields, strict=False))
        key = layer_id(rel, line_no)  # the same key validate_layers gives the rows it rejects
        row = row_problem(header, fields, missing_cols) or _row(raw, header, rel, line_no, commit, file_device,
                                                                  file_gpu)
        if isinstance(row, str):
            result.quarantine.append(quarantined(SOURCE, rel, key, row, raw))
        else:
            result.rows.append(row)
    return result


def _row(raw: dict[str, str], header: list[str], rel: str, line_no: int, commit: str, file_device: str,
         file_gpu: str | None) -> dict[str, Any] | str:
    """The layer row of one CSV record, or the reason it cannot be read."""
    op = raw["OPName"].strip()
    if op != "conv":
        return f"OPName {op!r} is not conv"
    latency = to_float(raw["Latency"])
    if latency is None:
        return f"non-numeric Latency: {raw['Latency']!r}"
    shape: dict[str, int] = {}
    for name, column in SHAPE_FIELDS.items():
        value, problem = _whole(raw, column)
        if problem:
            return problem
        shape[name] = value
    grid, problem = _launch(raw, header, GRID)
    if problem:
        return problem
    block, problem = _launch(raw, header, BLOCK)
    if problem:
        return problem
    device_raw = raw.get("Device", "").strip() or file_device
    gpu = resolve_device(device_raw, where=f"{rel}:{line_no}").gpu  # raises UnknownGPUError naming the string
    if file_gpu is not None and gpu != file_gpu:
        return f"Device {device_raw!r} ({gpu}) disagrees with the file name {file_device!r} ({file_gpu})"
    cudnn = raw.get("CUDNN Version", "").strip()
    row = {
        "layer_id": layer_id(rel, line_no),
        "source": SOURCE,
        "source_file": rel,
        "upstream_commit": commit,
        "gpu": gpu,
        "device_raw": device_raw,
        "framework": "pytorch",
        "framework_version": torch_version(raw.get("Torch Version", "")),
        "library": f"cudnn {cudnn_version(cudnn)}" if cudnn else "",
        "op": "conv_fwd",
        "precision": "fp32",
        "n": shape["n"], "c": shape["c"], "h": shape["h"], "w": shape["h"], "k": shape["k"],
        "r": shape["r"], "s": shape["r"], "stride_h": shape["stride"], "stride_w": shape["stride"],
        "pad_h": shape["pad"], "pad_w": shape["pad"], "dilation_h": 1, "dilation_w": 1, "groups": 1,
        "latency_ms": latency,
        "kernel": raw.get("Kernel Name", "").strip(),
        "grid": grid,
        "block": block,
    }
    return {col: row[col] for col in INPUT_COLUMNS}


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Parse every NeuSight conv CSV among `files` (mirror-relative path -> local path)."""
    result = ParseResult()
    for rel in sorted(files):
        if PATH_PATTERN.match(rel):
            result.extend(parse_file(files[rel], rel, commits.get(rel, "")))
    return result
