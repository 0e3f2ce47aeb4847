"""Scalar PTX value semantics shared by the interpreter: bit patterns <-> typed values, comparisons."""

from __future__ import annotations

import math
import struct
from functools import cache

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")

INT_BITS = {"8": 8, "16": 16, "32": 32, "64": 64, "128": 128}


@cache
def width(t: str) -> int:
    """Bit width of a type name without dot ('s32' -> 32, 'pred' -> 1, 'f16x2' -> 32)."""
    if t == "pred":
        return 1
    if t in ("f16x2", "bf16x2"):
        return 32
    if t == "bf16":
        return 16
    digits = "".join(c for c in t if c.isdigit())
    return int(digits) if digits else 32


@cache
def is_float(t: str) -> bool:
    return t.startswith("f") or t.startswith("bf")


def is_signed(t: str) -> bool:
    return t.startswith("s")


def bits_to_f32(b: int) -> float:
    return _F32.unpack(_U32.pack(b & 0xFFFFFFFF))[0]


def f32_to_bits(v: float) -> int:
    try:
        return _U32.unpack(_F32.pack(v))[0]
    except OverflowError:
        return 0x7F800000 if v > 0 else 0xFF800000


def bits_to_f64(b: int) -> float:
    return _F64.unpack(_U64.pack(b & 0xFFFFFFFFFFFFFFFF))[0]


def f64_to_bits(v: float) -> int:
    return _U64.unpack(_F64.pack(v))[0]


def bits_to_f16(b: int) -> float:
    return struct.unpack("<e", struct.pack("<H", b & 0xFFFF))[0]


def f16_to_bits(v: float) -> int:
    try:
        return struct.unpack("<H", struct.pack("<e", v))[0]
    except (OverflowError, struct.error):
        return 0x7C00 if v > 0 else 0xFC00


def to_value(bits: int, t: str):
    """Interpret a register bit pattern as type t (int for integer types, float for float types)."""
    if t == "f32":
        return bits_to_f32(bits)
    if t == "f64":
        return bits_to_f64(bits)
    if t == "f16":
        return bits_to_f16(bits)
    if t == "pred":
        return bits & 1
    w = width(t)
    m = (1 << w) - 1
    x = bits & m
    if t[0] == "s" and x >> (w - 1):
        x -= 1 << w
    return x


def to_bits(v, t: str) -> int:
    """Encode a typed value (int or float) as the bit pattern of type t."""
    if t == "f32":
        return f32_to_bits(float(v))
    if t == "f64":
        return f64_to_bits(float(v))
    if t == "f16":
        return f16_to_bits(float(v))
    if t == "pred":
        return 1 if v else 0
    return int(v) & ((1 << width(t)) - 1)


def compare(op: str, a, b, t: str) -> bool:
    """setp comparison `op` on typed values; unordered float comparisons (..u) are true on NaN."""
    if is_float(t):
        nan = (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b))
        if op == "num":
            return not nan
        if op == "nan":
            return nan
        if op.endswith("u") and op not in ("lu",):
            if nan:
                return True
            op = op[:-1]
        elif nan:
            return op == "ne" and False
    if op in ("eq",):
        return a == b
    if op in ("ne",):
        return a != b
    if op in ("lt", "lo"):
        return a < b
    if op in ("le", "ls"):
        return a <= b
    if op in ("gt", "hi"):
        return a > b
    if op in ("ge", "hs"):
        return a >= b
    raise ValueError(f"unknown comparison {op!r}")


CMP_OPS = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
           "geu", "num", "nan"}
