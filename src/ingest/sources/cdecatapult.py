"""CDECatapult/ml-performance-prediction: randomly drawn single conv2d layers timed with TensorFlow 1.10 on 6 GPUs.

Input: `DERIVED_conv_benchmarks.csv.gz`, all raw `benchmark_convolution__*.pkl` result files of the repository
concatenated (see the mirror's SOURCE.md; `gpu_folder`, `source_file` = upstream pickle path and `row` = 0-based
row in that pickle were added by the conversion). The whole-VGG16 CSVs under `benchmark/data/` are network-level
and not read here.

What a row measured (prediction_model/Generate_train_data/benchmark_conv.py, docker tensorflow:1.10.1-gpu):
`tf.layers.conv2d` on an NHWC `tf.Variable` of ones, fp32, timed as wall-clock / 50 `sess.run` calls after 5
warm-up calls; `timeUsed_median` (ms, used as latency_ms) is the median of 5 repetitions of that mean. The time
therefore includes TF session and launch overhead (fastest rows ~0.14 ms), TF's NHWC<->NCHW transposes around
cuDNN, and the layer's epilogue: bias add when `use_bias` and the activation `activation_fct` (0 none, 1 relu,
2 tanh, 3 sigmoid), about half the rows each. The schema has no column for that epilogue; `epilogue` below
gives it per row (e.g. "bias+relu") should the table get one.

Mapping: optimizer 0 (forward only) -> op `conv_fwd`. optimizer 1-6 rows time forward + backward (data and filter
gradients) + the optimizer's update of one layer, which is none of `layers.OPS`: they are quarantined with that
reason (note: the input and target there are trainable `tf.Variable`s, so the update also rewrites them).

Shapes: n = batchsize, h = w = matsize, c = channels_in, k = channels_out, r = s = kernelsize,
stride_h = stride_w = strides, dilation 1, groups 1. padding 0 = VALID -> pad 0; padding 1 = SAME -> TF's total
padding per axis max((ceil(H/S) - 1) * S + R - H, 0), recorded as pad_h = floor(total / 2) before and
pad_h_end = total - pad_h after (TF puts the odd pixel at the bottom/right), so `layers.output_size` gives exactly
ceil(H/S). `epilogue` records the bias and activation the timed call ran after the conv (about 75 % of rows).
TF 1.10 autotunes cuDNN algorithms, so FFT and Winograd kernels make ~1 % of rows (stride 1, 5x5 / 7x7) run
faster than the direct FLOPs at fp32 peak allow.

GPU: `gpu_folder` resolves through source-qualified aliases (`cdecatapult <folder>` in gpus.GPU_ALIASES), because
the bare folder name "V100" is already Lambda's V100 (SXM3 32 GB). device_raw keeps the folder name as written.
source_file is the mirror-relative path of the derived file (the file in the manifest, checked by sha256, like
every other source); the upstream pickle path and its row are in layer_id `cdecatapult:<pickle path>:<row>`.

Bad rows (missing column or value, non-numbers, impossible values) are quarantined with the column named; a file
that cannot be read as a whole (truncated gzip, malformed CSV) raises ValueError naming it.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..gpus import resolve_device
from ..layers import INPUT_COLUMNS
from ..records import ParseResult, quarantined

SOURCE = "cdecatapult"
DERIVED = "CDECatapult-ml-performance-prediction/DERIVED_conv_benchmarks.csv.gz"
FRAMEWORK = "tensorflow"
FRAMEWORK_VERSION = "1.10"  # docker image tensorflow/tensorflow:1.10.1-gpu (Dockerfile.conv)
DEVICE_PREFIX = "cdecatapult "
LATENCY_COLUMN = "timeUsed_median"
ACTIVATIONS = {0: "", 1: "relu", 2: "tanh", 3: "sigmoid"}
OPTIMIZERS = {0: "none (forward only)", 1: "GradientDescent", 2: "Adadelta", 3: "Adagrad", 4: "Momentum", 5: "Adam",
              6: "RMSProp"}
# Integer columns and their smallest allowed value; ALLOWED restricts codes to the ones the benchmark draws.
INT_COLUMNS = {"row": 0, "batchsize": 1, "matsize": 1, "kernelsize": 1, "channels_in": 1, "channels_out": 1,
               "strides": 1, "padding": 0, "optimizer": 0, "activation_fct": 0, "precision": 1}
ALLOWED = {"padding": {0, 1}, "optimizer": set(OPTIMIZERS), "activation_fct": set(ACTIVATIONS), "precision": {32}}
REQUIRED = ["gpu_folder", "source_file", *INT_COLUMNS, "use_bias", LATENCY_COLUMN]
TRAIN_STEP_REASON = ("optimizer {code} ({name}): time is forward + backward + weight update of one layer "
                     "(a training step), not one of layers.OPS")


def same_padding(size: np.ndarray, kernel: np.ndarray, stride: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow SAME padding per axis: (pad before = floor(total / 2), total), vectorised."""
    out = -(-size // stride)  # ceil(size / stride), the SAME output size
    total = np.maximum((out - 1) * stride + kernel - size, 0)
    return total // 2, total


def epilogue(frame: pd.DataFrame) -> pd.Series:
    """What the timed layer ran after the conv: '', 'bias', 'relu', 'bias+relu', ... (from use_bias, activation)."""
    bias = frame["use_bias"].map({True: "bias", False: "", "True": "bias", "False": ""}).fillna("")
    act = pd.to_numeric(frame["activation_fct"], errors="coerce").map(ACTIVATIONS).fillna("")
    both = bias.ne("") & act.ne("")
    return (bias + np.where(both, "+", "") + act).astype(str)


def _read(path: Path, rel: str) -> pd.DataFrame:
    """The whole CSV (gzip when the name says so); a file that cannot be read entirely raises ValueError."""
    try:
        return pd.read_csv(path, compression="infer", low_memory=False, skip_blank_lines=False)
    except (EOFError, OSError, zlib.error, gzip.BadGzipFile, pd.errors.ParserError, pd.errors.EmptyDataError,
            UnicodeDecodeError) as exc:
        raise ValueError(f"{rel}: cannot read the file ({type(exc).__name__}: {exc})") from exc


def _problems(frame: pd.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per row, the first reason it cannot be used ('' when fine), and the numeric columns (float arrays)."""
    reason = np.full(len(frame), "", dtype=object)
    free = np.ones(len(frame), dtype=bool)

    def flag(mask: Any, text: str | Callable[[np.ndarray], list[str]]) -> None:
        hit = np.asarray(mask, dtype=bool) & free
        if hit.any():
            reason[hit] = text(hit) if callable(text) else text
            free[hit] = False

    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        flag(free, f"missing column: {missing[0]}")
        return reason, {}
    for col in ("gpu_folder", "source_file"):
        raw = frame[col]
        flag(raw.isna().to_numpy() | raw.astype(str).str.strip().eq("").to_numpy(), f"missing value in column {col}")
    nums: dict[str, np.ndarray] = {}
    for col in [*INT_COLUMNS, LATENCY_COLUMN]:
        raw = frame[col]
        num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        flag(raw.isna().to_numpy(), f"missing value in column {col}")
        flag(np.isnan(num), lambda hit, raw=raw, col=col: [f"non-numeric {col}: {v!r}" for v in raw[hit]])
        nums[col] = num
    with np.errstate(invalid="ignore"):
        for col, low in INT_COLUMNS.items():
            num = np.nan_to_num(nums[col], nan=low)
            flag(~np.isfinite(num) | (num != np.floor(num)), f"impossible {col}: not a whole number")
            flag(num < low, f"impossible {col}: < {low}")
            if col in ALLOWED:
                flag(~np.isin(num, list(ALLOWED[col])), f"impossible {col}: not one of {sorted(ALLOWED[col])}")
        lat = nums[LATENCY_COLUMN]
        flag(np.isinf(lat) | (lat <= 0), f"impossible {LATENCY_COLUMN}: not a finite time > 0 ms")
    bias = frame["use_bias"]
    flag(bias.isna().to_numpy(), "missing value in column use_bias")
    flag(~bias.astype(str).isin(["True", "False"]).to_numpy(),
         lambda hit: [f"impossible use_bias: {v!r} (not True/False)" for v in bias[hit]])
    flag(nums["optimizer"] != 0, lambda hit: [TRAIN_STEP_REASON.format(code=int(o), name=OPTIMIZERS[int(o)])
                                              for o in nums["optimizer"][hit]])
    return reason, nums


def _records(columns: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Row dicts from column arrays (or one constant per column), as plain Python values."""
    lists = [np.asarray(v).tolist() if isinstance(v, np.ndarray | pd.Series) else [v] * n for v in columns.values()]
    return [dict(zip(columns, vals, strict=True)) for vals in zip(*lists, strict=True)]


def parse_file(path: Path, rel: str, commit: str) -> ParseResult:
    """Parse the derived conv benchmark CSV (vectorised); bad rows go to quarantine with the column named."""
    frame = _read(path, rel)
    reason, nums = _problems(frame)
    ok = reason == ""
    # Resolve each device folder once; an unknown one stops the ingest (UnknownGPUError names it).
    folder = frame["gpu_folder"].astype(str).str.strip().to_numpy(dtype=object) if nums else None
    gpu = np.full(len(frame), "", dtype=object)
    for name in sorted(set(folder[ok])) if nums else ():
        device = resolve_device(DEVICE_PREFIX + name, where=f"{rel} gpu_folder {name!r}")
        rows = ok & (folder == name)
        if device.gpu is None or device.is_cpu:
            reason[rows] = device.excluded_reason or f"not a GPU: {name!r}"
        else:
            gpu[rows] = device.gpu
    ok = reason == ""

    # Row key: the upstream pickle and row where both are readable, else the line in the derived CSV.
    keys = np.array([f"line {i + 2}" for i in range(len(frame))], dtype=object)
    if nums:
        upstream = frame["source_file"].to_numpy(dtype=object, na_value=None)
        row = nums["row"]
        usable = np.array([isinstance(u, str) for u in upstream]) & np.isfinite(row) & (row == np.floor(row))
        keys[usable] = [f"{SOURCE}:{u.strip()}:{int(r)}" for u, r in zip(upstream[usable], row[usable], strict=True)]

    result = ParseResult(n_read=len(frame))
    bad = ~ok
    raws = _records({c: frame[c].to_numpy(dtype=object)[bad] for c in frame.columns}, int(bad.sum()))
    result.quarantine = [quarantined(SOURCE, rel, key, why, raw)
                         for raw, key, why in zip(raws, keys[bad], reason[bad], strict=True)]
    if not ok.any():
        return result

    v = {col: nums[col][ok].astype(np.int64) for col in INT_COLUMNS}
    size, kernel, stride = v["matsize"], v["kernelsize"], v["strides"]
    before, total = same_padding(size, kernel, stride)
    pad = np.where(v["padding"] == 1, before, 0)
    pad_end = np.where(v["padding"] == 1, total - before, 0)  # TF puts the odd pixel at the bottom/right
    columns = {
        "layer_id": keys[ok], "source": SOURCE, "source_file": rel, "upstream_commit": commit, "gpu": gpu[ok],
        "device_raw": folder[ok], "framework": FRAMEWORK, "framework_version": FRAMEWORK_VERSION, "library": "",
        "op": "conv_fwd", "precision": "fp32",
        "n": v["batchsize"], "c": v["channels_in"], "h": size, "w": size, "k": v["channels_out"],
        "r": kernel, "s": kernel, "stride_h": stride, "stride_w": stride, "pad_h": pad, "pad_w": pad,
        "pad_h_end": pad_end, "pad_w_end": pad_end, "epilogue": epilogue(frame.loc[ok]).to_numpy(dtype=object),
        "dilation_h": 1, "dilation_w": 1, "groups": 1, "latency_ms": nums[LATENCY_COLUMN][ok],
        "kernel": "", "grid": "", "block": "",
    }
    result.rows = _records({c: columns[c] for c in INPUT_COLUMNS + ["pad_h_end", "pad_w_end", "epilogue"]},
                           int(ok.sum()))
    return result


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Parse the derived conv benchmark file if `files` (mirror-relative path -> local path) has it."""
    if DERIVED not in files:
        return ParseResult()
    return parse_file(files[DERIVED], DERIVED, commits.get(DERIVED, ""))
