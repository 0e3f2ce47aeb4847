"""ALU of the reference interpreter: per-opcode closures for integer, float and bit arithmetic of one thread.

ALU[base](interp, ins, mods, tys, t) builds, for one instruction, a function(thread) that reads its
operands through interp._reader, computes in exact Python integers/floats and writes through
interp._writer (which wraps integers to the register width). Plain scalar code on purpose: it is the
oracle the vectorised analyzer (arith.py, semantics.py) is tested against, so it shares no code with it.
"""

from __future__ import annotations

import math

from src.ptx.values import is_float, width


def _binary(fn_int, fn_float=None):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra, rb = interp._reader(ops[1], t, ins), interp._reader(ops[2], t, ins)
        w = interp._writer(ops[0], t, ins)
        f = fn_float if (is_float(t) and fn_float) else fn_int
        if is_float(t) and fn_float is None:
            raise interp._err(ins, "float form not supported")
        return lambda th: w(th, f(ra(th), rb(th)))
    return make


def _unary(fn):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra = interp._reader(ops[1], t, ins)
        w = interp._writer(ops[0], t, ins)
        return lambda th: w(th, fn(ra(th), t))
    return make


def _mul(interp, ins, mods, tys, t):
    ops = ins.operands
    ra, rb = interp._reader(ops[1], t, ins), interp._reader(ops[2], t, ins)
    wide = "wide" in mods
    hi = "hi" in mods
    wt = (t[0] + str(2 * width(t))) if wide else t
    w = interp._writer(ops[0], wt, ins)
    wd = width(t)
    if is_float(t):
        return lambda th: w(th, ra(th) * rb(th))
    if hi:
        return lambda th: w(th, (ra(th) * rb(th)) >> wd)
    return lambda th: w(th, ra(th) * rb(th))


def _mad(interp, ins, mods, tys, t):
    ops = ins.operands
    wide = "wide" in mods
    hi = "hi" in mods
    wt = (t[0] + str(2 * width(t))) if wide else t
    ra, rb = interp._reader(ops[1], t, ins), interp._reader(ops[2], t, ins)
    rc = interp._reader(ops[3], wt, ins)
    w = interp._writer(ops[0], wt, ins)
    wd = width(t)
    if is_float(t):
        return lambda th: w(th, ra(th) * rb(th) + rc(th))
    if hi:
        return lambda th: w(th, ((ra(th) * rb(th)) >> wd) + rc(th))
    return lambda th: w(th, ra(th) * rb(th) + rc(th))


def _idiv(a, b):
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _irem(a, b):
    if b == 0:
        return a
    return a - _idiv(a, b) * b


def _fdiv(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)


def _shift(left: bool):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra = interp._reader(ops[1], t, ins)
        rb = interp._reader(ops[2], "u32", ins)
        w = interp._writer(ops[0], t, ins)
        wd = width(t)
        if left:
            return lambda th: w(th, ra(th) << min(rb(th), wd))
        return lambda th: w(th, ra(th) >> min(rb(th), wd))
    return make


def _safe(fn):
    def g(x, t):
        try:
            return fn(x)
        except (ValueError, OverflowError):
            return math.nan
    return g


def _fma(interp, ins, mods, tys, t):
    ops = ins.operands
    ra, rb, rc = (interp._reader(ops[k], t, ins) for k in (1, 2, 3))
    w = interp._writer(ops[0], t, ins)
    return lambda th: w(th, ra(th) * rb(th) + rc(th))


def _minmax(fn):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra, rb = interp._reader(ops[1], t, ins), interp._reader(ops[2], t, ins)
        w = interp._writer(ops[0], t, ins)

        def f(th):
            a, b = ra(th), rb(th)
            if isinstance(a, float) and math.isnan(a):
                return w(th, b)
            if isinstance(b, float) and math.isnan(b):
                return w(th, a)
            return w(th, fn(a, b))
        return f
    return make


def _logic(fn):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        rt = "pred" if t == "pred" else ("u" + str(width(t)))
        ra, rb = interp._reader(ops[1], rt, ins), interp._reader(ops[2], rt, ins)
        w = interp._writer(ops[0], t, ins)
        return lambda th: w(th, fn(ra(th), rb(th)))
    return make


def _not(interp, ins, mods, tys, t):
    ops = ins.operands
    rt = "pred" if t == "pred" else ("u" + str(width(t)))
    ra = interp._reader(ops[1], rt, ins)
    w = interp._writer(ops[0], t, ins)
    if t == "pred":
        return lambda th: w(th, 1 - ra(th))
    return lambda th: w(th, ~ra(th))


def _popc_clz(kind):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra = interp._reader(ops[1], t, ins)
        w = interp._writer(ops[0], "u32", ins)
        wd = width(t)
        if kind == "popc":
            return lambda th: w(th, bin(ra(th)).count("1"))
        if kind == "clz":
            return lambda th: w(th, wd - ra(th).bit_length())
        return lambda th: w(th, int(format(ra(th), f"0{wd}b")[::-1], 2))
    return make


def _abs_neg(kind):
    def make(interp, ins, mods, tys, t):
        ops = ins.operands
        ra = interp._reader(ops[1], t, ins)
        w = interp._writer(ops[0], t, ins)
        if kind == "abs":
            return lambda th: w(th, abs(ra(th)))
        return lambda th: w(th, -ra(th))
    return make


def _bfe(interp, ins, mods, tys, t):
    ops = ins.operands
    ra = interp._reader(ops[1], t, ins)
    rb, rc = interp._reader(ops[2], "u32", ins), interp._reader(ops[3], "u32", ins)
    w = interp._writer(ops[0], t, ins)
    wd = width(t)

    def f(th):
        a, pos, ln = ra(th) & ((1 << wd) - 1), rb(th) & 0xFF, rc(th) & 0xFF
        if ln == 0:
            return w(th, 0)
        v = (a >> min(pos, wd)) & ((1 << ln) - 1)
        if t.startswith("s"):
            sbit = (a >> min(pos + ln - 1, wd - 1)) & 1
            if sbit:
                v |= ~((1 << ln) - 1)
        w(th, v)
    return f


def _lop3(interp, ins, mods, tys, t):
    ops = ins.operands
    ra, rb, rc = (interp._reader(ops[k], "b32", ins) for k in (1, 2, 3))
    lut = ops[4].value
    w = interp._writer(ops[0], "b32", ins)

    def f(th):
        a, b, c = ra(th), rb(th), rc(th)
        r = 0
        for bit in range(32):
            idx = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)
            r |= ((lut >> idx) & 1) << bit
        w(th, r)
    return f


def _dp(interp, ins, mods, tys, t):
    """dp4a / dp2a.lo|hi: dot products of packed 8/16-bit lanes plus a 32-bit addend."""
    ops = ins.operands
    at, bt = tys[0], tys[1]
    ra, rb = interp._reader(ops[1], "b32", ins), interp._reader(ops[2], "b32", ins)
    rc = interp._reader(ops[3], "s32" if "s" in (at[0], bt[0]) else "u32", ins)
    w = interp._writer(ops[0], "b32", ins)
    four = ins.base == "dp4a"
    hi = "hi" in mods

    def part(x, nbits, k, signed):
        v = (x >> (nbits * k)) & ((1 << nbits) - 1)
        return v - (1 << nbits) if signed and v >> (nbits - 1) else v

    def f(th):
        a, b, c = ra(th), rb(th), rc(th)
        if four:
            acc = sum(part(a, 8, k, at[0] == "s") * part(b, 8, k, bt[0] == "s") for k in range(4))
        else:
            off = 2 if hi else 0
            acc = sum(part(a, 16, k, at[0] == "s") * part(b, 8, k + off, bt[0] == "s") for k in range(2))
        w(th, c + acc)
    return f


def _bfi(interp, ins, mods, tys, t):
    ops = ins.operands
    ra, rb = interp._reader(ops[1], t, ins), interp._reader(ops[2], t, ins)
    rp, rl = interp._reader(ops[3], "u32", ins), interp._reader(ops[4], "u32", ins)
    w = interp._writer(ops[0], t, ins)
    wd = width(t)

    def f(th):
        a, b, pos, ln = ra(th), rb(th), rp(th) & 0xFF, rl(th) & 0xFF
        if ln == 0 or pos >= wd:
            return w(th, b)
        ln = min(ln, wd - pos)
        m = ((1 << ln) - 1) << pos
        w(th, (b & ~m) | ((a << pos) & m))
    return f


def _prmt(interp, ins, mods, tys, t):
    if any(m in mods for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")):
        raise interp._err(ins, "prmt modes other than the default are not supported")
    ops = ins.operands
    ra, rb, rc = (interp._reader(ops[k], "b32", ins) for k in (1, 2, 3))
    w = interp._writer(ops[0], "b32", ins)

    def f(th):
        src = ra(th) | (rb(th) << 32)
        c = rc(th)
        out = 0
        for k in range(4):
            sel = (c >> (4 * k)) & 0xF
            byte = (src >> (8 * (sel & 7))) & 0xFF
            if sel & 8:
                byte = 0xFF if byte & 0x80 else 0
            out |= byte << (8 * k)
        w(th, out)
    return f


ALU = {
    "dp4a": _dp,
    "dp2a": _dp,
    "bfi": _bfi,
    "prmt": _prmt,
    "add": _binary(lambda a, b: a + b, lambda a, b: a + b),
    "sub": _binary(lambda a, b: a - b, lambda a, b: a - b),
    "mul": _mul,
    "mad": _mad,
    "fma": _fma,
    "div": _binary(_idiv, _fdiv),
    "rem": _binary(_irem),
    "min": _minmax(min),
    "max": _minmax(max),
    "and": _logic(lambda a, b: a & b),
    "or": _logic(lambda a, b: a | b),
    "xor": _logic(lambda a, b: a ^ b),
    "not": _not,
    "shl": _shift(True),
    "shr": _shift(False),
    "abs": _abs_neg("abs"),
    "neg": _abs_neg("neg"),
    "popc": _popc_clz("popc"),
    "clz": _popc_clz("clz"),
    "brev": _popc_clz("brev"),
    "bfe": _bfe,
    "lop3": _lop3,
    "sqrt": _unary(_safe(lambda x: math.sqrt(x) if x >= 0 else math.nan)),
    "rsqrt": _unary(_safe(lambda x: 1.0 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan))),
    "rcp": _unary(_safe(lambda x: _fdiv(1.0, x))),
    "sin": _unary(_safe(math.sin)),
    "cos": _unary(_safe(math.cos)),
    "ex2": _unary(_safe(lambda x: 2.0 ** x if x < 1024 else math.inf)),
    "lg2": _unary(_safe(lambda x: math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan))),
    "tanh": _unary(_safe(math.tanh)),
}
