"""Kernel profiles: the kernels each CNN launches, compacted so any GPU can price them.

Why a separate table: the per-operator table of the `layers` stage (data/processed/layers.parquet, 2.5 M rows)
records every aten operator of every measured CNN, including views and allocations that launch nothing. Pricing
needs only the operators that launch a kernel, and identical kernels (the same shapes repeated block after block)
price identically, so they are kept once with a `count`. The result (~0.3 M rows) travels inside the served
model, which can then price a known CNN on any GPU without the zoo.

Columns per kernel (quantities per the layer table's rule q = q_fixed + q_per_sample x batch, element counts):
`kernel_class` "mac" (conv, grouped conv, matmul, attention: tensor-core eligible), "depthwise" (depthwise conv:
CUDA cores, usually memory bound) or "other" (everything else: norm, activation, elementwise, pooling, copies,
reductions); `out_pixels` (output elements per sample / output channels, for the GEMM grid of conv kernels);
`c_out` (output channels of a conv, the last output dimension of a matmul); `winograd` (a dense 3x3 stride-1
undilated convolution: the shape for which cuDNN has Winograd algorithms, which do 2.25-4x fewer multiplies than the
direct FLOPs counted here); and `count` (how many times the kernel is launched in that pass).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

PROFILE_KEYS = ["model_key", "img_size", "pass"]
QUANTITIES = ["flops_fixed", "flops_per_sample", "in_elems_fixed", "in_elems_per_sample", "out_elems_fixed",
              "out_elems_per_sample", "other_bytes_fixed", "other_bytes_per_sample", "weight_elems"]
MAC_KINDS = ("conv", "grouped_conv", "matmul", "attention")
KERNEL_CLASSES = ("mac", "depthwise", "other")
# Convolution geometry (NA for other operators): decides which convolutions cuDNN may run as Winograd.
GEOMETRY_COLUMNS = ["kernel_r", "kernel_s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups"]
LAYER_COLUMNS = ["model_key", "img_size", "pass", "op_index", "kind", "launches_kernel", "c_out", "out_shape",
                 "param_elems_new", *QUANTITIES, *GEOMETRY_COLUMNS]
# Kernel fusion a runtime applies (docs/physics.md "Fusion"): none (eager: one kernel per operator), pointwise
# (torch.compile / XLA: chains of pointwise operators become one kernel; convolutions and GEMMs stay library
# kernels), producer (TensorRT: pointwise operators after a convolution or GEMM fold into it, the rest chain).
FUSIONS = ("none", "pointwise", "producer")
# Operator kinds a fusing runtime merges (elementwise in the widest sense; batch norm in inference is an affine
# map). Training passes keep batch norm out: it needs a reduction over the batch.
POINTWISE_KINDS = ("activation", "elementwise", "add", "norm")


class ProfileError(ValueError):
    """The layer table lacks a column or holds an impossible value (message names the table and the column)."""


def per_value(column: pd.Series, fn) -> np.ndarray:
    """`fn` (vectorised over a NumPy array of strings) computed once per distinct value of `column` and mapped back
    onto its rows. Why: the layer table's text columns are categoricals of a few thousand values over millions of
    rows, and string work row by row was most of the profile stage's time."""
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    return np.asarray(fn(np.asarray(uniques, dtype=object).astype(str)))[codes]


def group_starts(k: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """True on each row whose values in `columns` differ from the previous row's (and on the first row)."""
    first = np.zeros(len(k), dtype=bool)
    if len(k):
        first[0] = True
    for col in columns:
        codes = pd.factorize(k[col], use_na_sentinel=False)[0]
        first[1:] |= codes[1:] != codes[:-1]
    return first


def kernel_class(kind: pd.Series) -> np.ndarray:
    """mac / depthwise / other per operator kind (see the module docstring)."""
    return per_value(kind, lambda k: np.where(np.isin(k, MAC_KINDS), "mac",
                                              np.where(k == "depthwise_conv", "depthwise", "other")))


def fused_pass(pass_name: str, fusion: str) -> str:
    """Profile key of a pass under a fusion: `forward` (none), `forward@pointwise`, `forward@producer`."""
    if fusion not in FUSIONS:
        raise ValueError(f"unknown fusion {fusion!r}; choose from {FUSIONS}")
    return pass_name if fusion == "none" else f"{pass_name}@{fusion}"


def fuse(k: pd.DataFrame, fusion: str) -> pd.DataFrame:
    """The kernels a fusing runtime launches, from the launched operators in execution order (`op_index`).

    A chain = one operator that starts a kernel plus the pointwise operators that follow it and fold in. A fused
    kernel reads the chain head's inputs plus every extra operand of the chain (a residual add's other input: its
    inputs minus the tensor the chain carries), all weights, and writes only the last output; FLOPs add up. The
    head gives the class and GEMM shape. Rules: `pointwise` starts a kernel at every non-pointwise operator and
    at the first pointwise one after a GEMM/conv; `producer` lets pointwise operators join a GEMM/conv head too.
    """
    if fusion == "none":
        return k
    k = k.sort_values(["model_key", "img_size", "pass", "op_index"], kind="stable").reset_index(drop=True)
    training = per_value(k["pass"], lambda p: p != "forward")
    pointwise = (per_value(k["kind"], lambda v: np.isin(v, POINTWISE_KINDS))
                 & ~(training & per_value(k["kind"], lambda v: v == "norm")))
    first = group_starts(k, ["model_key", "img_size", "pass"])
    prev_mac = np.r_[False, (k["kernel_class"].to_numpy() != "other")[:-1]]
    starts = first | ~pointwise | ((fusion == "pointwise") & prev_mac)
    chain = np.cumsum(starts) - 1
    head = np.flatnonzero(starts)
    last = np.r_[head[1:] - 1, len(k) - 1]
    out = k.iloc[head].copy().reset_index(drop=True)
    for part in ("fixed", "per_sample"):
        inp, outp = k[f"in_elems_{part}"].to_numpy(float), k[f"out_elems_{part}"].to_numpy(float)
        carried = np.r_[0.0, outp[:-1]]
        extra = np.where(starts, 0.0, np.clip(inp - carried, 0.0, None))
        out[f"in_elems_{part}"] = inp[head] + np.bincount(chain, weights=extra, minlength=len(head))
        out[f"out_elems_{part}"] = outp[last]
        for q in (f"flops_{part}", f"other_bytes_{part}"):
            out[q] = np.bincount(chain, weights=k[q].to_numpy(float), minlength=len(head))
    out["weight_elems"] = np.bincount(chain, weights=k["weight_elems"].to_numpy(float), minlength=len(head))
    return out


def launched_kernels(layers: pd.DataFrame, source: str = "layers table") -> pd.DataFrame:
    """The operators that launch a kernel, checked and classified (the input of `fuse` and the profiles)."""
    missing = [c for c in LAYER_COLUMNS if c not in layers.columns]
    if missing:
        raise ProfileError(f"{source}: missing column(s) {missing}")
    k = layers.loc[layers["launches_kernel"].astype(bool), LAYER_COLUMNS].copy()
    values = k[QUANTITIES].to_numpy(dtype=float)
    if not np.isfinite(values).all() or (values < 0).any():
        bad = k.loc[~(np.isfinite(values) & (values >= 0)).all(axis=1)].iloc[0]
        raise ProfileError(f"{source}: negative or non-finite quantity in {bad['model_key']} "
                           f"img_size {bad['img_size']} pass {bad['pass']} ({bad['kind']})")
    k["kernel_class"] = kernel_class(k["kind"])
    k["winograd"] = winograd_eligible(k)
    k["grouped"] = per_value(k["kind"], lambda v: v == "grouped_conv")
    return k


def winograd_eligible(layers: pd.DataFrame) -> np.ndarray:
    """Dense (groups 1) 3x3 convolutions with stride 1 and dilation 1: the shape cuDNN's Winograd algorithms
    take (forward, data gradient and filter gradient). Which algorithm cuDNN really picks is only known on the GPU;
    this marks where it can, so the estimate and the learner can tell VGG-like stacks from 1x1/strided ones."""
    def col(name: str) -> np.ndarray:
        values = layers[name]
        if pd.api.types.is_numeric_dtype(values.dtype):  # nullable Int32 in the layer table: no parsing
            return values.to_numpy(dtype=float, na_value=np.nan)
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)

    return (per_value(layers["kind"], lambda v: v == "conv") & (col("kernel_r") == 3) & (col("kernel_s") == 3)
            & (col("stride_h") == 1) & (col("stride_w") == 1) & (col("dilation_h") == 1) & (col("dilation_w") == 1)
            & (col("groups") == 1))


def _last_dimension(shapes: np.ndarray) -> np.ndarray:
    """The last dimension of `AxBxC` shape strings (NaN where there is none)."""
    return pd.to_numeric(pd.Series(shapes).str.rsplit("x", n=1).str[-1], errors="coerce").to_numpy(dtype=float)


def kernel_profiles(layers: pd.DataFrame, source: str = "layers table",
                    fusions: tuple[str, ...] = FUSIONS) -> pd.DataFrame:
    """Launched kernels of every (model_key, img_size, pass) under each fusion rule (pass keys `fused_pass`),
    identical kernels merged with a `count`.

    Also returns, per (model_key, img_size), the trainable parameter count (`params_elems` on every row of the
    forward pass) that the optimizer step of a training row reads and writes.
    """
    launched = launched_kernels(layers, source)
    parts = []
    for fusion in fusions:
        # TensorRT builds inference engines only: no training pass under producer fusion.
        src = launched if fusion != "producer" else launched.loc[launched["pass"].astype(str) == "forward"]
        part = fuse(src, fusion)
        part["pass"] = per_value(part["pass"], lambda p, f=fusion: np.array([fused_pass(x, f) for x in p]))
        parts.append(part)
    k = pd.concat(parts, ignore_index=True)
    # GEMM columns of a kernel: a conv's output channels; a matmul's last output dimension (M x N, batched B x M x N).
    last_dim = pd.Series(per_value(k["out_shape"], _last_dimension), index=k.index)
    k["c_out"] = k["c_out"].astype(float).fillna(last_dim.where(k["kernel_class"] == "mac"))
    k["c_out"] = k["c_out"].where(k["kernel_class"] != "other", 0.0).fillna(0.0)
    k["out_pixels"] = np.where(k["c_out"] > 0, k["out_elems_per_sample"].astype(float) / k["c_out"].clip(lower=1),
                               0.0)
    for col in ("model_key", "pass"):  # grouped as categoricals in text order, written as text
        codes, uniques = pd.factorize(k[col], sort=True)
        k[col] = pd.Categorical.from_codes(codes, categories=np.asarray(uniques, dtype=object).astype(str))
    k["img_size"] = k["img_size"].astype(int)
    k["winograd"] = k["winograd"].astype(bool)
    k["grouped"] = k["grouped"].astype(bool)
    group = PROFILE_KEYS + ["kernel_class", "winograd", "grouped", "c_out", "out_pixels", *QUANTITIES]
    prof = k.groupby(group, sort=True, observed=True).size().rename("count").reset_index()
    for col in ("model_key", "pass"):
        prof[col] = prof[col].astype(str)
    forward = layers.loc[per_value(layers["pass"], lambda p: p == "forward")]
    params = forward.groupby(["model_key", "img_size"], observed=True)["param_elems_new"].sum().rename(
        "param_elems").reset_index()
    params["model_key"] = params["model_key"].astype(str)
    params["img_size"] = params["img_size"].astype(int)
    prof = prof.merge(params, on=["model_key", "img_size"], how="left")
    prof["param_elems"] = prof["param_elems"].fillna(0.0)
    for col in [*QUANTITIES, "c_out", "out_pixels", "param_elems"]:
        prof[col] = prof[col].astype(np.float64)
    prof["count"] = prof["count"].astype(np.int32)
    return prof.sort_values(group).reset_index(drop=True)


def write_profiles(layers_path: Path, out: Path) -> pd.DataFrame:
    """Read the layer table, compact it and write the profile table (sorted, so the file is deterministic)."""
    if not layers_path.exists():
        raise ProfileError(f"{layers_path}: layer table not found (DVC stage `layers`)")
    prof = kernel_profiles(pd.read_parquet(layers_path, columns=LAYER_COLUMNS), str(layers_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    prof.to_parquet(out, index=False)
    return prof
