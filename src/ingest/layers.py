"""Single-layer measurements (conv timings of NeuSight, DeepBench, CDECatapult): one schema, one cost model.

Why a table of its own: a layer row is a convolution of a given shape timed alone on a GPU, not a network; it
lets a predictor learn how efficiently each GPU runs a conv of a given shape (measured / roofline time), and the
per-layer tables of whole CNNs are priced with the same FLOP and byte formulas below, so both sides agree.

Every parser returns rows as dicts with LAYER_COLUMNS (FLOPs, bytes and output size are filled here by
`complete`), and quarantines with `records.quarantined`; `validate_layers` checks values and drops duplicates
into the quarantine with a reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .records import quarantined

# op: forward convolution, gradient w.r.t. the input (data), gradient w.r.t. the weights (filter).
OPS = ("conv_fwd", "conv_bwd_data", "conv_bwd_filter")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}

# Given by the parser (kernel / grid / block / library may be "" where the source does not say).
INPUT_COLUMNS = [
    "layer_id", "source", "source_file", "upstream_commit", "gpu", "device_raw", "framework", "framework_version",
    "library", "op", "precision", "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w",
    "dilation_h", "dilation_w", "groups", "latency_ms", "kernel", "grid", "block",
]
INT_COLUMNS = ["n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w", "pad_h_end",
               "pad_w_end", "dilation_h", "dilation_w", "groups"]
# Optional (a parser may leave them out): end-side padding where it differs from the begin side (TensorFlow
# SAME puts the odd pixel at the bottom/right; default = pad_h / pad_w), what ran fused after the conv in the timed
# call ('', 'bias', 'relu', 'bias+relu', ...), and a free-text note (e.g. the shape was padded for int8).
OPTIONAL_COLUMNS = {"pad_h_end": None, "pad_w_end": None, "epilogue": "", "note": ""}
# Filled by `validate_layers`.
DERIVED_COLUMNS = ["out_h", "out_w", "flops", "bytes_in", "bytes_weight", "bytes_out", "bytes_total"]
LAYER_COLUMNS = INPUT_COLUMNS + list(OPTIONAL_COLUMNS) + DERIVED_COLUMNS
# What makes two rows the same measurement (duplicates across files of one source are quarantined).
SHAPE_KEY = ["source", "gpu", "framework", "op", "precision", "n", "c", "h", "w", "k", "r", "s", "stride_h",
             "stride_w", "pad_h", "pad_w", "pad_h_end", "pad_w_end", "dilation_h", "dilation_w", "groups",
             "epilogue"]


def output_size(size: np.ndarray, kernel: np.ndarray, stride: np.ndarray, pad: np.ndarray,
                dilation: np.ndarray, pad_end: np.ndarray | None = None) -> np.ndarray:
    """Spatial output size of a convolution (floor mode; padding `pad` before and `pad_end` after), vectorised."""
    pad_end = pad if pad_end is None else pad_end
    return (size + pad + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def conv_cost(df: pd.DataFrame) -> pd.DataFrame:
    """FLOPs and bytes of each conv row, the same formulas for every op (vectorised over rows).

    FLOPs = 2 * N * K * P * Q * (C / groups) * R * S (one multiply-add = 2 FLOPs); the data and filter gradients
    cost the same GEMM work as the forward pass. Bytes = input N*C*H*W + weights K*(C/groups)*R*S + output
    N*K*P*Q elements, each read or written once, times the precision's element size (a lower bound: the DRAM
    traffic of an ideal kernel).
    """
    v = {c: df[c].to_numpy(dtype=np.int64) for c in INT_COLUMNS}
    p = output_size(v["h"], v["r"], v["stride_h"], v["pad_h"], v["dilation_h"], v["pad_h_end"])
    q = output_size(v["w"], v["s"], v["stride_w"], v["pad_w"], v["dilation_w"], v["pad_w_end"])
    cpg = v["c"] // np.maximum(v["groups"], 1)
    bpe = df["precision"].map(BYTES_PER_ELEMENT).to_numpy(dtype=float)
    out = pd.DataFrame(index=df.index)
    out["out_h"], out["out_w"] = p, q
    out["flops"] = 2.0 * v["n"] * v["k"] * p * q * cpg * v["r"] * v["s"]
    out["bytes_in"] = v["n"].astype(float) * v["c"] * v["h"] * v["w"] * bpe
    out["bytes_weight"] = v["k"].astype(float) * cpg * v["r"] * v["s"] * bpe
    out["bytes_out"] = v["n"].astype(float) * v["k"] * p * q * bpe
    out["bytes_total"] = out["bytes_in"] + out["bytes_weight"] + out["bytes_out"]
    return out


def problems(df: pd.DataFrame) -> pd.Series:
    """Per row, the first reason it cannot be a real conv measurement ('' when fine), vectorised."""
    reason = pd.Series("", index=df.index, dtype=object)

    def flag(mask, text: str) -> None:
        mask = pd.Series(np.asarray(mask, dtype=bool), index=df.index)
        reason[mask & reason.eq("")] = text

    flag(~df["op"].isin(OPS), f"op not one of {OPS}")
    flag(~df["precision"].isin(PRECISIONS), f"precision not one of {PRECISIONS}")
    ints = df[INT_COLUMNS].apply(pd.to_numeric, errors="coerce")
    flag(ints.isna().any(axis=1), "a shape field is missing or not a number")
    ints = ints.fillna(0)
    flag((ints != np.floor(ints)).any(axis=1), "a shape field is not a whole number")
    positive = ["n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups"]
    flag((ints[positive] <= 0).any(axis=1), "a size, stride, dilation or group count is not > 0")
    flag((ints[["pad_h", "pad_w", "pad_h_end", "pad_w_end"]] < 0).any(axis=1), "negative padding")
    groups = ints["groups"].clip(lower=1)
    flag((ints["c"] % groups != 0) | (ints["k"] % groups != 0), "channels not divisible by groups")
    p = output_size(ints["h"], ints["r"], ints["stride_h"].clip(lower=1), ints["pad_h"], ints["dilation_h"],
                    ints["pad_h_end"])
    q = output_size(ints["w"], ints["s"], ints["stride_w"].clip(lower=1), ints["pad_w"], ints["dilation_w"],
                    ints["pad_w_end"])
    flag((p <= 0) | (q <= 0), "filter larger than the padded input (no output)")
    lat = pd.to_numeric(df["latency_ms"], errors="coerce")
    flag(lat.isna() | ~np.isfinite(lat) | (lat <= 0), "latency_ms missing, not a number or not > 0")
    flag(df["gpu"].isna() | df["gpu"].astype(str).eq(""), "no GPU")
    return reason


def validate_layers(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Rows -> (typed table with derived columns, quarantine records for bad values and duplicates)."""
    frame = pd.DataFrame(rows)
    missing = [c for c in INPUT_COLUMNS if c not in frame.columns]
    if rows and missing:
        raise KeyError(f"layer rows lack column(s) {missing} (a parser bug: see layers.INPUT_COLUMNS)")
    if frame.empty:
        return pd.DataFrame(columns=LAYER_COLUMNS), []
    for col, default in OPTIONAL_COLUMNS.items():
        if col not in frame.columns:
            frame[col] = default
    frame["pad_h_end"] = frame["pad_h_end"].where(frame["pad_h_end"].notna(), frame["pad_h"])
    frame["pad_w_end"] = frame["pad_w_end"].where(frame["pad_w_end"].notna(), frame["pad_w"])
    frame = frame[INPUT_COLUMNS + list(OPTIONAL_COLUMNS)]
    bad = problems(frame)
    quarantine = [quarantined(r["source"], r["source_file"], r["layer_id"], why, r)
                  for r, why in zip(frame.to_dict("records"), bad, strict=True) if why]
    good = frame.loc[bad.eq("")].copy()
    for col in INT_COLUMNS:
        good[col] = pd.to_numeric(good[col]).astype("int64")
    good["latency_ms"] = pd.to_numeric(good["latency_ms"]).astype(float)
    for col in ("kernel", "grid", "block", "library", "framework_version", "device_raw", "upstream_commit",
                "epilogue", "note"):
        good[col] = good[col].fillna("").astype(str)
    dup = good.duplicated(SHAPE_KEY + ["latency_ms"], keep="first")
    quarantine += [quarantined(r["source"], r["source_file"], r["layer_id"],
                               "exact duplicate of an earlier row (same source, GPU, shape, precision, latency)", r)
                   for r in good.loc[dup].to_dict("records")]
    good = good.loc[~dup]
    good = pd.concat([good, conv_cost(good)], axis=1)
    return good[LAYER_COLUMNS].reset_index(drop=True), quarantine
