"""baidu-research/DeepBench cuDNN convolution timings on NVIDIA GPUs (`results/**/DeepBench_NV_*.xlsx`).

Read from the mirror's `DERIVED_conv_results.csv`: one row per Convolution data row of every NVIDIA result
sheet, columns mapped by header name and values copied unchanged from the workbooks (see the mirror's
SOURCE.md; no xlsx reader is a dependency of this project). Each row is one conv problem timed alone by
`code/nvidia/conv_bench.cu`: one warm-up call, then the mean of 300 back-to-back calls (ms), pure cuDNN kernel
time (no framework, no bias/activation). Training sheets time the forward pass, the gradient w.r.t. the input
(`wrt Inputs` -> conv_bwd_data) and w.r.t. the filter (`wrt Parameters` -> conv_bwd_filter) separately; the
Total column is their sum and not a row. Inference sheets time the forward pass only, in int8.

Mapping (DeepBench's names): h=H, w=W (input height/width; W is time for speech), c=C, n=N, k=K (filters),
r=R (filter height), s=S (filter width), pad_h/pad_w, stride_h/stride_w = vertical/horizontal stride;
dilation 1 and groups 1 (conv_bench has neither). P/Q are not used (swapped and unfloored in the 1080Ti,
P100 and TitanXp training sheets); the output size is recomputed by `layers.conv_cost`.

Padding. conv_bench prints the problem as listed but times a padded one (README "Server Deployment" and the
code at the commit of each workbook): int8 pads C, H and W to multiples of 4 when any of them is not (the
sheets' `Padded Kernels` = 1); with cuDNN >= 7 (Tensor-Core build, the default there) fp16 pads C and K to
multiples of 8 and int8 pads C and K to multiples of 32 (INT8x32 on the T4) when C or K is not. The time is
for the padded problem, so such rows are kept with the padded shape (`executed_shape`); FLOPs and bytes then
count the work the kernel really did.

Precision: "Float" -> fp32 (NCHW); P100 "Psuedo FP16" (fp16 storage, fp32 math) and V100/T4 "FP16 ip, Mixed
math" (tensor-op math, NHWC) -> fp16; inference "Int8 multiplication, 32 bit accumulation" -> int8. library is
"cuda <v> / cudnn <v>" from the Specs sheet; kernel is the forward algorithm where the sheet names it.

Accounting: `n_read` counts (CSV row, op) slots: 3 per training row, 1 per inference row, 1 per row whose mode
cannot be read. Every slot ends as one layer row or one quarantine record (row_key `line <n>:<op>`), so
n_read == len(rows) + len(quarantine). Cells marked `N/A*` (the input gradient of input layers, excluded by
DeepBench: footnote of the sheets) and blank cells (not run) are quarantined with that reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..gpus import resolve_device
from ..layers import INPUT_COLUMNS
from ..records import ParseResult, quarantined, read_csv_rows, row_problem, to_float

SOURCE = "deepbench"
MIRROR_DIR = "baidu-research-DeepBench"
DERIVED = f"{MIRROR_DIR}/DERIVED_conv_results.csv"
# Time column of each op; training rows have all three, inference rows the forward one.
OP_TIME = {"conv_fwd": "fwd_ms", "conv_bwd_data": "bwd_inputs_ms", "conv_bwd_filter": "bwd_params_ms"}
MODE_OPS = {"train": ("conv_fwd", "conv_bwd_data", "conv_bwd_filter"), "inference": ("conv_fwd",)}
# Schema column -> derived-CSV column; whole numbers. DeepBench: R = filter height, S = filter width.
SHAPE_FIELDS = {"n": "N", "c": "C", "h": "H", "w": "W", "k": "K", "r": "R", "s": "S", "stride_h": "stride_h",
                "stride_w": "stride_w", "pad_h": "pad_h", "pad_w": "pad_w"}
# Sheet precision note (cells B1/B2) -> precision.
PRECISION_NOTES = {
    "Float": "fp32",
    "16 bit inputs, 32 bit multiplication, 32 bit addition": "fp16",  # P100 "Psuedo FP16": fp32 math
    "16 bit inputs, 16 bit multiplication, 32 bit addition": "fp16",  # V100/T4: tensor-op math, fp32 accumulate
    "GEMM, Conv: Int8 multiplication, 32 bit accumulation ; Sparse Ops, RNN: single precision": "int8",
}
REQUIRED = ["source_file", "sheet", "precision_note", "mode", "gpu_model", "cuda_version", "cudnn_version",
            *SHAPE_FIELDS.values(), *OP_TIME.values(), "fwd_algo", "padded_kernels"]
FWD_ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
             "WINOGRAD_NONFUSED")
# Two V100/T4 FP32 cells hold the algorithm name cut at the front; only IMPLICIT_PRECOMP_GEMM ends this way.
ALGO_REPAIRS = {"LICIT_PRECOMP_GEMM": "IMPLICIT_PRECOMP_GEMM"}
NOT_REPORTED = "N/A*"


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def executed_shape(c: int, h: int, w: int, k: int, precision: str, cudnn_major: int) -> tuple[int, int, int, int]:
    """(c, h, w, k) of the problem conv_bench really timed, from the listed one (its padding rules)."""
    c0, k0 = c, k
    if precision == "int8" and (c % 4 or h % 4 or w % 4):
        c, h, w = _round_up(c, 4), _round_up(h, 4), _round_up(w, 4)
    if cudnn_major >= 7 and precision in ("fp16", "int8"):  # USE_TENSOR_CORES defaults to 1 with cuDNN >= 7
        multiple = 8 if precision == "fp16" else 32
        if c0 % multiple or k0 % multiple:
            c, k = _round_up(c, multiple), _round_up(k, multiple)
    return c, h, w, k


def int8_padding_flag(c: int, h: int, w: int) -> str:
    """What the sheets' `Padded Kernels` column says for an int8 problem (the multiple-of-4 rule)."""
    return "1" if (c % 4 or h % 4 or w % 4) else "0"


def _whole(raw: dict[str, str], column: str) -> tuple[int | None, str | None]:
    text = raw.get(column, "").strip()
    value = to_float(text)
    if value is None or not math.isfinite(value):
        return None, f"non-numeric {column}: {text!r}" if text else f"missing {column}"
    if value != int(value):
        return None, f"{column} is not a whole number: {text!r}"
    return int(value), None


def _cudnn_major(text: str) -> int | None:
    head = text.strip().split(".")[0]
    return int(head) if head.isdigit() else None


def _row_context(raw: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """Shape, precision and library of one CSV row, or the reason the row cannot be used."""
    precision = PRECISION_NOTES.get(raw["precision_note"].strip())
    if precision is None:
        return None, f"unknown precision note: {raw['precision_note']!r}"
    shape: dict[str, Any] = {}
    for field, column in SHAPE_FIELDS.items():
        value, problem = _whole(raw, column)
        if problem:
            return None, problem
        shape[field] = value
    cudnn_major = _cudnn_major(raw["cudnn_version"])
    if cudnn_major is None and precision != "fp32":
        return None, f"cannot tell DeepBench's padding rule: cudnn version {raw['cudnn_version']!r}"
    if precision == "int8":
        flag = raw["padded_kernels"].strip()
        expected = int8_padding_flag(shape["c"], shape["h"], shape["w"])
        if flag != expected:
            return None, f"Padded Kernels {flag!r} disagrees with the multiple-of-4 rule ({expected})"
    shape["c"], shape["h"], shape["w"], shape["k"] = executed_shape(
        shape["c"], shape["h"], shape["w"], shape["k"], precision, cudnn_major or 0)
    library = f"cuda {raw['cuda_version'].strip()} / cudnn {raw['cudnn_version'].strip()}"
    return {"precision": precision, "library": library, **shape}, None


def _latency(raw: dict[str, str], op: str) -> tuple[float | None, str | None]:
    column = OP_TIME[op]
    text = raw.get(column, "").strip()
    if text == NOT_REPORTED:
        return None, f"{column} is {NOT_REPORTED}: DeepBench excludes this gradient for input layers"
    if not text:
        return None, f"no {column} (blank cell: not run)"
    value = to_float(text)
    if value is None or not math.isfinite(value):
        return None, f"non-numeric {column}: {text!r}"
    if value <= 0:
        return None, f"non-positive {column}: {text}"
    return value, None


def _kernel(raw: dict[str, str], op: str) -> str:
    """The cuDNN forward algorithm where the sheet names it (backward algorithms are not reported)."""
    algo = raw.get("fwd_algo", "").strip()
    if op != "conv_fwd" or not algo:
        return ""
    algo = ALGO_REPAIRS.get(algo, algo)
    return f"CUDNN_CONVOLUTION_FWD_ALGO_{algo}" if algo in FWD_ALGOS else algo


def _reject(result: ParseResult, rel: str, line_no: int, ops: tuple[str, ...], reason: str, raw: Any) -> None:
    """One quarantine record per op slot of a row (row_key `line <n>:<op>`, or `line <n>` if no op is known)."""
    for op in ops:
        key = f"line {line_no}:{op}" if op else f"line {line_no}"
        result.quarantine.append(quarantined(SOURCE, rel, key, reason, raw))


def parse_file(path: Path, rel: str, commit: str) -> ParseResult:
    """Parse the derived conv CSV (`rel` its mirror-relative path). Unknown GPU strings stop with an error."""
    result = ParseResult()
    header, rows = read_csv_rows(path)
    missing_cols = [c for c in REQUIRED if c not in header]
    for line_no, fields in rows:
        raw = dict(zip(header, fields, strict=False))
        ops = MODE_OPS.get(raw.get("mode", "").strip())
        result.n_read += len(ops) if ops else 1
        problem = row_problem(header, fields, missing_cols)
        if problem or ops is None:
            _reject(result, rel, line_no, ops or ("",), problem or f"unknown mode: {raw.get('mode', '')!r}", raw)
            continue
        device = resolve_device(raw["gpu_model"], where=f"{rel} line {line_no} ({raw['source_file']})")
        if device.gpu is None or device.is_cpu:
            _reject(result, rel, line_no, ops, device.excluded_reason or "not a GPU", raw)
            continue
        context, problem = _row_context(raw)
        if context is None:
            _reject(result, rel, line_no, ops, str(problem), raw)
            continue
        for op in ops:
            latency, problem = _latency(raw, op)
            if problem:
                _reject(result, rel, line_no, (op,), problem, raw)
                continue
            row = {
                "layer_id": f"{SOURCE}:{rel}:{line_no}:{op}",
                "source": SOURCE,
                "source_file": rel,
                "upstream_commit": commit,
                "gpu": device.gpu,
                "device_raw": raw["gpu_model"].strip(),
                "framework": "cudnn",
                "framework_version": "",
                "op": op,
                "dilation_h": 1,
                "dilation_w": 1,
                "groups": 1,
                "latency_ms": latency,
                "kernel": _kernel(raw, op),
                "grid": "",
                "block": "",
                **context,
            }
            result.rows.append({col: row[col] for col in INPUT_COLUMNS})
    return result


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Parse the DeepBench mirror (`files`: mirror-relative path -> local path; `commits`: path -> commit)."""
    path = files.get(DERIVED)
    if path is None:
        raise FileNotFoundError(f"{DERIVED} is not in the manifest")
    commit = commits.get(DERIVED) or next(
        (c for rel, c in sorted(commits.items()) if rel.startswith(MIRROR_DIR + "/") and c), "")
    return parse_file(path, DERIVED, commit)
