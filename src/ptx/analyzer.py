"""Fast dynamic analysis: executed-instruction counts of a launch by evaluating only the branch slices.

Only the instructions in the backward slice of guard predicates are evaluated, vectorised with NumPy
over the threads of the launch. Values carry their own broadcast shape: a thread-index value is
(1, T), a block-index value (B, 1), a launch-uniform value a Python scalar, so uniform work is done
once, block-independent work once per block shape, and only values mixing both become (B, T).
Control flow follows SIMT min-PC scheduling over basic blocks with a per-lane mask: the pending block
with the lowest program position runs next for all lanes waiting there (exactly the per-warp
schedule of the reference interpreter, since warps do not influence each other's control flow).
Uniform loops keep the same mask object from iteration to iteration and accumulate a multiplicity
instead of per-thread work. Blocks whose slice does not read some %ctaid component are evaluated
once per distinct used component and multiplied.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np

from src.ptx.cfg import Program, build_program, defs_uses
from src.ptx.isa import BYTES_KEYS, CLASSES, value_types
from src.ptx.lazy import Aff, CMask, aff_add, aff_compare, aff_scale, lanes_warps_cmask, simplify
from src.ptx.parser import Addr, FImm, Imm, Instruction, Pair, PtxModule, Reg, Sym, Vec
from src.ptx.values import CMP_OPS, is_float, width

LANES_PER_CHUNK = 1 << 19
MEMO_BYTES = 384 << 20
MAX_STEPS = 2_000_000
POLICIES = ("error", "bounds", "taken", "not_taken", "probability")


class UnresolvedBranchError(RuntimeError):
    """A branch or guard depends on data not known from the launch (memory, missing parameter)."""

    def __init__(self, branches: list[str]):
        self.branches = branches
        super().__init__("branches depend on values not known from the launch (use policy='bounds', "
                         "'taken', 'not_taken' or 'probability:P'): " + "; ".join(branches))


class AnalysisError(RuntimeError):
    """The launch cannot be analysed (bad arguments, non-terminating evaluation)."""


@dataclass
class LaunchCounts:
    """Executed-instruction counts of one kernel launch.

    thread_instructions: instructions executed summed over threads (guard true; branches always count).
    warp_instructions: warp-level issues under SIMT min-PC scheduling (once per warp and step when any
    lane is at the instruction, guard true or false). predicated_off: thread-level arrivals at a
    non-branch instruction whose guard was false. by_class: thread_instructions by class.
    bytes_by_space: bytes moved by loads/stores/atomics per 'load.global', 'store.shared', ...
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    thread_instructions: int
    warp_instructions: int
    predicated_off: int
    by_class: dict[str, int]
    bytes_by_space: dict[str, int]
    estimate: bool
    unresolved_branches: list[str]
    policy: str
    seconds: float
    bounds: dict[str, dict] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"] = list(self.grid)
        d["block"] = list(self.block)
        return d


class _Unknown:
    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"Unknown({self.why})"


def _dims(d) -> tuple[int, int, int]:
    if isinstance(d, int | np.integer):
        d = (int(d),)
    d = tuple(int(x) for x in d)
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise AnalysisError(f"launch dimension must be 1-3 positive ints, got {d}")
    return d + (1,) * (3 - len(d))


# ------------------------------------------------------------------------------------- value helpers
def _is_arr(v) -> bool:
    return isinstance(v, np.ndarray)


def _is_vec(v) -> bool:
    """Per-lane value: a NumPy array or one of the compact block x thread forms (Aff, CMask)."""
    return isinstance(v, np.ndarray | CMask | Aff)


def _full(v):
    """Plain NumPy form of a compact value."""
    return v.full() if isinstance(v, CMask | Aff) else v


def _read(v, t: str):
    """Stored value -> value of type t (ints as int64 or uint64 for u64, floats as float32/64)."""
    if isinstance(v, _Unknown):
        return v
    if type(v) is CMask:
        return v if t == "pred" else _read(v.full(), t)
    if type(v) is Aff:
        v = v.full()
    if t == "pred":
        if _is_arr(v):
            return v if v.dtype == bool else v != 0
        return bool(v)
    if is_float(t):
        if t == "f64":
            return v.astype(np.float64, copy=False) if _is_arr(v) else float(v)
        return v.astype(np.float32, copy=False) if _is_arr(v) else np.float32(v)
    w = width(t)
    if _is_arr(v):
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


_U32_LIKE = frozenset({"u32", "b32", "s32"})


def _store(v, t: str):
    """Typed result -> canonical stored form (32-bit and smaller as unsigned bits, 64-bit as int64)."""
    tv = type(v)
    if tv is int and t in _U32_LIKE:
        return v & 0xFFFFFFFF
    if tv is Aff:  # kept only while inside [0, 2^31): the same bits for u32, s32 and b32
        return v if t in _U32_LIKE else _store(v.full(), t)
    if tv is CMask:
        return v if t == "pred" else _store(v.full(), t)
    if tv is np.ndarray and v.dtype == np.int64 and t in _U32_LIKE:
        return v & 0xFFFFFFFF
    if isinstance(v, _Unknown):
        return v
    if t == "pred":
        if _is_arr(v):
            return v if v.dtype == bool else v.astype(bool)
        return bool(v)
    if is_float(t):
        if t == "f64":
            return v.astype(np.float64, copy=False) if _is_arr(v) else float(v)
        return v.astype(np.float32, copy=False) if _is_arr(v) else np.float32(v)
    w = width(t)
    if _is_arr(v):
        if v.dtype != np.int64:
            v = v.astype(np.int64)
        if w >= 64:
            return v
        return v & ((1 << w) - 1)
    v = int(v)
    if w >= 64:
        return ((v + (1 << 63)) % (1 << 64)) - (1 << 63)
    return v & ((1 << w) - 1)


def _where(mask, new, old):
    if mask is True or old is None:
        return new
    if isinstance(new, _Unknown):
        return new
    if isinstance(old, _Unknown):
        return old
    return np.where(_full(mask), _full(new), _full(old))


def _fdiv(a, b):
    try:
        return a / b
    except ZeroDivisionError:  # Python floats; NumPy values give inf/nan under np.errstate
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


# ------------------------------------------------------------------------------------ instruction eval
class _Evaluator:
    """Compiles slice instructions into closures over a register dict."""

    def __init__(self, prog: Program, params: dict[str, object]):
        self.prog = prog
        self.params = params

    def operand(self, op, t: str, ins: Instruction, lazy: bool = False):
        if isinstance(op, Reg):
            name = op.name
            if name.startswith("!"):
                n2 = name[1:]

                def rneg(R):
                    v = R.get(n2)
                    if v is None:
                        return _Unknown(f"line {ins.line}: {n2} read before written")
                    v = _read(v, "pred")
                    return v if isinstance(v, _Unknown) else ~v if _is_vec(v) else not v
                return rneg

            def missing():
                if name in _SPECIAL_UNKNOWN or "." in name or name.startswith("%clock") or name.startswith(
                        "%globaltimer"):
                    return _Unknown(f"special register {name}")
                return _Unknown(f"line {ins.line}: {name} read before written")

            ndarray = np.ndarray
            if t in ("u32", "b32"):  # canonical storage already is the unsigned 32-bit value
                def rd_u32(R):
                    v = R.get(name)
                    tv = type(v)
                    if tv is int:
                        return v
                    if tv is ndarray and v.dtype == np.int64:
                        return v
                    if tv is Aff:
                        return v if lazy else v.full()
                    return missing() if v is None else _read(v, t)
                return rd_u32
            if t == "s32":
                def rd_s32(R):
                    v = R.get(name)
                    tv = type(v)
                    if tv is int:
                        return v - 0x100000000 if v & 0x80000000 else v
                    if tv is ndarray and v.dtype == np.int64:
                        return (v ^ 0x80000000) - 0x80000000
                    if tv is Aff:
                        return v if lazy else v.full()
                    return missing() if v is None else _read(v, t)
                return rd_s32

            def rd(R):
                v = R.get(name)
                if v is None:
                    return missing()
                return _read(v, t)
            return rd
        if isinstance(op, Imm):
            v = _read(_store(op.value, t) if not is_float(t) else float(op.value), t)
            return lambda R: v
        if isinstance(op, FImm):
            if is_float(t):
                fv = _read(op.value, t)
                return lambda R: fv
            import struct
            bits = struct.unpack("<Q", struct.pack("<d", op.value))[0] if op.double else \
                struct.unpack("<I", struct.pack("<f", op.value))[0]
            iv = _read(bits, t)
            return lambda R: iv
        why = _Unknown(f"line {ins.line}: address of {op} ")
        return lambda R: why

    def compile(self, ins: Instruction):
        """Closure(R) -> list of (register, stored value) writes of one instruction."""
        base, mods = ins.base, ins.mods
        tys = value_types(mods)
        t = tys[-1] if tys else "b32"
        ops = ins.operands
        unknown = _Unknown(f"line {ins.line}: {ins.text}")

        def dst_regs(op):
            if isinstance(op, Reg):
                return [op.name]
            if isinstance(op, Pair):
                return [op.first.name, op.second.name]
            if isinstance(op, Vec):
                return [x.name for x in op.items if isinstance(x, Reg)]
            return []

        if base == "st" and "param" in mods:
            a = ops[0]
            if isinstance(a, Addr) and isinstance(a.base, Sym) and not isinstance(ops[1], Vec):
                slot = f"&{a.base.name}+{a.offset}"
                r = self.operand(ops[1], t, ins)
                return lambda R: [(slot, _store(r(R), t))]
            return lambda R: []
        defs, _ = defs_uses(ins)
        if not defs:
            return lambda R: []

        def all_unknown(why=unknown):
            return lambda R: [(d, why) for d in defs]

        if base in ("ld", "ldu"):
            a = ops[1] if len(ops) > 1 else None
            if "param" in mods and isinstance(a, Addr) and isinstance(a.base, Sym) and not isinstance(ops[0], Vec):
                name = a.base.name
                d = ops[0].name if isinstance(ops[0], Reg) else None
                if name in self.prog.param_types:
                    pv = self.params.get(name)
                    if pv is None or a.offset != 0:
                        why = _Unknown(f"parameter {name} not given")
                        return lambda R: [(d, why)]
                    v = _store(_read(_store(pv, t), t), t)
                    return lambda R: [(d, v)]
                slot = f"&{name}+{a.offset}"

                def ldslot(R):
                    v = R.get(slot)
                    return [(d, unknown if v is None else _store(_read(v, t), t))]
                return ldslot
            space = next((m for m in mods if m in ("global", "shared", "local", "const", "param")), "generic")
            return all_unknown(_Unknown(f"line {ins.line}: value loaded from {space} memory: {ins.text}"))
        if base in ("mov", "cvta") and len(ops) == 2 and isinstance(ops[0], Reg) and not isinstance(
                ops[1], Vec | Sym):
            if base == "cvta":
                return all_unknown(_Unknown(f"line {ins.line}: address conversion {ins.text}"))
            r = self.operand(ops[1], t, ins, lazy=True)
            d = ops[0].name
            return lambda R: [(d, _store(r(R), t))]
        if base == "setp":
            return self._setp(ins, mods, tys)
        if base == "selp":
            ra, rb = self.operand(ops[1], t, ins), self.operand(ops[2], t, ins)
            rc = self.operand(ops[3], "pred", ins)
            d = ops[0].name

            def selp(R):
                a, b, c = ra(R), rb(R), rc(R)
                if any(isinstance(x, _Unknown) for x in (a, b, c)):
                    return [(d, next(x for x in (c, a, b) if isinstance(x, _Unknown)))]
                if not _is_vec(c):
                    return [(d, _store(a if c else b, t))]
                return [(d, _store(np.where(_full(c), a, b), t))]
            return selp
        if base == "cvt" and len(tys) >= 2:
            return self._cvt(ins, mods, tys)
        fn = _OPS.get(base)
        if fn is None or not isinstance(ops[0], Reg):
            return all_unknown(_Unknown(f"line {ins.line}: {base} results are not modelled: {ins.text}"))
        return fn(self, ins, mods, tys, t)

    def _setp(self, ins, mods, tys):
        ops = ins.operands
        cmp_op = next(m for m in mods if m in CMP_OPS)
        t = tys[-1]
        bool_op = next((m for m in mods if m in ("and", "or", "xor")), None)
        lazy = t in _U32_LIKE
        ra, rb = self.operand(ops[1], t, ins, lazy), self.operand(ops[2], t, ins, lazy)
        rc = self.operand(ops[3], "pred", ins) if bool_op and len(ops) > 3 else None
        first = ops[0]
        dp = first.first.name if isinstance(first, Pair) else first.name
        dq = first.second.name if isinstance(first, Pair) else None
        fl = is_float(t)

        def setp(R):
            a, b = ra(R), rb(R)
            c = rc(R) if rc else None
            for x in (a, b, c):
                if isinstance(x, _Unknown):
                    return [(dp, x)] + ([(dq, x)] if dq else [])
            r = None
            if type(a) is Aff or type(b) is Aff:
                r = aff_compare(cmp_op, a, b)
                if r is None:
                    a, b = _full(a), _full(b)
                else:
                    nr = ~r
            if r is None:
                r, nr = _cmp(cmp_op, a, b, fl)
            if c is not None:
                if bool_op == "and":
                    r, nr = r & c, nr & c
                elif bool_op == "or":
                    r, nr = r | c, nr | c
                else:
                    r, nr = r ^ c, nr ^ c
            out = [(dp, _store(r, "pred"))]
            if dq:
                out.append((dq, _store(nr, "pred")))
            return out
        return setp

    def _cvt(self, ins, mods, tys):
        dt, st = tys[0], tys[1]
        rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)
        r = self.operand(ins.operands[1], st, ins)
        d = ins.operands[0].name if isinstance(ins.operands[0], Reg) else None
        if "sat" in mods and not is_float(dt):
            why = _Unknown(f"line {ins.line}: saturating conversion not modelled")
            return lambda R: [(d, why)]

        def cvt(R):
            v = r(R)
            if isinstance(v, _Unknown):
                return [(d, v)]
            if is_float(dt):
                if _is_arr(v):
                    v = v.astype(np.float64 if dt == "f64" else np.float32)
                else:
                    v = float(v) if dt == "f64" else np.float32(v)
                if is_float(st) and rnd in ("rni", "rzi", "rmi", "rpi"):
                    v = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[rnd](v)
                if "sat" in mods:
                    v = np.clip(np.nan_to_num(v, nan=0.0), 0.0, 1.0)
                return [(d, _store(v, dt))]
            if is_float(st):
                f = {"rni": np.rint, "rmi": np.floor, "rpi": np.ceil}.get(rnd or "rzi", np.trunc)
                fv = f(np.asarray(v, dtype=np.float64))
                wd = width(dt)
                lo, hi = (-(2 ** (wd - 1)), 2 ** (wd - 1) - 1) if dt[0] == "s" else (0, 2 ** wd - 1)
                fv = np.nan_to_num(np.clip(fv, lo, hi), nan=0.0)
                iv = fv.astype(np.int64) if fv.ndim else int(fv)
                return [(d, _store(iv, dt))]
            return [(d, _store(_read(_store(v, st), st), dt))]
        return cvt


_SPECIAL_UNKNOWN = {"%clock", "%clock64", "%smid", "%nsmid", "%globaltimer", "%pm0"}


def _cmp(op: str, a, b, fl: bool):
    if fl:
        nan = np.isnan(a) | np.isnan(b)
        if op == "num":
            return ~nan, nan
        if op == "nan":
            return nan, ~nan
        unordered = op.endswith("u")
        base = op[:-1] if unordered else op
        r = _cmp_int(base, a, b)
        r = (r | nan) if unordered else (r & ~nan)
        # setp writes the complement of the result into the second predicate
        return r, ~np.asarray(r) if not _is_arr(r) else ~r
    r = _cmp_int(op, a, b)
    return r, (not r) if isinstance(r, bool | np.bool_) else ~r


def _cmp_int(op, a, b):
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
    return bool(r) if not _is_arr(r) else r


def _bin(f, float_ok=True):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        if is_float(t) and not float_ok:
            why = _Unknown(f"line {ins.line}: not modelled")
            return lambda R: [(ops[0].name, why)]
        ra, rb = ev.operand(ops[1], t, ins), ev.operand(ops[2], t, ins)
        d = ops[0].name

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, _Unknown):
                return [(d, a)]
            if isinstance(b, _Unknown):
                return [(d, b)]
            return [(d, _store(f(a, b), t))]
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
        why = _Unknown(f"line {ins.line}: mul.hi of 64-bit values not modelled")
        return lambda R: [(d, why)]
    if not hi and not wide and t in _U32_LIKE:
        la, lb = ev.operand(ops[1], t, ins, lazy=True), ev.operand(ops[2], t, ins, lazy=True)

        def g_lo(R):
            a, b = la(R), lb(R)
            if isinstance(a, _Unknown):
                return [(d, a)]
            if isinstance(b, _Unknown):
                return [(d, b)]
            r = aff_scale(a, b) if type(b) is int else aff_scale(b, a) if type(a) is int else None
            if r is not None:
                return [(d, r)]
            return [(d, _store(_full(a) * _full(b), t))]
        return g_lo

    def g(R):
        a, b = ra(R), rb(R)
        if isinstance(a, _Unknown):
            return [(d, a)]
        if isinstance(b, _Unknown):
            return [(d, b)]
        if is_float(t):
            return [(d, _store(a * b, t))]
        if hi:
            if t[0] == "u":
                a = a.astype(np.uint64) if _is_arr(a) else a
                b = b.astype(np.uint64) if _is_arr(b) else b
                p = (a * b) >> np.uint64(32) if (_is_arr(a) or _is_arr(b)) else (a * b) >> 32
                return [(d, _store(p.astype(np.int64) if _is_arr(p) else p, wt))]
            return [(d, _store((a * b) >> 32, wt))]
        if wd >= 64 and (_is_arr(a) or _is_arr(b)):
            p = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64)
            return [(d, _store(p, wt))]
        return [(d, _store(a * b, wt))]
    return g


def _mad(ev, ins, mods, tys, t):
    ops = ins.operands
    wide, hi = "wide" in mods, "hi" in mods
    d = ops[0].name
    wd = width(t)
    wt = (t[0] + str(2 * wd)) if wide else t
    if hi:
        why = _Unknown(f"line {ins.line}: mad.hi not modelled")
        return lambda R: [(d, why)]
    lazy = not wide and t in _U32_LIKE
    ra, rb = ev.operand(ops[1], t, ins, lazy), ev.operand(ops[2], t, ins, lazy)
    rc = ev.operand(ops[3], wt, ins, lazy)

    def g(R):
        a, b, c = ra(R), rb(R), rc(R)
        for x in (a, b, c):
            if isinstance(x, _Unknown):
                return [(d, x)]
        if lazy:
            if type(a) is Aff or type(b) is Aff:
                p = aff_scale(a, b) if type(b) is int else aff_scale(b, a) if type(a) is int else None
                if p is None:
                    p = _full(a) * _full(b)
            else:
                p = a * b
            r = aff_add(p, c, 1)
            if r is not None:
                return [(d, r)]
            return [(d, _store(_full(p) + _full(c), wt))]
        if wd >= 32 and (_is_arr(a) or _is_arr(b) or _is_arr(c)) and not is_float(t):
            p = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64) + np.asarray(c).astype(
                np.int64)
            return [(d, _store(p, wt))]
        return [(d, _store(a * b + c, wt))]
    return g


def _shift(left):
    def make(ev, ins, mods, tys, t):
        ops = ins.operands
        ra, rb = ev.operand(ops[1], t, ins, lazy=left and t in _U32_LIKE), ev.operand(ops[2], "u32", ins)
        d = ops[0].name
        wd = width(t)

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, _Unknown):
                return [(d, a)]
            if isinstance(b, _Unknown):
                return [(d, b)]
            if type(a) is Aff:
                r = aff_scale(a, b, shift=True) if type(b) is int else None
                if r is not None:
                    return [(d, r)]
                a = a.full()
            b = np.minimum(b, wd) if _is_arr(b) else min(b, wd)
            if wd >= 64:
                if _is_arr(a) or _is_arr(b):
                    a2 = np.asarray(a)
                    a2 = a2.astype(np.uint64) if t[0] == "u" else a2.astype(np.int64)
                    b2 = np.minimum(np.asarray(b), 63).astype(a2.dtype)
                    r = (a2 << b2) if left else (a2 >> b2)
                    big = np.asarray(b) >= 64
                    if big.any():
                        r = np.where(big, 0 if (left or t[0] != "s") else np.where(a2 < 0, -1, 0), r)
                    return [(d, _store(r.astype(np.int64), t))]
            if left:
                return [(d, _store(a << b, t))]
            return [(d, _store(a >> b, t))]
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
            if isinstance(a, _Unknown):
                return [(d, a)]
            if isinstance(b, _Unknown):
                return [(d, b)]
            return [(d, _store(f(a, b), t))]
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
            if isinstance(a, _Unknown):
                return [(d, a)]
            return [(d, _store(f(a, t), t))]
        return g
    return make


def base_is_not(ins: Instruction) -> bool:
    return ins.base in ("not", "popc", "clz", "brev")


def _not(a, t):
    if t == "pred":
        return ~a if _is_vec(a) else not a
    return ~a


def _idiv(a, b):
    if not (_is_arr(a) or _is_arr(b)):
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
    if not (_is_arr(a) or _is_arr(b)):
        return a if b == 0 else a - q * b
    a2, b2 = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if a2.dtype == np.uint64 or b2.dtype == np.uint64:
        a2, b2 = a2.astype(np.int64), b2.astype(np.int64)
    return np.where(b2 == 0, a2, a2 - q * b2)


def _minmax(f):
    def g(a, b):
        if _is_arr(a) or _is_arr(b):
            return f(a, b)
        return min(a, b) if f is np.minimum else max(a, b)
    return g


def _popc(a, t):
    w = width(t)
    if _is_arr(a):
        a = a.astype(np.uint64) & np.uint64((1 << w) - 1) if w < 64 else a.astype(np.uint64)
        return np.bitwise_count(a).astype(np.int64)
    return bin(int(a) % (1 << w)).count("1")


def _clz(a, t):
    w = width(t)
    if _is_arr(a):
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
            if isinstance(x, _Unknown):
                return [(d, x)]
        if t == "f32":
            r = np.float64(a) * np.float64(b) + np.float64(c) if not (_is_arr(a) or _is_arr(b) or _is_arr(c)) \
                else np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
            return [(d, _store(r, t))]
        return [(d, _store(a * b + c, t))]
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
            if isinstance(x, _Unknown):
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
        return [(d, _store(v if v.ndim else int(v), t))]
    return g


def _lop3(ev, ins, mods, tys, t):
    ops = ins.operands
    ra, rb, rc = (ev.operand(ops[k], "b32", ins) for k in (1, 2, 3))
    lut = ops[4].value if isinstance(ops[4], Imm) else None
    d = ops[0].name
    if lut is None:
        why = _Unknown(f"line {ins.line}: lop3 with a register LUT not modelled")
        return lambda R: [(d, why)]

    def g(R):
        a, b, c = ra(R), rb(R), rc(R)
        for x in (a, b, c):
            if isinstance(x, _Unknown):
                return [(d, x)]
        r = 0
        for idx in range(8):
            if (lut >> idx) & 1:
                r = r | ((a if idx & 4 else ~a) & (b if idx & 2 else ~b) & (c if idx & 1 else ~c))
        return [(d, _store(r, "b32"))]
    return g


def _addsub(sign: int):
    """add/sub; block-part + thread-part 32-bit sums stay in the compact Aff form."""
    plain = _bin((lambda a, b: a + b) if sign > 0 else (lambda a, b: a - b))

    def make(ev, ins, mods, tys, t):
        if t not in _U32_LIKE or "sat" in mods or "cc" in mods:
            return plain(ev, ins, mods, tys, t)
        ops = ins.operands
        ra, rb = ev.operand(ops[1], t, ins, lazy=True), ev.operand(ops[2], t, ins, lazy=True)
        d = ops[0].name

        def g(R):
            a, b = ra(R), rb(R)
            if isinstance(a, _Unknown):
                return [(d, a)]
            if isinstance(b, _Unknown):
                return [(d, b)]
            r = aff_add(a, b, sign)
            if r is not None:
                return [(d, r)]
            a, b = _full(a), _full(b)
            return [(d, _store(a + b if sign > 0 else a - b, t))]
        return g
    return make


_OPS = {
    "bfe": _bfe,
    "lop3": _lop3,
    "add": _addsub(1),
    "sub": _addsub(-1),
    "mul": _mul,
    "mad": _mad,
    "fma": _fma3,
    "div": _bin(lambda a, b: _fdiv(a, b) if (isinstance(a, float | np.floating) or (
        _is_arr(a) and a.dtype.kind == "f")) else _idiv(a, b)),
    "rem": _bin(_irem, float_ok=False),
    "min": _bin(_minmax(np.minimum)),
    "max": _bin(_minmax(np.maximum)),
    "and": _logic(lambda a, b: a & b),
    "or": _logic(lambda a, b: a | b),
    "xor": _logic(lambda a, b: a ^ b),
    "not": _unary(_not),
    "shl": _shift(True),
    "shr": _shift(False),
    "abs": _unary(lambda a, t: np.abs(a) if _is_arr(a) else abs(a)),
    "neg": _unary(lambda a, t: -a),
    "popc": _unary(_popc),
    "clz": _unary(_clz),
}


# ------------------------------------------------------------------------------------------- runner
@dataclass
class _Plan:
    """Per basic block: actions (instruction index, evaluate?, guard?) and the terminator."""

    actions: list[list[tuple]]
    term: list[tuple]  # (kind, target block, fallthrough block, guard reg, neg)
    reads: dict[int, tuple[str, ...]]  # slice instruction -> registers / parameter slots it reads
    live_in: list[frozenset]  # per block: slice registers whose value on entry may still be read
    use: list = None  # per block: registers read before written in the block
    kill: list = None  # per block: registers written (unguarded) in the block


def _plan(prog: Program, ev: _Evaluator) -> _Plan:
    actions, term = [], []
    reads: dict[int, tuple[str, ...]] = {}
    for i in prog.slice_instrs:
        ins = prog.instrs[i]
        r = list(defs_uses(ins)[1])
        for op in ins.operands:
            if isinstance(op, Addr) and isinstance(op.base, Sym):
                r.append(f"&{op.base.name}+{op.offset}")
        reads[i] = tuple(dict.fromkeys(r))
    for b in prog.blocks:
        acts = []
        for i in range(b.start, b.end):
            ins = prog.instrs[i]
            is_branch = ins.base == "bra" or (ins.base == "ret" and ins.operands)
            if is_branch or (ins.base in ("ret", "exit", "trap") and i == b.end - 1):
                continue
            ev_fn = ev.compile(ins) if i in prog.slice_instrs else None
            if ins.pred or ev_fn is not None:
                acts.append((i, ev_fn, ins.pred, ins.pred_neg, ins.base in ("ret", "exit", "trap")))
        actions.append(acts)
        last = prog.instrs[b.end - 1]
        fall = prog.block_of[b.end] if b.end < len(prog.instrs) else -1
        if last.base == "bra" or (last.base == "ret" and last.operands):
            tgt = prog.block_of[prog.labels[last.operands[-1].name]]
            term.append(("bra", tgt, fall, last.pred, last.pred_neg, b.end - 1))
        elif last.base in ("ret", "exit", "trap"):
            term.append(("exit", -1, fall, last.pred, last.pred_neg, b.end - 1))
        else:
            term.append(("fall", fall, -1, None, False, b.end - 1))
    live_in, use, kill = _liveness(prog, actions, term, reads)
    return _Plan(actions, term, reads, live_in, use, kill)


def _liveness(prog: Program, actions, term, reads) -> list[frozenset]:
    """Backward liveness of the evaluated registers: a masked write needs no merge with the old value
    when no lane waiting elsewhere can still read that old value."""
    nb = len(prog.blocks)
    use: list[set] = [set() for _ in range(nb)]
    kill: list[set] = [set() for _ in range(nb)]
    for b in range(nb):
        u, k = use[b], kill[b]
        for i, fn, gp, _gneg, _ex in actions[b]:
            if gp and gp not in k:
                u.add(gp)
            if fn is not None:
                for r in reads[i]:
                    if r not in k:
                        u.add(r)
                ins = prog.instrs[i]
                if not ins.pred:
                    d = defs_uses(ins)[0]
                    if ins.base == "st" and ins.operands and isinstance(ins.operands[0], Addr) and isinstance(
                            ins.operands[0].base, Sym):
                        d = [f"&{ins.operands[0].base.name}+{ins.operands[0].offset}"]
                    k.update(d)
        gp = term[b][3]
        if gp and gp not in k:
            u.add(gp)
    live_in: list[set] = [set(u) for u in use]
    changed = True
    while changed:
        changed = False
        for b in range(nb - 1, -1, -1):
            out: set = set()
            for s_ in prog.blocks[b].succs:
                out |= live_in[s_]
            new = use[b] | (out - kill[b])
            if new != live_in[b]:
                live_in[b] = new
                changed = True
    return [frozenset(x) for x in live_in], use, kill


def _loop_carried_reads(plan: _Plan, prog: Program, loop) -> frozenset:
    """Registers an iteration may read before writing them: liveness at the header over paths that stay
    inside the loop (what leaves the loop is read after the last iteration, not by the next one)."""
    body = loop.body
    live = {b: set(plan.use[b]) for b in body}
    changed = True
    while changed:
        changed = False
        for b in sorted(body, reverse=True):
            out: set = set()
            for s_ in prog.blocks[b].succs:
                if s_ in body and s_ != loop.header:
                    out |= live[s_]
                elif s_ == loop.header:
                    out |= live[loop.header]
            new = plan.use[b] | (out - plan.kill[b])
            if new != live[b]:
                live[b] = new
                changed = True
    return frozenset(live[loop.header])


def _vkey(v):
    """Cache key of a value: arrays by identity (the cache keeps them alive), scalars by value."""
    if v is None or v is True or v is False:
        return v
    if isinstance(v, np.ndarray | _Unknown | CMask | Aff):
        return ("#", id(v))
    return (type(v).__name__, v)


class _Memo:
    """LRU cache, bounded in bytes, of results computed from array operands identified by identity.

    A loop whose iterations see the same operand arrays (values that do not depend on the loop
    counter) gets the same result objects back, so its masks keep their identity and the per-iteration
    cost is a dictionary lookup instead of work proportional to the number of threads.
    """

    def __init__(self, budget: int):
        self.d: OrderedDict = OrderedDict()
        self.bytes = 0
        self.budget = budget

    def get(self, key):
        e = self.d.get(key)
        if e is None:
            return None
        self.d.move_to_end(key)
        return e[1]

    def put(self, key, keep, value, nbytes: int) -> None:
        if nbytes > self.budget // 4:
            return
        self.d[key] = (keep, value, nbytes)
        self.bytes += nbytes
        while self.bytes > self.budget and self.d:
            _, (_, _, nb) = self.d.popitem(last=False)
            self.bytes -= nb


def _nbytes(*vals) -> int:
    n = 64
    for v in vals:
        if isinstance(v, np.ndarray):
            n += v.nbytes
        elif isinstance(v, list | tuple):
            n += _nbytes(*v)
    return n


class _Runner:
    def __init__(self, prog: Program, params: dict, grid, block, policy: str, prob: float, forced: str | None):
        self.prog = prog
        self.ev = _Evaluator(prog, params)
        self.plan = _plan(prog, self.ev)
        self.grid, self.block = grid, block
        self.T = block[0] * block[1] * block[2]
        self.W = (self.T + 31) // 32
        self.policy = policy
        self.prob = prob
        self.forced = forced  # 'taken' / 'not_taken' for the bounds policy runs
        self.unresolved: dict[int, str] = {}
        nb = len(prog.blocks)
        self.block_lanes = [0] * nb
        self.block_warps = [0] * nb
        self.guard_lanes: dict[int, int] = {}
        self.visits = 0
        self.loop_of = {lp.header: lp for lp in prog.loops}
        self.headers = set(self.loop_of)
        self.ff_cache: dict = {}
        self.batch_k: dict[int, int] = {}
        self.batch_fail: dict[int, int] = {}
        self.ready: dict[int, tuple] = {}
        self.loop_reads: dict[int, frozenset] = {}
        self.fn_cache: dict[int, object] = {}

    # -- masks
    def lanes_warps(self, mask, nblocks: int) -> tuple[int, int]:
        T, W = self.T, self.W
        if mask is True:
            return nblocks * T, nblocks * W
        if type(mask) is CMask:
            lanes, warps = lanes_warps_cmask(mask, T, W)
            factor = nblocks // len(mask.cls)
            return lanes * factor, warps * factor
        m = mask
        rows = m.shape[0]
        if m.shape[1] == 1:  # block-level mask
            k = int(m.sum())
            return k * T * (nblocks // rows), k * W * (nblocks // rows)
        lanes = int(m.sum())
        pad = W * 32 - T
        mm = np.pad(m, ((0, 0), (0, pad))) if pad else m
        warps = int(mm.reshape(rows, W, 32).any(axis=2).sum())
        factor = nblocks // rows
        return lanes * factor, warps * factor

    def decide(self, g, i: int, visit: int):
        """Guard value -> bool scalar or array; unknown guards go through the policy."""
        if not isinstance(g, _Unknown):
            return g
        ins = self.prog.instrs[i]
        self.unresolved.setdefault(i, f"line {ins.line}: {ins.text} (depends on {g.why})")
        if self.policy == "error":
            raise UnresolvedBranchError([self.unresolved[i]])
        mode = self.forced or self.policy
        if mode == "taken":
            return True
        if mode == "not_taken":
            return False
        if mode == "diverge":  # every warp goes both ways: the most warp issues a forward branch can cost
            return (np.arange(self.T) % 2 == 0)[None, :]
        rng = np.random.default_rng((i * 1_000_003 + visit) & 0xFFFFFFFF)
        return rng.random((self.nb_cur, self.T)) < self.prob

    def run_chunk(self, regs: dict, nblocks: int, mult: int) -> None:
        self.nb_cur = nblocks
        self.mult_cur = mult
        self.memo = _Memo(MEMO_BYTES)
        self.rec, self.grec = {}, {}
        self.events = []
        self.hist: dict[int, list] = {}
        self.ready = {}
        self._drive(regs, {0: True}, [0], None)
        self._fold(self.rec, self.grec, nblocks, mult)

    def _drive(self, regs: dict, pending: dict, heap: list, stop) -> None:
        """Min-PC traversal until no lane is pending. With stop=(header, body, returned) it runs one batch of
        loop iterations: lanes reaching the header are collected, leaving the loop aborts (_BatchAbort)."""
        prog, plan = self.prog, self.plan
        memo = self.memo
        rec, grec, events = self.rec, self.grec, self.events
        record = _record
        visit = 0
        where, land, lnot = self._where, self._and, self._not
        if stop is None:
            def push(tb, m):
                self._push(pending, heap, tb, m)
        else:
            stop_h, stop_body = stop

            def push(tb, m):
                if tb == stop_h:  # iteration done: wait at the header (visible to liveness), never popped
                    cur = pending.get(tb)
                    pending[tb] = m if cur is None else (True if (cur is True or m is True) else _norm(cur | m))
                elif tb not in stop_body:
                    raise _BatchAbort
                else:
                    self._push(pending, heap, tb, m)
        ndarray = np.ndarray
        live_in = plan.live_in
        while heap:
            b = heapq.heappop(heap)
            mask = pending.pop(b, None)
            if mask is None:
                continue
            visit += 1
            self.visits += 1
            if self.visits > MAX_STEPS:
                raise AnalysisError(f"kernel {prog.kernel.name}: more than {MAX_STEPS} block steps "
                                    "(a loop that does not terminate under this policy?)")
            if b in self.headers and stop is None or (stop is not None and b in self.headers and b != stop[0]):
                self._at_header(b, mask, regs, pending)
            record(rec, b, mask)
            events.append(("b", b, mask))
            for i, fn, gp, gneg, is_exit in plan.actions[b]:
                g = True
                if gp:
                    g = self.decide(_read(regs[gp], "pred") if gp in regs else _Unknown(f"{gp} unset"), i, visit)
                    if gneg:
                        g = lnot(g)
                    m = land(mask, g)
                    if m is not None:
                        record(grec, i, m)
                        events.append(("g", i, m))
                    if is_exit:  # predicated exit mid-block: remove exiting lanes
                        if stop is not None and m is not None:
                            raise _BatchAbort
                        mask = land(mask, lnot(g))
                        if mask is None:
                            break
                        continue
                if fn is not None:
                    vals = [regs.get(r) for r in plan.reads[i]]
                    for v in vals:
                        if type(v) is ndarray:
                            key = (i, *map(_vkey, vals))
                            writes = memo.get(key)
                            if writes is None:
                                writes = fn(regs)
                                memo.put(key, vals, writes, _nbytes(*(w[1] for w in writes)))
                            break
                    else:  # scalar inputs only: cheaper to recompute than to look up
                        writes = fn(regs)
                    for reg, val in writes:
                        if reg is None:
                            continue
                        if g is not True:
                            val = where(g, val, regs.get(reg))
                        if mask is not True and reg in regs:
                            for j in pending:
                                if reg in live_in[j]:
                                    val = where(mask, val, regs[reg])
                                    break
                        regs[reg] = val
            else:
                kind, tgt, fall, gp, gneg, ti = plan.term[b]
                if kind == "fall":
                    if tgt >= 0:
                        push(tgt, mask)
                    continue
                if gp is None:
                    if kind == "bra":
                        push(tgt, mask)
                    elif stop is not None:
                        raise _BatchAbort
                    continue
                g = self.decide(_read(regs[gp], "pred") if gp in regs else _Unknown(f"{gp} unset"), ti, visit)
                if gneg:
                    g = lnot(g)
                taken = land(mask, g)
                if kind == "bra":
                    if taken is not None:
                        push(tgt, taken)
                else:
                    if taken is not None:
                        if stop is not None:
                            raise _BatchAbort
                        record(grec, ti, taken)
                        events.append(("g", ti, taken))
                nt = land(mask, lnot(g))
                if nt is not None and fall >= 0:
                    push(fall, nt)

    def _fold(self, rec: dict, grec: dict, nblocks: int, mult: int) -> None:
        """Recorded (mask, multiplicity) pairs -> lane and warp totals per block and guard."""
        cache: dict[int, tuple[int, int]] = {}
        for b, slot in rec.items():
            for m, w in slot.values():
                lw = cache.get(id(m))
                if lw is None:
                    lw = cache[id(m)] = self.lanes_warps(m, nblocks)
                self.block_lanes[b] += lw[0] * w * mult
                self.block_warps[b] += lw[1] * w * mult
        for i, gs in grec.items():
            tot = 0
            for m, w in gs.values():
                lw = cache.get(id(m))
                if lw is None:
                    lw = cache[id(m)] = self.lanes_warps(m, nblocks)
                tot += lw[0] * w
            self.guard_lanes[i] = self.guard_lanes.get(i, 0) + tot * mult

    # ---------------------------------------------------------------- uniform-loop fast-forward
    def _at_header(self, h: int, mask, regs: dict, pending: dict) -> None:
        """At a loop header: if the last two iterations were identical up to scalar registers that
        advance by constant steps, jump over every further iteration whose decisions provably stay the
        same (closed form), instead of executing them one by one."""
        hist = self.hist.setdefault(h, [])
        pend = tuple(sorted((k, id(v)) for k, v in pending.items()))
        self.pending_now = pending
        ready = self.ready.pop(h, None)
        if ready is not None and ready[0] == id(mask) and ready[1] == pend:
            # the previous batch ended in the same steady state: batch the next iterations right away
            if self._try_batch(h, mask, regs, ready[2], ready[3], self.loop_of[h]):
                self.ready[h] = ready
                return
        hist.append((id(mask), len(self.events), dict(regs), pend))
        if len(hist) > 3:
            del hist[0]
        if len(hist) < 3:
            return
        (m0, e0, r0, p0), (m1, e1, r1, p1), (m2, e2, r2, p2) = hist
        if not (m0 == m1 == m2 and p0 == p1 == p2):
            return
        seg1, seg2 = self.events[e0:e1], self.events[e1:e2]
        seg_equal = len(seg1) == len(seg2) and [_ekey(x) for x in seg1] == [_ekey(x) for x in seg2]
        if r0.keys() != r1.keys() or r1.keys() != r2.keys():
            return
        carried: dict[str, int] = {}
        changed_vec: set[str] = set()  # changed values that must be recomputed by every iteration
        live_h = self.loop_reads.get(h)
        if live_h is None:  # what the next iteration can read before writing it
            live_h = self.loop_reads[h] = _loop_carried_reads(self.plan, self.prog, self.loop_of[h])
        for k, v2 in r2.items():
            v0, v1 = r0[k], r1[k]
            if v0 is v1 and v1 is v2:
                continue
            if type(v0) is int and type(v1) is int and type(v2) is int:
                if k not in live_h:
                    if not v0 == v1 == v2:
                        changed_vec.add(k)
                    continue
                if v1 - v0 != v2 - v1:
                    return
                if v2 != v1:
                    carried[k] = v2 - v1
                continue
            if isinstance(v2, _Unknown) or isinstance(v1, _Unknown) or isinstance(v0, _Unknown):
                return
            if _is_vec(v0) or _is_vec(v1) or _is_vec(v2):
                changed_vec.add(k)  # recomputed every iteration (checked below) or the loop is not steady
                continue
            if not (v0 == v1 == v2):
                return
        loop = self.loop_of[h]
        if not carried:
            if not seg_equal or any(k in live_h for k in changed_vec):
                return
            self._check_infinite(h, seg2)  # nothing a later iteration reads has changed: it never ends
        if seg_equal and not any(_is_vec(regs.get(k)) for k in changed_vec) and self._try_ff(
                h, regs, carried, seg2, loop):
            return
        self._try_batch(h, mask, regs, carried, changed_vec, loop)

    def _try_ff(self, h: int, regs: dict, carried: dict, seg2, loop) -> bool:
        """Closed-form jump over iterations whose affine decisions cannot change; False if not applicable."""
        plan = self._ff_plan(h, frozenset(carried), seg2, loop)
        if plan is None:
            return False
        d_instrs, setps = plan
        for reg in self._ff_defs(d_instrs):
            if reg in regs and _is_vec(regs[reg]):
                return False
        # affine evaluation of every comparison on the template path at the next two iterations
        def replay(state: dict) -> list[tuple]:
            R = dict(state)
            seen = []
            for ev in seg2:
                if ev[0] != "b":
                    continue
                for i, fn, _gp, _gn, _ex in self.plan.actions[ev[1]]:
                    if i not in d_instrs:
                        continue
                    if i in setps:
                        ra, rb, op, t = setps[i]
                        seen.append((ra(R), rb(R), op, t))
                    for reg, val in fn(R):
                        if reg is not None:
                            R[reg] = val
            return seen, R
        s0, _ = replay(regs)
        s1, _ = replay(_advance(regs, carried, 1))
        sm, _ = replay(_advance(regs, carried, -1))
        n = None
        if len(s0) != len(s1) or len(s0) != len(sm):
            return False
        for (a0, b0, op, t), (a1, b1, _, _), (am, bm, _, _) in zip(s0, s1, sm, strict=True):
            if any(type(x) is not int for x in (a0, b0, a1, b1, am, bm)):
                return False
            da, db = a1 - a0, b1 - b0
            if am != a0 - da or bm != b0 - db:
                return False  # not affine (wrap-around inside the observed window)
            k = _first_flip(op, a0 - b0, da - db, _cmp_int(op, am, bm))
            k = min(k, _range_limit(a0, da, t), _range_limit(b0, db, t))
            n = k if n is None else min(n, k)
        if n is None or n >= 1 << 61:
            self._check_infinite(h, seg2)
        if n < 2:
            return True
        # apply n - 1 template iterations in closed form, then replay the last one to get exact registers
        for ev in seg2:
            self._apply(ev, n)
        self.events.append(("f", h, n, seg2))
        base = _advance(regs, carried, n - 1)
        _, after = replay(base)
        for reg in list(after):
            if reg in carried or reg in self._ff_defs(d_instrs):
                regs[reg] = after[reg]
        self.hist[h] = []
        return True

    def _try_batch(self, h: int, mask, regs: dict, carried: dict, changed_vec: set, loop) -> bool:
        """Run K further iterations at once as K x blocks extra lanes (the iteration number is one more
        axis): valid because in the steady state an iteration depends on nothing but the carried scalar
        counters, which are known for every future iteration. Aborted (nothing applied) if a lane would
        leave the loop within the batch."""
        B, T = self.nb_cur, self.T
        K = min(self.batch_k.get(h, 1 << 30), BATCH_LANES // max(B * T, 1), 4096)
        if not BATCH_LOOPS or K < 8 or self.batch_fail.get(h, 0) >= 2 or B * T > BATCH_MAX_LANES:
            return False
        bound = self._affine_bound(regs, carried, loop)
        if bound is not None:
            K = min(K, bound)
            if K < 8:
                return False
        D = set(carried)
        body = sorted(i for b in loop.body for i in range(self.prog.blocks[b].start, self.prog.blocks[b].end)
                      if i in self.prog.slice_instrs)
        changed = True
        while changed:
            changed = False
            for i in body:
                ds = defs_uses(self.prog.instrs[i])[0]
                if any(r in D for r in self.plan.reads[i]) and not set(ds) <= D:
                    D.update(ds)
                    changed = True
        carried_reads = self.loop_reads.get(h)
        if carried_reads is None:
            carried_reads = self.loop_reads[h] = _loop_carried_reads(self.plan, self.prog, loop)
        if (D - set(carried)) & carried_reads or not changed_vec <= D:
            return False
        sub = {k: _tile(v, K, B) for k, v in regs.items()}
        for r, d in carried.items():
            w = self.reg_width(r)
            vals = [_store(regs[r] + j * d, "b64" if w >= 64 else "b32") for j in range(K)]
            sub[r] = np.repeat(np.asarray(vals, dtype=np.int64), B)[:, None]
        saved = (self.rec, self.grec, self.events, self.hist, self.memo, self.nb_cur, self.ready,
                 self.pending_now)
        self.rec, self.grec, self.events, self.hist, self.ready = {}, {}, [], {}, {}
        self.memo, self.nb_cur = _Memo(MEMO_BYTES), K * B
        try:
            self._drive(sub, {h: _tile(mask, K, B)}, [h], (h, loop.body))
            ok = True
        except _BatchAbort:
            ok = False
        sub_rec, sub_grec = self.rec, self.grec
        self.rec, self.grec, self.events, self.hist, self.memo, self.nb_cur, self.ready, self.pending_now = saved
        new_regs = {}
        if ok:
            for r, d in carried.items():  # the counters must really have advanced by d every iteration
                w = self.reg_width(r)
                want = np.asarray([_store(regs[r] + j * d, "b64" if w >= 64 else "b32") for j in range(1, K + 1)],
                                  dtype=np.int64)
                got = sub.get(r)
                if type(got) is not np.ndarray or got.shape != (K * B, 1) or not (
                        got[:, 0].reshape(K, B) == want[:, None]).all():
                    ok = False
                    break
        if ok:
            for k, v in sub.items():
                new_regs[k] = _last(v, K, B)
            for r in carried:
                new_regs[r] = int(new_regs[r].flat[0])
        if not ok:
            self.batch_k[h] = K // 2
            self.batch_fail[h] = self.batch_fail.get(h, 0) + 1
            self.hist[h] = []
            return False
        self._fold(sub_rec, sub_grec, K * B, self.mult_cur)
        regs.update(new_regs)
        self.events.append(("x", h, object()))
        self.hist[h] = []
        self.ready[h] = (id(mask), tuple(sorted((k, id(v)) for k, v in self.pending_now.items())), carried,
                         changed_vec)
        return True

    def _affine_bound(self, regs: dict, carried: dict, loop) -> int | None:
        """Iterations before any comparison that is affine in the loop counters changes its outcome (a
        bound for the batch size, so batches rarely run past the loop exit); None if there is none."""
        prog, plan = self.prog, self.plan
        body = sorted(i for b in loop.body for i in range(prog.blocks[b].start, prog.blocks[b].end)
                      if i in prog.slice_instrs)
        A = set(carried)
        chain: list[int] = []
        for i in body:
            ins = prog.instrs[i]
            rd = plan.reads[i]
            if ins.pred or not any(r in A for r in rd) or not _affine_safe(ins, A):
                continue
            if any(r not in A and type(regs.get(r)) is not int for r in rd):
                continue
            chain.append(i)
            A.update(defs_uses(ins)[0])
        setps = [i for i in chain if prog.instrs[i].base == "setp"]
        if not setps:
            return None

        def replay(state):
            R = dict(state)
            out = []
            for i in chain:
                ins = prog.instrs[i]
                if ins.base == "setp":
                    t = value_types(ins.mods)[-1]
                    op = next(m for m in ins.mods if m in CMP_OPS)
                    a = self.ev.operand(ins.operands[1], t, ins)(R)
                    b = self.ev.operand(ins.operands[2], t, ins)(R)
                    out.append((a, b, op, t))
                for reg, val in self.plan_fn(i)(R):
                    if reg is not None:
                        R[reg] = val
            return out
        s0, s1, sm = replay(regs), replay(_advance(regs, carried, 1)), replay(_advance(regs, carried, -1))
        n = None
        for (a0, b0, op, t), (a1, b1, _, _), (am, bm, _, _) in zip(s0, s1, sm, strict=True):
            if any(type(x) is not int for x in (a0, b0, a1, b1, am, bm)):
                continue
            da, db = a1 - a0, b1 - b0
            if am != a0 - da or bm != b0 - db:
                continue
            k = _first_flip(op, a0 - b0, da - db, _cmp_int(op, a0, b0))
            k = min(k, _range_limit(a0, da, t), _range_limit(b0, db, t))
            n = k if n is None else min(n, k)
        return n

    def plan_fn(self, i: int):
        fn = self.fn_cache.get(i)
        if fn is None:
            fn = self.fn_cache[i] = self.ev.compile(self.prog.instrs[i])
        return fn

    def reg_width(self, r: str) -> int:
        """Bit width of a register from the type of the instructions that write it."""
        for i in self.prog.defs.get(r, ()):
            tys = value_types(self.prog.instrs[i].mods)
            if tys:
                return width(tys[0] if self.prog.instrs[i].base != "cvt" else tys[0])
        return 32

    def _check_infinite(self, h: int, seg) -> None:
        raise AnalysisError(f"kernel {self.prog.kernel.name}: the loop at line "
                            f"{self.prog.instrs[self.prog.blocks[h].start].line} repeats with an unchanging state "
                            "and never exits (under this policy for data-dependent branches)")

    def _apply(self, ev, w: int) -> None:
        kind = ev[0]
        if kind == "b":
            _record(self.rec, ev[1], ev[2], w)
        elif kind == "g":
            _record(self.grec, ev[1], ev[2], w)
        elif kind == "x":
            raise AnalysisError("internal: a batched loop cannot be replayed")
        else:
            for e in ev[3]:
                self._apply(e, w * ev[2])

    def _ff_defs(self, d_instrs) -> set:
        out = set()
        for i in d_instrs:
            out.update(defs_uses(self.prog.instrs[i])[0])
        return out

    def _ff_plan(self, h: int, carried: frozenset, seg, loop):
        key = (h, carried)
        if key in self.ff_cache:
            return self.ff_cache[key]
        res = None
        body_instrs = sorted(i for b in loop.body for i in range(self.prog.blocks[b].start, self.prog.blocks[b].end)
                             if i in self.prog.slice_instrs)
        D = set(carried)
        d_instrs: set[int] = set()
        changed = True
        while changed:
            changed = False
            for i in body_instrs:
                if i in d_instrs:
                    continue
                if any(r in D for r in self.plan.reads[i]):
                    d_instrs.add(i)
                    D.update(defs_uses(self.prog.instrs[i])[0])
                    changed = True
        inner = set()
        for ev in seg:
            if ev[0] == "f":
                inner |= self.loop_of[ev[1]].body
        ok = True
        setps = {}
        for i in d_instrs:
            ins = self.prog.instrs[i]
            if ins.pred or self.prog.block_of[i] in inner or not _affine_safe(ins, D):
                ok = False
                break
            if ins.base == "setp":
                t = value_types(ins.mods)[-1]
                op = next(m for m in ins.mods if m in CMP_OPS)
                ra, rb = self.ev.operand(ins.operands[1], t, ins), self.ev.operand(ins.operands[2], t, ins)
                setps[i] = (ra, rb, op, t)
        defined = set()
        for i in d_instrs:
            defined.update(defs_uses(self.prog.instrs[i])[0])
        if not carried <= defined:
            ok = False
        if ok:
            res = (d_instrs, setps)
        self.ff_cache[key] = res
        return res

    # memoised mask / value combinators (identity in, identity out)
    def _cached(self, key, keep, compute):
        memo = self.memo
        v = memo.get(key)
        if v is None:
            v = compute()
            memo.put(key, keep, (v,), _nbytes(v))
            return v
        return v[0]

    def _where(self, mask, new, old):
        if mask is True or old is None or isinstance(new, _Unknown):
            return new
        if isinstance(old, _Unknown):
            return old
        if not _is_vec(mask):
            return new if mask else old
        return self._cached(("w", id(mask), _vkey(new), _vkey(old)), (mask, new, old),
                            lambda: np.where(_full(mask), _full(new), _full(old)))

    def _and(self, mask, g):
        if not _is_vec(g) or mask is True:
            return _and(mask, g)
        return self._cached(("a", _vkey(mask), id(g)), (mask, g), lambda: _and(mask, g))

    def _not(self, g):
        if not _is_vec(g):
            return not g
        return self._cached(("n", id(g)), (g,), lambda: ~g)

    def _push(self, pending, heap, b, mask):
        cur = pending.get(b)
        if cur is None:
            pending[b] = mask
            heapq.heappush(heap, b)
        elif cur is True or mask is True or cur is mask:
            pending[b] = True if (cur is True or mask is True) else cur
        else:
            pending[b] = self._cached(("o", id(cur), id(mask)), (cur, mask), lambda: _norm(cur | mask))


class _BatchAbort(Exception):
    """A lane would leave the loop inside a batch of iterations: fall back to one iteration at a time."""


BATCH_LOOPS = True
BATCH_MAX_LANES = 8192  # batch loop iterations only when one iteration is this small (overhead-bound)
BATCH_LANES = 1 << 17  # lanes of one batch (iterations x blocks x threads)


def _tile(v, K: int, B: int):
    """Repeat a per-block value for K iterations (rows ordered iteration-major: k * B + b)."""
    if B > 1:
        if type(v) is np.ndarray and v.ndim == 2 and v.shape[0] == B:
            return np.tile(v, (K, 1))
        if type(v) is Aff and v.u.shape[0] == B:
            return Aff(np.tile(v.u, (K, 1)), v.v)
        if type(v) is CMask and len(v.cls) == B:
            return CMask(np.tile(v.cls, K), v.rows)
    return v


def _last(v, K: int, B: int):
    """The rows of the last iteration of a batched value."""
    n = K * B
    if type(v) is np.ndarray and v.ndim == 2 and v.shape[0] == n and n > 1:
        return v[(K - 1) * B:]
    if type(v) is Aff and v.u.shape[0] == n and n > 1:
        return Aff(v.u[(K - 1) * B:], v.v)
    if type(v) is CMask and len(v.cls) == n and n > 1:
        used, inv = np.unique(v.cls[(K - 1) * B:], return_inverse=True)
        return simplify(CMask(inv.reshape(-1), v.rows[used]))
    return v


def _record(table: dict, idx: int, mask, w: int = 1) -> None:
    slot = table.get(idx)
    if slot is None:
        table[idx] = {id(mask): [mask, w]}
        return
    e = slot.get(id(mask))
    if e is None:
        slot[id(mask)] = [mask, w]
    else:
        e[1] += w


def _ekey(ev):
    if ev[0] == "f":
        return ("f", ev[1], ev[2], tuple(_ekey(e) for e in ev[3]))
    m = ev[2]
    return (ev[0], ev[1], m if m is True else id(m))


def _advance(regs: dict, carried: dict, k: int) -> dict:
    out = dict(regs)
    for r, d in carried.items():
        out[r] = regs[r] + k * d
    return out


_AFFINE_OPS = {"mov", "add", "sub", "mul", "mad", "shl", "neg", "setp", "not", "and", "or", "xor"}


def _affine_safe(ins: Instruction, D: set) -> bool:
    """Instruction whose results stay affine in the iteration number when its D operands are affine."""
    base, mods = ins.base, ins.mods
    if base not in _AFFINE_OPS:
        return False
    tys = value_types(mods)
    if any(is_float(t) for t in tys) or "wide" in mods or "hi" in mods or "sat" in mods:
        return False
    if base in ("not", "and", "or", "xor"):
        return tys == ["pred"]
    if base == "setp":
        return not any(m in ("and", "or", "xor") for m in mods) and isinstance(ins.operands[0], Reg)
    ops = ins.operands
    if not isinstance(ops[0], Reg):
        return False
    regs_of = [op.name if isinstance(op, Reg) else None for op in ops]
    if base == "mul":
        return not (regs_of[1] in D and regs_of[2] in D)
    if base == "mad":
        return not (regs_of[1] in D and regs_of[2] in D)
    if base == "shl":
        return regs_of[2] not in D
    return True


_RANGES = {"s": lambda w: (-(1 << (w - 1)), (1 << (w - 1)) - 1), "u": lambda w: (0, (1 << w) - 1),
           "b": lambda w: (0, (1 << w) - 1)}


def _range_limit(v0: int, dv: int, t: str) -> int:
    """Iterations k >= 0 for which v0 + k*dv stays inside type t (so no wrap-around breaks affinity)."""
    if dv == 0:
        return 1 << 62
    lo, hi = _RANGES.get(t[0], _RANGES["s"])(width(t))
    if dv > 0:
        return max(0, (hi - v0) // dv)
    return max(0, (v0 - lo) // (-dv))


def _first_flip(op: str, e0: int, de: int, before: bool) -> int:
    """Smallest k >= 0 where cmp(e0 + k*de, 0) differs from `before` (1<<62 if never)."""
    never = 1 << 62

    def val(k):
        return _cmp_int(op, e0 + k * de, 0)
    if val(0) != before:
        return 0
    if de == 0:
        return never
    if op in ("eq",):
        # becomes true at the unique root, if integral and ahead
        if (-e0) % de == 0 and -e0 // de > 0:
            return -e0 // de
        return never
    if op == "ne":
        if (-e0) % de == 0 and -e0 // de > 0:
            return -e0 // de
        return never
    # monotone comparisons against 0: binary search the first change
    lo, hi = 0, 1
    while val(hi) == before:
        lo, hi = hi, hi * 2
        if hi > never:
            return never
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if val(mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _norm(m):
    if m is True or m is None:
        return m
    if not m.any():
        return None
    if m.all():
        return True
    return m


def _and(mask, g):
    """mask & guard, None when no lane is left; keeps object identity when nothing changes."""
    if g is True or (g is not False and not _is_vec(g) and g):
        return mask
    if g is False or (not _is_vec(g) and not g):
        return None
    if mask is True:
        return _norm(g)
    return _norm(mask & g)


def _parse_policy(policy: str) -> tuple[str, float]:
    if policy.startswith("probability"):
        _, _, p = policy.partition(":")
        try:
            prob = float(p) if p else 0.5
        except ValueError as exc:
            raise AnalysisError(f"bad policy {policy!r}: use probability:P with 0<=P<=1") from exc
        if not 0.0 <= prob <= 1.0:
            raise AnalysisError(f"bad policy {policy!r}: P must be in [0, 1]")
        return "probability", prob
    if policy not in POLICIES:
        raise AnalysisError(f"unknown policy {policy!r}; choose from {POLICIES} (probability as 'probability:P')")
    return policy, 0.5


def _resolve_params(prog: Program, params) -> dict[str, object]:
    kparams = prog.kernel.params
    names = [p[0] for p in kparams]
    out: dict[str, object] = {}
    if params is None:
        return out
    if isinstance(params, list | tuple):
        if len(params) > len(kparams):
            raise AnalysisError(f"{len(params)} parameters given, kernel {prog.kernel.name} has {len(kparams)}")
        return {names[i]: v for i, v in enumerate(params) if v is not None}
    for k, v in dict(params).items():
        key = k
        if isinstance(k, int) or (isinstance(k, str) and k.isdigit()):
            idx = int(k)
            if not 0 <= idx < len(names):
                raise AnalysisError(f"parameter index {k} out of range (kernel has {len(names)} parameters)")
            key = names[idx]
        elif k not in names:
            raise AnalysisError(f"unknown parameter {k!r}; kernel {prog.kernel.name} has {names}")
        out[key] = v
    return out


def _special_regs(grid, block, used: set[str], blocks: np.ndarray) -> dict:
    T = block[0] * block[1] * block[2]
    t = np.arange(T, dtype=np.int64)[None, :]
    regs: dict[str, object] = {
        "%tid.x": t % block[0], "%tid.y": (t // block[0]) % block[1], "%tid.z": t // (block[0] * block[1]),
        "%ntid.x": block[0], "%ntid.y": block[1], "%ntid.z": block[2],
        "%nctaid.x": grid[0], "%nctaid.y": grid[1], "%nctaid.z": grid[2],
        "%laneid": t % 32, "%warpid": t // 32, "%nwarpid": (T + 31) // 32,
        "%lanemask_eq": np.left_shift(1, t % 32), "%lanemask_lt": np.left_shift(1, t % 32) - 1,
        "%lanemask_le": np.left_shift(1, t % 32 + 1) - 1,
        "%lanemask_gt": (np.left_shift(0xFFFFFFFF, t % 32 + 1)) & 0xFFFFFFFF,
        "%lanemask_ge": (np.left_shift(0xFFFFFFFF, t % 32)) & 0xFFFFFFFF,
    }
    if T == 1:
        for k in ("%tid.x", "%tid.y", "%tid.z", "%laneid", "%warpid"):
            regs[k] = int(regs[k][0, 0])
    b = blocks[:, None]
    regs["%ctaid.x"] = b % grid[0]
    regs["%ctaid.y"] = (b // grid[0]) % grid[1]
    regs["%ctaid.z"] = b // (grid[0] * grid[1])
    return {k: v for k, v in regs.items() if k in used}


def _count(prog: Program, grid, block, params, policy: str, prob: float, forced: str | None) -> _Runner:
    runner = _Runner(prog, params, grid, block, policy, prob, forced)
    used = {r for r in prog.slice_regs if r.startswith("%") and "." in r or r in (
        "%laneid", "%warpid", "%nwarpid") or r.startswith("%lanemask")}
    T = runner.T
    dims_used = [c for c, name in enumerate(("%ctaid.x", "%ctaid.y", "%ctaid.z")) if name in used]
    nblocks_total = grid[0] * grid[1] * grid[2]
    if not dims_used:
        regs = _special_regs(grid, block, used, np.zeros(1, np.int64))
        runner.run_chunk(regs, 1, nblocks_total)
        return runner
    # evaluate one representative block per combination of the used ctaid components
    sub = [grid[c] if c in dims_used else 1 for c in range(3)]
    mult = nblocks_total // (sub[0] * sub[1] * sub[2])
    n_sub = sub[0] * sub[1] * sub[2]
    sx, sy = sub[0], sub[1]
    per_chunk = max(1, LANES_PER_CHUNK // max(T, 1))
    for start in range(0, n_sub, per_chunk):
        ids = np.arange(start, min(n_sub, start + per_chunk), dtype=np.int64)
        cx, cy, cz = ids % sx, (ids // sx) % sy, ids // (sx * sy)
        lin = cx + grid[0] * (cy + grid[1] * cz)
        regs = _special_regs(grid, block, used, lin)
        runner.run_chunk(regs, len(ids), mult)
    return runner


def _totals(prog: Program, runner: _Runner) -> dict:
    thread = warp = off = 0
    by_class: dict[str, int] = {}
    by_bytes: dict[str, int] = {}
    for b in prog.blocks:
        lanes, warps = runner.block_lanes[b.index], runner.block_warps[b.index]
        if not lanes:
            continue
        warp += warps * (b.end - b.start)
        for i in range(b.start, b.end):
            ins = prog.instrs[i]
            if ins.pred and not (ins.base == "bra" or (ins.base == "ret" and ins.operands)):
                ex = runner.guard_lanes.get(i, 0)
                off += lanes - ex
            else:
                ex = lanes
            if ex:
                thread += ex
                c = prog.klass[i]
                by_class[c] = by_class.get(c, 0) + ex
                if prog.bytes_key[i]:
                    by_bytes[prog.bytes_key[i]] = by_bytes.get(prog.bytes_key[i], 0) + ex * prog.nbytes[i]
    return {"thread_instructions": thread, "warp_instructions": warp, "predicated_off": off,
            "by_class": {c: by_class.get(c, 0) for c in CLASSES},
            "bytes_by_space": {k: by_bytes.get(k, 0) for k in BYTES_KEYS}}


def _check_block(prog: Program, b: tuple[int, int, int]) -> None:
    """A launch the GPU would refuse (.reqntid / .maxntid of the kernel) is an error, not a count."""
    d = prog.kernel.directives
    if "reqntid" in d:
        req = tuple(d["reqntid"]) + (1,) * (3 - len(d["reqntid"]))
        if req != b:
            raise AnalysisError(f"kernel {prog.kernel.name} requires block {req} (.reqntid), got {b}")
    if "maxntid" in d:
        mx = 1
        for x in d["maxntid"]:
            mx *= x
        if b[0] * b[1] * b[2] > mx:
            raise AnalysisError(f"kernel {prog.kernel.name} allows at most {mx} threads per block (.maxntid), "
                                f"got {b}")


def program_for(module: PtxModule, kernel: str) -> Program:
    """The flattened Program of a kernel, cached on the module so launches of one kernel share it."""
    cache = module.__dict__.setdefault("_programs", {})
    prog = cache.get(kernel)
    if prog is None:
        prog = cache[kernel] = build_program(module, kernel)
    return prog


def count_launch(module: PtxModule, kernel: str, grid, block, params=None, policy: str = "error") -> LaunchCounts:
    """Executed-instruction counts of one launch of `kernel` (see LaunchCounts for the definitions).

    params: scalar parameter values by PTX name, by index, or as a positional list; pointer parameters
    may be left out (they only matter if a branch depends on them, which is then unresolved).
    policy for branches that depend on unknown data: 'error' (raise UnresolvedBranchError), 'bounds'
    (main figures = lower run, `bounds` holds both extremes: every unresolved guard false / true),
    'taken', 'not_taken', or 'probability:P' (each lane takes it with probability P, seeded).
    """
    with np.errstate(all="ignore"):  # PTX arithmetic wraps and yields inf/nan silently; so does ours
        return _count_launch(module, kernel, grid, block, params, policy)


def _count_launch(module: PtxModule, kernel: str, grid, block, params, policy: str) -> LaunchCounts:
    t0 = time.perf_counter()
    g, b = _dims(grid), _dims(block)
    if b[0] * b[1] * b[2] > 1024:
        raise AnalysisError(f"block {b} has more than 1024 threads")
    prog = program_for(module, kernel)
    _check_block(prog, b)
    pol, prob = _parse_policy(policy)
    pvals = _resolve_params(prog, params)
    bounds = None
    notes: list[str] = []
    if pol == "bounds":
        runs = [_count(prog, g, b, pvals, pol, prob, f) for f in ("not_taken", "taken")]
        unresolved = {**runs[0].unresolved, **runs[1].unresolved}
        tots = [_totals(prog, r) for r in runs]
        if unresolved:
            div = _count(prog, g, b, pvals, pol, prob, "diverge")
            unresolved.update(div.unresolved)
            tots.append(_totals(prog, div))
        keys = ("thread_instructions", "warp_instructions", "predicated_off")
        lower = {k: min(x[k] for x in tots) for k in keys}
        upper = {k: max(x[k] for x in tots) for k in keys}
        lo_i = min(range(2), key=lambda j: tots[j]["thread_instructions"])
        lower["by_class"], upper["by_class"] = tots[lo_i]["by_class"], tots[1 - lo_i]["by_class"]
        bounds = {"lower": lower, "upper": upper}
        tot = dict(tots[lo_i])
        tot.update({k: lower[k] for k in keys})
        if unresolved:
            notes.append("bounds: main figures are the lower bounds; lower/upper come from runs with every "
                         "unresolved guard false, true, and split within every warp; they bound the exact "
                         "counts when the unresolved branches are forward branches (if/else), not loop exits")
    else:
        run = _count(prog, g, b, pvals, pol, prob, None)
        tot = _totals(prog, run)
        unresolved = run.unresolved
    return LaunchCounts(
        kernel=kernel, grid=g, block=b,
        thread_instructions=tot["thread_instructions"], warp_instructions=tot["warp_instructions"],
        predicated_off=tot["predicated_off"], by_class=tot["by_class"], bytes_by_space=tot["bytes_by_space"],
        estimate=bool(unresolved), unresolved_branches=[unresolved[k] for k in sorted(unresolved)],
        policy=policy, seconds=time.perf_counter() - t0, bounds=bounds if unresolved else None, notes=notes,
    )


__all__ = ["AnalysisError", "LaunchCounts", "UnresolvedBranchError", "count_launch", "program_for", "math"]
