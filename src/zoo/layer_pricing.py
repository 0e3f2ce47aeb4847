"""Pricing a per-layer table at a batch size and precision: MACs, FLOPs and bytes per op, and their sums per pass.

A table (src/zoo/layers.py) stores element counts as `q_fixed + q_per_sample * batch`, not bytes, so one recording
prices any batch and precision here.

Bytes rule: bytes(op, batch, precision) = (in_elems + weight_elems + out_elems) * bytes_per_element(precision)
+ other_bytes, with in/out_elems = fixed + per_sample * batch (`BYTES_PER_ELEMENT`; AMP prices every
floating tensor at 2 bytes, an approximation: master weights stay fp32 and casts are extra kernels).
"""

from __future__ import annotations

from typing import Any

from src.zoo.op_rules import MAC_KINDS

BYTES_PER_ELEMENT = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "amp_fp16": 2, "amp_bf16": 2,
                     "int8": 1, "fp8": 1}


def at_batch(df: Any, quantity: str, batch: int) -> Any:
    """quantity_fixed + quantity_per_sample * batch (weight_elems / param_elems_new do not scale)."""
    if quantity in ("weight_elems", "param_elems_new"):
        return df[quantity].astype("float64")
    return df[f"{quantity}_fixed"].astype("float64") + df[f"{quantity}_per_sample"].astype("float64") * batch


def bytes_per_element(precision: str) -> int:
    """Bytes of one floating element at `precision`; an unknown precision raises ValueError, naming the known ones."""
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError as exc:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(BYTES_PER_ELEMENT)}") from exc


def price(df: Any, batch: int, precision: str = "fp32") -> Any:
    """Per-op MACs, FLOPs and bytes read/written at a batch size and precision (the documented bytes rule)."""
    e = bytes_per_element(precision)
    out = df.copy()
    out["macs"] = at_batch(df, "macs", batch)
    out["flops"] = at_batch(df, "flops", batch)
    other = at_batch(df, "other_bytes", batch)
    out["bytes_read_inputs"] = at_batch(df, "in_elems", batch) * e
    out["bytes_read_weights"] = df["weight_elems"].astype("float64") * e
    out["bytes_written"] = at_batch(df, "out_elems", batch) * e
    out["bytes_other"] = other
    out["bytes"] = out["bytes_read_inputs"] + out["bytes_read_weights"] + out["bytes_written"] + other
    return out


def sums(df: Any, batch: int = 1, precision: str = "fp32") -> dict[str, dict[str, float]]:
    """Per pass: MACs, FLOPs, bytes, kernel launches, ops, trainable params used, activations (static defs)."""
    priced = price(df, batch, precision)
    out: dict[str, dict[str, float]] = {}
    for p, g in priced.groupby("pass", sort=False, observed=True):
        mac = g["kind"].isin(MAC_KINDS)
        out[str(p)] = {
            "ops": int(len(g)),
            "kernels": int(g["launches_kernel"].sum()),
            "macs": float(g["macs"].sum()),
            "gmacs": float(g["macs"].sum()) / 1e9,
            "flops": float(g["flops"].sum()),
            "bytes": float(g["bytes"].sum()),
            "bytes_read_inputs": float(g["bytes_read_inputs"].sum()),
            "bytes_read_weights": float(g["bytes_read_weights"].sum()),
            "bytes_written": float(g["bytes_written"].sum()),
            "params_used": float(g["param_elems_new"].sum()),
            "activations": float(at_batch(g.loc[mac], "out_elems", batch).sum()),
        }
    return out

