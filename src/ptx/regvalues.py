"""How the analyzer holds register values, and the typed views it reads them through.

A register value is a Python scalar (launch-uniform), a NumPy array with its broadcast shape ((1, T) per
thread, (B, 1) per block, (B, T) when it mixes both), one of the compact block x thread forms of lazy.py
(Aff, CMask), or Unknown: a value that cannot be known from the launch (loaded from memory, a parameter
that was not given, ...), which makes a branch depending on it unresolved instead of guessed. Stored
values are canonical (32-bit and narrower integers as unsigned bit patterns, 64-bit integers as int64,
predicates as bool); read_as() gives a stored value as an instruction of a given PTX type sees it.
"""

from __future__ import annotations

import numpy as np

from src.ptx.lazy import Aff, CMask
from src.ptx.values import is_float, width


class Unknown:
    """A value not known from the launch (loaded from memory, parameter not given, ...); `why` names it."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"Unknown({self.why})"


Value = int | float | bool | np.floating | np.ndarray | Aff | CMask | Unknown  # a register value, any form


def is_arr(v: object) -> bool:
    """A plain NumPy array (not a scalar, not a compact form)."""
    return isinstance(v, np.ndarray)


def is_vec(v: object) -> bool:
    """Per-lane value: a NumPy array or one of the compact block x thread forms (Aff, CMask)."""
    return isinstance(v, np.ndarray | CMask | Aff)


def full(v: Value) -> Value:
    """Plain NumPy form of a compact value."""
    return v.full() if isinstance(v, CMask | Aff) else v


def read_as(v: Value, t: str) -> Value:
    """Stored value -> value of type t (ints as int64 or uint64 for u64, floats as float32/64)."""
    if isinstance(v, Unknown):
        return v
    if type(v) is CMask:
        return v if t == "pred" else read_as(v.full(), t)
    if type(v) is Aff:
        v = v.full()
    if t == "pred":
        if is_arr(v):
            return v if v.dtype == bool else v != 0
        return bool(v)
    if is_float(t):
        if t == "f64":
            return v.astype(np.float64, copy=False) if is_arr(v) else float(v)
        return v.astype(np.float32, copy=False) if is_arr(v) else np.float32(v)
    w = width(t)
    if is_arr(v):
        if v.dtype != np.int64:
            v = v.astype(np.int64)
        if w >= 64:
            return v.astype(np.uint64) if t[0] == "u" else v
        # stored 32-bit and narrower values are canonical unsigned bit patterns
        if w < 32:
            v = v & ((1 << w) - 1)
        if t[0] == "s":
            s = 1 << (w - 1)
            v = (v ^ s) - s
        return v
    if isinstance(v, float | np.floating):
        v = int(v)
    if w >= 64:
        if t[0] == "u":
            return int(v) % (1 << 64)
        return ((int(v) + (1 << 63)) % (1 << 64)) - (1 << 63)
    v = int(v) & ((1 << w) - 1)
    if t[0] == "s" and v >> (w - 1):
        v -= 1 << w
    return v


U32_LIKE = frozenset({"u32", "b32", "s32"})


def store_as(v: Value, t: str) -> Value:
    """Typed result -> canonical stored form (32-bit and smaller as unsigned bits, 64-bit as int64)."""
    tv = type(v)
    if tv is int and t in U32_LIKE:
        return v & 0xFFFFFFFF
    if tv is Aff:  # kept only while inside [0, 2^31): the same bits for u32, s32 and b32
        return v if t in U32_LIKE else store_as(v.full(), t)
    if tv is CMask:
        return v if t == "pred" else store_as(v.full(), t)
    if tv is np.ndarray and v.dtype == np.int64 and t in U32_LIKE:
        return v & 0xFFFFFFFF
    if isinstance(v, Unknown):
        return v
    if t == "pred":
        if is_arr(v):
            return v if v.dtype == bool else v.astype(bool)
        return bool(v)
    if is_float(t):
        if t == "f64":
            return v.astype(np.float64, copy=False) if is_arr(v) else float(v)
        return v.astype(np.float32, copy=False) if is_arr(v) else np.float32(v)
    w = width(t)
    if is_arr(v):
        if v.dtype != np.int64:
            v = v.astype(np.int64)
        if w >= 64:
            return v
        return v & ((1 << w) - 1)
    v = int(v)
    if w >= 64:
        return ((v + (1 << 63)) % (1 << 64)) - (1 << 63)
    return v & ((1 << w) - 1)
