"""Vectorised arithmetic and logic opcodes of the slice (add ... lop3) and integer comparisons.

Each entry of ARITH_OPS builds, for one instruction, a closure R -> [(register, stored value)] that works
on scalars and NumPy arrays alike with PTX's wrap-around integer semantics. 32-bit integer add/sub/mul/
mad/shl keep the compact block x thread form Aff of lazy.py where it applies. Operands are read through
the Evaluator (semantics.py) passed in as `ev`.
"""

from __future__ import annotations

import math

import numpy as np

from src.ptx.errors import AnalysisError
from src.ptx.lazy import Aff, aff_add, aff_scale
from src.ptx.regvalues import U32_LIKE, Unknown, Value, full, is_arr, is_vec, store_as
from src.ptx.syntax import Imm, Instruction
from src.ptx.values import is_float, width


def setp_compare(op: str, a: Value, b: Value, fl: bool) -> tuple[Value, Value]:
    """setp's comparison of a and b (floats when fl, NaN-aware) and its complement, for all lanes."""
    if fl:
        nan = np.isnan(a) | np.isnan(b)
        if op == "num":
            return ~nan, nan
        if op == "nan":
            return nan, ~nan
        unordered = op.endswith("u")
        base = op[:-1] if unordered else op
        r = cmp_int(base, a, b)
        r = (r | nan) if unordered else (r & ~nan)
        # setp writes the complement of the result into the second predicate
        return r, ~np.asarray(r) if not is_arr(r) else ~r
    r = cmp_int(op, a, b)
    return r, (not r) if isinstance(r, bool | np.bool_) else ~r


def cmp_int(op: str, a: Value, b: Value) -> Value:
    """Integer comparison (eq, ne, lt/lo, le/ls, gt/hi, ge/hs) of scalars or arrays: bool or bool array."""
    if op == "eq":
        r = a == b
    elif op == "ne":
        r = a != b
    elif op in ("lt", "lo"):
        r = a < b
    elif op in ("le", "ls"):
        r = a <= b
    elif op in ("gt", "hi"):
        r = a > b
    elif op in ("ge", "hs"):
        r = a >= b
    else:
        raise AnalysisError(f"unknown comparison {op!r}")
    return bool(r) if not is_arr(r) else r


def _fdiv(a, b):
    try:
        return a / b
    except ZeroDivisionError:  # Python floats; NumPy values give inf/nan under np.errstate
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _bin(f, float_ok=True):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        if is_float(t) and not float_ok:
            why = Unknown(f"line {ins.line}: not modelled")
            return lambda R: [(ops[0].name, why)]
        ra, rb = ev.operand(ops[1], t, ins), ev.operand(ops[2], t, ins)
        d = ops[0].name

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            if isinstance(b, Unknown):
                return [(d, b)]
            return [(d, store_as(f(a, b), t))]
        return g
    return make


def _mul(ev, ins, mods, tys, t):
    ops = ins.operands
    wide, hi = "wide" in mods, "hi" in mods
    d = ops[0].name
    wd = width(t)
    rt = t
    if hi and wd == 32 and t[0] == "u":
        rt = "u32"
    ra, rb = ev.operand(ops[1], rt, ins), ev.operand(ops[2], rt, ins)
    wt = (t[0] + str(2 * wd)) if wide else t
    if hi and wd >= 64:
        why = Unknown(f"line {ins.line}: mul.hi of 64-bit values not modelled")
        return lambda R: [(d, why)]
    if not hi and not wide and t in U32_LIKE:
        la, lb = ev.operand(ops[1], t, ins, lazy=True), ev.operand(ops[2], t, ins, lazy=True)

        def g_lo(R):
            a, b = la(R), lb(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            if isinstance(b, Unknown):
                return [(d, b)]
            r = aff_scale(a, b) if type(b) is int else aff_scale(b, a) if type(a) is int else None
            if r is not None:
                return [(d, r)]
            return [(d, store_as(full(a) * full(b), t))]
        return g_lo

    def g(R):
        a, b = ra(R), rb(R)
        if isinstance(a, Unknown):
            return [(d, a)]
        if isinstance(b, Unknown):
            return [(d, b)]
        if is_float(t):
            return [(d, store_as(a * b, t))]
        if hi:
            if t[0] == "u":
                a = a.astype(np.uint64) if is_arr(a) else a
                b = b.astype(np.uint64) if is_arr(b) else b
                p = (a * b) >> np.uint64(32) if (is_arr(a) or is_arr(b)) else (a * b) >> 32
                return [(d, store_as(p.astype(np.int64) if is_arr(p) else p, wt))]
            return [(d, store_as((a * b) >> 32, wt))]
        if wd >= 64 and (is_arr(a) or is_arr(b)):
            p = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64)
            return [(d, store_as(p, wt))]
        return [(d, store_as(a * b, wt))]
    return g


def _mad(ev, ins, mods, tys, t):
    ops = ins.operands
    wide, hi = "wide" in mods, "hi" in mods
    d = ops[0].name
    wd = width(t)
    wt = (t[0] + str(2 * wd)) if wide else t
    if hi:
        why = Unknown(f"line {ins.line}: mad.hi not modelled")
        return lambda R: [(d, why)]
    lazy = not wide and t in U32_LIKE
    ra, rb = ev.operand(ops[1], t, ins, lazy), ev.operand(ops[2], t, ins, lazy)
    rc = ev.operand(ops[3], wt, ins, lazy)

    def g(R):
        a, b, c = ra(R), rb(R), rc(R)
        for x in (a, b, c):
            if isinstance(x, Unknown):
                return [(d, x)]
        if lazy:
            if type(a) is Aff or type(b) is Aff:
                p = aff_scale(a, b) if type(b) is int else aff_scale(b, a) if type(a) is int else None
                if p is None:
                    p = full(a) * full(b)
            else:
                p = a * b
            r = aff_add(p, c, 1)
            if r is not None:
                return [(d, r)]
            return [(d, store_as(full(p) + full(c), wt))]
        if wd >= 32 and (is_arr(a) or is_arr(b) or is_arr(c)) and not is_float(t):
            p = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64) + np.asarray(c).astype(
                np.int64)
            return [(d, store_as(p, wt))]
        return [(d, store_as(a * b + c, wt))]
    return g


def _shift(left):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        ra, rb = ev.operand(ops[1], t, ins, lazy=left and t in U32_LIKE), ev.operand(ops[2], "u32", ins)
        d = ops[0].name
        wd = width(t)

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            if isinstance(b, Unknown):
                return [(d, b)]
            if type(a) is Aff:
                r = aff_scale(a, b, shift=True) if type(b) is int else None
                if r is not None:
                    return [(d, r)]
                a = a.full()
            b = np.minimum(b, wd) if is_arr(b) else min(b, wd)
            if wd >= 64:
                if is_arr(a) or is_arr(b):
                    a2 = np.asarray(a)
                    a2 = a2.astype(np.uint64) if t[0] == "u" else a2.astype(np.int64)
                    b2 = np.minimum(np.asarray(b), 63).astype(a2.dtype)
                    r = (a2 << b2) if left else (a2 >> b2)
                    big = np.asarray(b) >= 64
                    if big.any():
                        r = np.where(big, 0 if (left or t[0] != "s") else np.where(a2 < 0, -1, 0), r)
                    return [(d, store_as(r.astype(np.int64), t))]
            if left:
                return [(d, store_as(a << b, t))]
            return [(d, store_as(a >> b, t))]
        return g
    return make


def _logic(f):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        rt = "pred" if t == "pred" else "u" + str(width(t))
        ra, rb = ev.operand(ops[1], rt, ins), ev.operand(ops[2], rt, ins)
        d = ops[0].name

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            if isinstance(b, Unknown):
                return [(d, b)]
            return [(d, store_as(f(a, b), t))]
        return g
    return make


def _unary(f, float_only=False):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        rt = "pred" if t == "pred" else t
        if base_is_not(ins):
            rt = "pred" if t == "pred" else "u" + str(width(t))
        ra = ev.operand(ops[1], rt, ins)
        d = ops[0].name

        def g(R):
            a = ra(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            return [(d, store_as(f(a, t), t))]
        return g
    return make


def base_is_not(ins: Instruction) -> bool:
    """Unary opcodes that read their operand as unsigned bits rather than as the instruction type."""
    return ins.base in ("not", "popc", "clz", "brev")


def _not(a, t):
    if t == "pred":
        return ~a if is_vec(a) else not a
    return ~a


def _idiv(a, b):
    if not (is_arr(a) or is_arr(b)):
        if b == 0:
            return -1
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if a.dtype == np.uint64 or b.dtype == np.uint64:
        a, b = a.astype(np.uint64), b.astype(np.uint64)
        bz = b == 0
        q = a // np.where(bz, 1, b)
        return np.where(bz, np.uint64(0xFFFFFFFFFFFFFFFF), q).astype(np.int64)
    bz = b == 0
    bb = np.where(bz, 1, b)
    q = np.abs(a) // np.abs(bb)
    q = np.where((a >= 0) == (bb >= 0), q, -q)
    return np.where(bz, -1, q)


def _irem(a, b):
    q = _idiv(a, b)
    if not (is_arr(a) or is_arr(b)):
        return a if b == 0 else a - q * b
    a2, b2 = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if a2.dtype == np.uint64 or b2.dtype == np.uint64:
        a2, b2 = a2.astype(np.int64), b2.astype(np.int64)
    return np.where(b2 == 0, a2, a2 - q * b2)


def _minmax(f):
    def g(a, b):
        if is_arr(a) or is_arr(b):
            return f(a, b)
        return min(a, b) if f is np.minimum else max(a, b)
    return g


def _popc(a, t):
    w = width(t)
    if is_arr(a):
        a = a.astype(np.uint64) & np.uint64((1 << w) - 1) if w < 64 else a.astype(np.uint64)
        return np.bitwise_count(a).astype(np.int64)
    return bin(int(a) % (1 << w)).count("1")


def _clz(a, t):
    w = width(t)
    if is_arr(a):
        a = a.astype(np.uint64)
        n = np.zeros(a.shape, np.int64)
        x = a.copy()
        for _ in range(w):
            n += (x != 0)
            x >>= np.uint64(1)
        return w - n
    return w - (int(a) % (1 << w)).bit_length()


def _fma3(ev, ins, mods, tys, t):
    ops = ins.operands
    ra, rb, rc = (ev.operand(ops[k], t, ins) for k in (1, 2, 3))
    d = ops[0].name

    def g(R):
        a, b, c = ra(R), rb(R), rc(R)
        for x in (a, b, c):
            if isinstance(x, Unknown):
                return [(d, x)]
        if t == "f32":
            r = np.float64(a) * np.float64(b) + np.float64(c) if not (is_arr(a) or is_arr(b) or is_arr(c)) \
                else np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
            return [(d, store_as(r, t))]
        return [(d, store_as(a * b + c, t))]
    return g


def _bfe(ev, ins, mods, tys, t):
    ops = ins.operands
    ra = ev.operand(ops[1], t, ins)
    rp, rl = ev.operand(ops[2], "u32", ins), ev.operand(ops[3], "u32", ins)
    d = ops[0].name
    wd = width(t)

    def g(R):
        a, pos, ln = ra(R), rp(R), rl(R)
        for x in (a, pos, ln):
            if isinstance(x, Unknown):
                return [(d, x)]
        a = np.asarray(a, dtype=np.int64) & ((1 << wd) - 1) if wd < 64 else np.asarray(a, dtype=np.int64)
        pos = np.minimum(np.asarray(pos, dtype=np.int64) & 0xFF, wd - 1 if wd == 64 else wd)
        ln = np.asarray(ln, dtype=np.int64) & 0xFF
        lnc = np.minimum(ln, 63)
        v = (a >> np.minimum(pos, 63)) & ((np.int64(1) << lnc) - 1)
        if t[0] == "s":
            sbit = (a >> np.minimum(pos + ln - 1, wd - 1)) & 1
            v = np.where((sbit == 1) & (ln > 0), v | ~((np.int64(1) << lnc) - 1), v)
        v = np.where(ln == 0, 0, v)
        return [(d, store_as(v if v.ndim else int(v), t))]
    return g


def _lop3(ev, ins, mods, tys, t):
    ops = ins.operands
    ra, rb, rc = (ev.operand(ops[k], "b32", ins) for k in (1, 2, 3))
    lut = ops[4].value if isinstance(ops[4], Imm) else None
    d = ops[0].name
    if lut is None:
        why = Unknown(f"line {ins.line}: lop3 with a register LUT not modelled")
        return lambda R: [(d, why)]

    def g(R):
        a, b, c = ra(R), rb(R), rc(R)
        for x in (a, b, c):
            if isinstance(x, Unknown):
                return [(d, x)]
        r = 0
        for idx in range(8):
            if (lut >> idx) & 1:
                r = r | ((a if idx & 4 else ~a) & (b if idx & 2 else ~b) & (c if idx & 1 else ~c))
        return [(d, store_as(r, "b32"))]
    return g


def _addsub(sign: int):
    """add/sub; block-part + thread-part 32-bit sums stay in the compact Aff form."""
    plain = _bin((lambda a, b: a + b) if sign > 0 else (lambda a, b: a - b))

    def make(ev, ins, mods, tys, t):
        if t not in U32_LIKE or "sat" in mods or "cc" in mods:
            return plain(ev, ins, mods, tys, t)
        ops = ins.operands
        ra, rb = ev.operand(ops[1], t, ins, lazy=True), ev.operand(ops[2], t, ins, lazy=True)
        d = ops[0].name

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, Unknown):
                return [(d, a)]
            if isinstance(b, Unknown):
                return [(d, b)]
            r = aff_add(a, b, sign)
            if r is not None:
                return [(d, r)]
            a, b = full(a), full(b)
            return [(d, store_as(a + b if sign > 0 else a - b, t))]
        return g
    return make


ARITH_OPS = {
    "bfe": _bfe,
    "lop3": _lop3,
    "add": _addsub(1),
    "sub": _addsub(-1),
    "mul": _mul,
    "mad": _mad,
    "fma": _fma3,
    "div": _bin(lambda a, b: _fdiv(a, b) if (isinstance(a, float | np.floating) or (
        is_arr(a) and a.dtype.kind == "f")) else _idiv(a, b)),
    "rem": _bin(_irem, float_ok=False),
    "min": _bin(_minmax(np.minimum)),
    "max": _bin(_minmax(np.maximum)),
    "and": _logic(lambda a, b: a & b),
    "or": _logic(lambda a, b: a | b),
    "xor": _logic(lambda a, b: a ^ b),
    "not": _unary(_not),
    "shl": _shift(True),
    "shr": _shift(False),
    "abs": _unary(lambda a, t: np.abs(a) if is_arr(a) else abs(a)),
    "neg": _unary(lambda a, t: -a),
    "popc": _unary(_popc),
    "clz": _unary(_clz),
}
