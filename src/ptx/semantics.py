"""Vectorised semantics of the slice instructions: each one compiled into a closure over the registers.

Evaluator.compile(ins) gives R -> [(register, stored value), ...], the values one instruction writes,
computed for all lanes at once from the register dict R (value forms: regvalues.py). This module reads
operands and handles data movement (ld/st of parameters, mov), setp, selp and cvt; arithmetic and logic
opcodes come from arith.py. Results that are not modelled (loads from memory, address conversions,
transcendental functions, ...) are Unknown, so a branch that depends on them is reported as unresolved,
never guessed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from src.ptx.arith import ARITH_OPS, setp_compare
from src.ptx.cfg import Program, defs_uses
from src.ptx.isa import value_types
from src.ptx.lazy import Aff, aff_compare
from src.ptx.regvalues import U32_LIKE, Unknown, Value, full, is_arr, is_vec, read_as, store_as
from src.ptx.syntax import Addr, FImm, Imm, Instruction, Operand, Pair, Reg, Sym, Vec
from src.ptx.values import CMP_OPS, is_float, width


class Evaluator:
    """Compiles slice instructions into closures over a register dict."""

    def __init__(self, prog: Program, params: dict[str, object]):
        self.prog = prog
        self.params = params

    def operand(self, op: Operand, t: str, ins: Instruction, lazy: bool = False) -> Callable[[dict], Value]:
        """Closure(R) -> operand op read as type t (Unknown if not known); lazy keeps Aff sums compact."""
        if isinstance(op, Reg):
            name = op.name
            if name.startswith("!"):
                n2 = name[1:]

                def rneg(R):
                    v = R.get(n2)
                    if v is None:
                        return Unknown(f"line {ins.line}: {n2} read before written")
                    v = read_as(v, "pred")
                    return v if isinstance(v, Unknown) else ~v if is_vec(v) else not v
                return rneg

            def missing():
                if name in _SPECIAL_UNKNOWN or "." in name or name.startswith("%clock") or name.startswith(
                        "%globaltimer"):
                    return Unknown(f"special register {name}")
                return Unknown(f"line {ins.line}: {name} read before written")

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
                    return missing() if v is None else read_as(v, t)
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
                    return missing() if v is None else read_as(v, t)
                return rd_s32

            def rd(R):
                v = R.get(name)
                if v is None:
                    return missing()
                return read_as(v, t)
            return rd
        if isinstance(op, Imm):
            v = read_as(store_as(op.value, t) if not is_float(t) else float(op.value), t)
            return lambda R: v
        if isinstance(op, FImm):
            if is_float(t):
                fv = read_as(op.value, t)
                return lambda R: fv
            import struct
            bits = struct.unpack("<Q", struct.pack("<d", op.value))[0] if op.double else \
                struct.unpack("<I", struct.pack("<f", op.value))[0]
            iv = read_as(bits, t)
            return lambda R: iv
        why = Unknown(f"line {ins.line}: address of {op} ")
        return lambda R: why

    def compile(self, ins: Instruction) -> Callable[[dict], list[tuple[str, Value]]]:
        """Closure(R) -> list of (register, stored value) writes of one instruction."""
        base, mods = ins.base, ins.mods
        tys = value_types(mods)
        t = tys[-1] if tys else "b32"
        ops = ins.operands
        unknown = Unknown(f"line {ins.line}: {ins.text}")

        if base == "st" and "param" in mods:
            a = ops[0]
            if isinstance(a, Addr) and isinstance(a.base, Sym) and not isinstance(ops[1], Vec):
                slot = f"&{a.base.name}+{a.offset}"
                r = self.operand(ops[1], t, ins)
                return lambda R: [(slot, store_as(r(R), t))]
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
                        why = Unknown(f"parameter {name} not given")
                        return lambda R: [(d, why)]
                    v = store_as(read_as(store_as(pv, t), t), t)
                    return lambda R: [(d, v)]
                slot = f"&{name}+{a.offset}"

                def ldslot(R):
                    v = R.get(slot)
                    return [(d, unknown if v is None else store_as(read_as(v, t), t))]
                return ldslot
            space = next((m for m in mods if m in ("global", "shared", "local", "const", "param")), "generic")
            return all_unknown(Unknown(f"line {ins.line}: value loaded from {space} memory: {ins.text}"))
        if base in ("mov", "cvta") and len(ops) == 2 and isinstance(ops[0], Reg) and not isinstance(
                ops[1], Vec | Sym):
            if base == "cvta":
                return all_unknown(Unknown(f"line {ins.line}: address conversion {ins.text}"))
            r = self.operand(ops[1], t, ins, lazy=True)
            d = ops[0].name
            return lambda R: [(d, store_as(r(R), t))]
        if base == "setp":
            return self._setp(ins, mods, tys)
        if base == "selp":
            ra, rb = self.operand(ops[1], t, ins), self.operand(ops[2], t, ins)
            rc = self.operand(ops[3], "pred", ins)
            d = ops[0].name

            def selp(R):
                a, b, c = ra(R), rb(R), rc(R)
                if any(isinstance(x, Unknown) for x in (a, b, c)):
                    return [(d, next(x for x in (c, a, b) if isinstance(x, Unknown)))]
                if not is_vec(c):
                    return [(d, store_as(a if c else b, t))]
                return [(d, store_as(np.where(full(c), a, b), t))]
            return selp
        if base == "cvt" and len(tys) >= 2:
            return self._cvt(ins, mods, tys)
        fn = ARITH_OPS.get(base)
        if fn is None or not isinstance(ops[0], Reg):
            return all_unknown(Unknown(f"line {ins.line}: {base} results are not modelled: {ins.text}"))
        return fn(self, ins, mods, tys, t)

    def _setp(self, ins, mods, tys):
        ops = ins.operands
        cmp_op = next(m for m in mods if m in CMP_OPS)
        t = tys[-1]
        bool_op = next((m for m in mods if m in ("and", "or", "xor")), None)
        lazy = t in U32_LIKE
        ra, rb = self.operand(ops[1], t, ins, lazy), self.operand(ops[2], t, ins, lazy)
        rc = self.operand(ops[3], "pred", ins) if bool_op and len(ops) > 3 else None
        first = ops[0]
        p, q = (first.first, first.second) if isinstance(first, Pair) else (first, None)
        dp = p.name if isinstance(p, Reg | Sym) else None  # None: `_|%p` / `%p|_` discard that half
        dq = q.name if isinstance(q, Reg) else None
        fl = is_float(t)

        def setp(R):
            a, b = ra(R), rb(R)
            c = rc(R) if rc else None
            for x in (a, b, c):
                if isinstance(x, Unknown):
                    return [(d, x) for d in (dp, dq) if d]
            r = None
            if type(a) is Aff or type(b) is Aff:
                r = aff_compare(cmp_op, a, b)
                if r is None:
                    a, b = full(a), full(b)
                else:
                    nr = ~r
            if r is None:
                r, nr = setp_compare(cmp_op, a, b, fl)
            if c is not None:
                if bool_op == "and":
                    r, nr = r & c, nr & c
                elif bool_op == "or":
                    r, nr = r | c, nr | c
                else:
                    r, nr = r ^ c, nr ^ c
            out = [(dp, store_as(r, "pred"))] if dp else []
            if dq:
                out.append((dq, store_as(nr, "pred")))
            return out
        return setp

    def _cvt(self, ins, mods, tys):
        dt, st = tys[0], tys[1]
        rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)
        r = self.operand(ins.operands[1], st, ins)
        d = ins.operands[0].name if isinstance(ins.operands[0], Reg) else None
        if "sat" in mods and not is_float(dt):
            why = Unknown(f"line {ins.line}: saturating conversion not modelled")
            return lambda R: [(d, why)]

        def cvt(R):
            v = r(R)
            if isinstance(v, Unknown):
                return [(d, v)]
            if is_float(dt):
                if is_arr(v):
                    v = v.astype(np.float64 if dt == "f64" else np.float32)
                else:
                    v = float(v) if dt == "f64" else np.float32(v)
                if is_float(st) and rnd in ("rni", "rzi", "rmi", "rpi"):
                    v = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[rnd](v)
                if "sat" in mods:
                    v = np.clip(np.nan_to_num(v, nan=0.0), 0.0, 1.0)
                return [(d, store_as(v, dt))]
            if is_float(st):
                f = {"rni": np.rint, "rmi": np.floor, "rpi": np.ceil}.get(rnd or "rzi", np.trunc)
                fv = f(np.asarray(v, dtype=np.float64))
                wd = width(dt)
                lo, hi = (-(2 ** (wd - 1)), 2 ** (wd - 1) - 1) if dt[0] == "s" else (0, 2 ** wd - 1)
                fv = np.nan_to_num(np.clip(fv, lo, hi), nan=0.0)
                iv = fv.astype(np.int64) if fv.ndim else int(fv)
                return [(d, store_as(iv, dt))]
            return [(d, store_as(read_as(store_as(v, st), st), dt))]
        return cvt


_SPECIAL_UNKNOWN = {"%clock", "%clock64", "%smid", "%nsmid", "%globaltimer", "%pm0"}
