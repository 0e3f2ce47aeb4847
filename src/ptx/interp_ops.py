"""Instruction bodies of the reference interpreter: operands, memory, setp/cvt, warp exchange, dispatch to the ALU.

Generic addresses are routed by window: [SHARED_WINDOW, +4 GiB) is the block's shared memory,
[LOCAL_WINDOW, +4 GiB) the thread's local memory, anything else global memory (cvta adds/subtracts the
window). Kernel parameters are read from their own byte buffers, call parameters of inlined .func calls
from per-thread buffers.
"""

from __future__ import annotations

import math

from src.ptx.interp_alu import ALU
from src.ptx.syntax import Addr, FImm, Imm, Instruction, Pair, Reg, Sink, Sym, Vec
from src.ptx.values import CMP_OPS, compare, is_float, to_bits, to_value, width

SHARED_WINDOW = 0x7000_0000_0000
LOCAL_WINDOW = 0x7800_0000_0000


class InterpreterError(RuntimeError):
    """The program did something the interpreter cannot execute (names the instruction and line)."""


class InstructionBodies:
    """What one non-control instruction does to a thread: operand access, memory, setp/cvt, shfl/vote, ALU.

    Base of interp.Interpreter: _body(pc, ins, ...) compiles an instruction into a function(thread) (or
    function(lanes) for the warp-level shfl/vote/activemask); it uses the launch state the Interpreter
    sets up (prog, shared/local/global layout, gmem, smem, param_bytes).
    """

    def _err(self, ins: Instruction, msg: str) -> InterpreterError:
        return InterpreterError(f"line {ins.line}: {msg}: {ins.text!r}")

    def _reader(self, op, t: str, ins: Instruction):
        """Function(thread) -> typed value of operand op read as type t."""
        if isinstance(op, Reg):
            name = op.name
            if name.startswith("!"):
                n2 = name[1:]
                return lambda th: 1 - (th.regs.get(n2, 0) & 1)
            if t in ("u32", "b32"):
                return lambda th: th.regs.get(name, 0) & 0xFFFFFFFF
            if t == "s32":
                return lambda th: ((th.regs.get(name, 0) & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000
            if t in ("u64", "b64"):
                return lambda th: th.regs.get(name, 0) & 0xFFFFFFFFFFFFFFFF
            return lambda th: to_value(th.regs.get(name, 0), t)
        if isinstance(op, Imm):
            v = op.value
            if is_float(t):
                v = float(v)
            else:
                v = to_value(to_bits(v, t), t)
            return lambda th: v
        if isinstance(op, FImm):
            if is_float(t):
                fv = op.value
                return lambda th: fv
            bits = to_bits(op.value, "f64" if op.double else "f32")
            return lambda th: bits
        if isinstance(op, Sym):
            addr = self._sym_address(op.name, ins)
            return lambda th: addr(th)
        raise self._err(ins, f"cannot read operand {op}")

    def _sym_address(self, name: str, ins: Instruction):
        """Function(thread) -> address of a variable (state-space address for shared/local)."""
        def f(th):
            if name in self.shared_layout:
                return self.shared_layout[name]
            if name in self.local_layout:
                return self.local_layout[name]
            if name in self.var_addr:
                return self.var_addr[name]
            raise self._err(ins, f"unknown symbol {name!r}")
        return f

    def _writer(self, op, t: str, ins: Instruction):
        if isinstance(op, Sink):
            return lambda th, v: None
        if not isinstance(op, Reg):
            raise self._err(ins, f"cannot write operand {op}")
        name = op.name
        if t in ("u32", "b32", "s32"):
            return lambda th, v: th.regs.__setitem__(name, int(v) & 0xFFFFFFFF)
        if t in ("u64", "b64", "s64"):
            return lambda th, v: th.regs.__setitem__(name, int(v) & 0xFFFFFFFFFFFFFFFF)
        return lambda th, v: th.regs.__setitem__(name, to_bits(v, t))

    # ------------------------------------------------------------------------------ instruction bodies
    def _body(self, pc: int, ins: Instruction, base: str, mods: tuple, tys: list[str]):
        ops = ins.operands
        t = tys[-1] if tys else "b32"
        E = self._err

        if base in ("bar", "barrier", "membar", "fence", "call", "prefetch", "prefetchu", "nanosleep",
                    "pmevent", "discard", "applypriority", "griddepcontrol", "setmaxnreg"):
            return lambda th: None
        if base in ("mov", "cvta") and len(ops) == 2:
            if isinstance(ops[1], Vec) or isinstance(ops[0], Vec):
                return self._mov_vec(ins, t)
            if isinstance(ops[1], Sym) and base == "mov":
                addr = self._sym_address(ops[1].name, ins)
                w = self._writer(ops[0], t, ins)
                if ops[1].name in self.prog.param_types:
                    raise E(ins, "taking the address of a kernel parameter is not supported")
                return lambda th: w(th, addr(th))
            if base == "cvta":
                to = "to" in mods
                space = next((m for m in mods if m in ("shared", "local", "global", "const", "param")), "global")
                win = SHARED_WINDOW if space == "shared" else LOCAL_WINDOW if space == "local" else 0
                r = self._reader(ops[1], t, ins)
                w = self._writer(ops[0], t, ins)
                if to:
                    return lambda th: w(th, r(th) - win)
                return lambda th: w(th, r(th) + win)
            r = self._reader(ops[1], t, ins)
            w = self._writer(ops[0], t, ins)
            return lambda th: w(th, r(th))
        if base == "createpolicy":  # the policy value is opaque: only a load's cache hint reads it
            w = self._writer(ops[0], "b64", ins)
            return lambda th: w(th, 0)
        if base in ("ld", "ldu", "st"):
            return self._mem(ins, base, mods, t)
        if base in ("atom", "red"):
            return self._atom(ins, base, mods, t)
        if base in ("tex", "tld4", "suld", "sust", "sured"):
            return self._texture(ins, base)
        if base == "setp":
            return self._setp(ins, mods, tys)
        if base == "selp":
            a, b_ = self._reader(ops[1], t, ins), self._reader(ops[2], t, ins)
            c = self._reader(ops[3], "pred", ins)
            w = self._writer(ops[0], t, ins)
            return lambda th: w(th, a(th) if c(th) else b_(th))
        if base == "cvt":
            return self._cvt(ins, mods, tys)
        if base == "shfl":
            return self._shfl(ins, mods)
        if base == "vote":
            return self._vote(ins, mods)
        if base == "elect":
            return self._elect(ins)
        if base == "activemask":
            w = self._writer(ops[0], "b32", ins)

            def act(run):
                m = sum(1 << (th.tid % 32) for th in run)
                for th in run:
                    w(th, m)
            return act
        fn = ALU.get(base)
        if fn is None:
            raise E(ins, f"opcode {ins.opcode!r} is not supported by the interpreter")
        return fn(self, ins, mods, tys, t)

    def _mov_vec(self, ins, t):
        dst, src = ins.operands
        w_ = width(t)
        if isinstance(src, Vec):  # pack: mov.b64 %rd, {%r1, %r2}
            n = len(src.items)
            pw = w_ // n
            rs = [self._reader(x, f"b{pw}", ins) for x in src.items]
            w = self._writer(dst, t, ins)

            def pack(th):
                v = 0
                for k, r in enumerate(rs):
                    v |= (r(th) & ((1 << pw) - 1)) << (k * pw)
                w(th, v)
            return pack
        n = len(dst.items)
        pw = w_ // n
        r = self._reader(src, t, ins)
        ws = [self._writer(x, f"b{pw}", ins) if not isinstance(x, Sink) else None for x in dst.items]

        def unpack(th):
            v = r(th)
            for k, w in enumerate(ws):
                if w:
                    w(th, (v >> (k * pw)) & ((1 << pw) - 1))
        return unpack

    # ---------------------------------------------------------------------------------------- memory
    def _address(self, op, ins):
        """Function(thread) -> address for an [addr] operand; kernel params give ('param', name, off)."""
        if not isinstance(op, Addr):
            raise self._err(ins, "memory operand expected")
        off = op.offset
        b = op.base
        if isinstance(b, Reg):
            name = b.name
            return lambda th: th.regs.get(name, 0) + off
        if isinstance(b, Imm):
            v = b.value + off
            return lambda th: v
        if isinstance(b, Sym):
            name = b.name
            if name in self.prog.param_types:
                return lambda th: ("kparam", name, off)
            if name in self.prog.kernel.local_vars and self.prog.kernel.local_vars[name].space == "param" \
                    or "@" in name or name.startswith(("param", "retval", "func_retval")):
                return lambda th: ("tparam", name, off)
            a = self._sym_address(name, ins)
            return lambda th: a(th) + off
        raise self._err(ins, "bad address")

    def _space_mem(self, space: str, th, addr):
        """(memory, address) for a state space; generic addresses are routed by their window."""
        if space == "shared":
            return self.smem, addr
        if space == "local":
            return th.local, addr
        if space in ("global", "const"):
            return self.gmem, addr
        if SHARED_WINDOW <= addr < SHARED_WINDOW + (1 << 32):
            return self.smem, addr - SHARED_WINDOW
        if LOCAL_WINDOW <= addr < LOCAL_WINDOW + (1 << 32):
            return th.local, addr - LOCAL_WINDOW
        return self.gmem, addr

    def _param_read(self, th, a, n):
        kind, name, off = a
        buf = self.param_bytes.get(name) if kind == "kparam" else th.params.get(name)
        if buf is None:
            buf = bytearray(64)
            th.params[name] = buf
        return int.from_bytes(buf[off : off + n].ljust(n, b"\0"), "little")

    def _param_write(self, th, a, n, v):
        kind, name, off = a
        buf = th.params.setdefault(name, bytearray(64))
        if off + n > len(buf):
            buf.extend(bytes(off + n - len(buf)))
        buf[off : off + n] = (v & ((1 << (8 * n)) - 1)).to_bytes(n, "little")

    def _mem(self, ins, base, mods, t):
        ops = ins.operands
        space = next((m for m in mods if m in ("global", "shared", "local", "param", "const")), "generic")
        esize = max(1, width(t) // 8)
        if base == "st":
            addr = self._address(ops[0], ins)
            srcs = ops[1].items if isinstance(ops[1], Vec) else (ops[1],)
            rs = [self._reader(x, t, ins) for x in srcs]
            encode = [(lambda v, t=t: to_bits(v, t)) for _ in rs]

            def st(th):
                a = addr(th)
                for k, r in enumerate(rs):
                    bits = encode[k](r(th))
                    if isinstance(a, tuple):
                        self._param_write(th, (a[0], a[1], a[2] + k * esize), esize, bits)
                    else:
                        mem, ad = self._space_mem(space, th, a + k * esize)
                        mem.write(ad, esize, bits)
            return st
        addr = self._address(ops[1], ins)
        dsts = ops[0].items if isinstance(ops[0], Vec) else (ops[0],)
        ws = [self._writer(x, t, ins) for x in dsts]
        signed = t.startswith("s")
        is_f = is_float(t)

        def ld(th):
            a = addr(th)
            for k, w in enumerate(ws):
                if isinstance(a, tuple):
                    bits = self._param_read(th, (a[0], a[1], a[2] + k * esize), esize)
                else:
                    mem, ad = self._space_mem(space, th, a + k * esize)
                    bits = mem.read(ad, esize)
                if is_f:
                    w(th, to_value(bits, t))
                elif signed:
                    w(th, to_value(bits, t))
                else:
                    w(th, bits)
        return ld

    def _texture(self, ins, base):
        """Texture and surface memory (CUDA arrays behind object handles) is not simulated: a fetch (tex, tld4,
        suld) reads 0 into every destination, as unwritten global memory does, with a sparse fetch's residency
        predicate true; surface stores and reductions (sust, sured) change nothing the kernel can read back."""
        if base in ("sust", "sured"):
            return lambda th: None
        first = ins.operands[0]
        vals, pred = (first.first, first.second) if isinstance(first, Pair) else (first, None)
        ws = [self._writer(x, "b32", ins) for x in (vals.items if isinstance(vals, Vec) else (vals,))]
        wp = self._writer(pred, "pred", ins) if pred is not None else None

        def fetch(th):
            for w in ws:
                w(th, 0)
            if wp:
                wp(th, 1)
        return fetch

    def _atom(self, ins, base, mods, t):
        ops = ins.operands
        space = next((m for m in mods if m in ("global", "shared")), "generic")
        if base == "atom":
            dst, aop, srcs = ops[0], ops[1], ops[2:]
        else:
            dst, aop, srcs = None, ops[0], ops[1:]
        addr = self._address(aop, ins)
        rs = [self._reader(x, t, ins) for x in srcs]
        w = self._writer(dst, t, ins) if dst is not None else None
        op = next((m for m in mods if m in ("add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec")),
                  None)
        if op is None:
            raise self._err(ins, "atomic operation not supported")
        size = max(1, width(t) // 8)

        def at(th):
            mem, a = self._space_mem(space, th, addr(th))
            old = to_value(mem.read(a, size), t)
            v = rs[0](th)
            if op == "add":
                new = old + v
            elif op == "min":
                new = min(old, v)
            elif op == "max":
                new = max(old, v)
            elif op == "exch":
                new = v
            elif op == "cas":
                new = rs[1](th) if old == v else old
            elif op == "and":
                new = old & v
            elif op == "or":
                new = old | v
            elif op == "xor":
                new = old ^ v
            elif op == "inc":
                new = 0 if old >= v else old + 1
            else:
                new = v if (old == 0 or old > v) else old - 1
            mem.write(a, size, to_bits(new, t))
            if w:
                w(th, old)
        return at

    # -------------------------------------------------------------------- predicates, conversions, warps
    def _setp(self, ins, mods, tys):
        ops = ins.operands
        cmp_op = next(m for m in mods if m in CMP_OPS)
        t = tys[-1]
        bool_op = next((m for m in mods if m in ("and", "or", "xor")), None)
        ra, rb = self._reader(ops[1], t, ins), self._reader(ops[2], t, ins)
        rc = self._reader(ops[3], "pred", ins) if bool_op and len(ops) > 3 else None
        first = ops[0]
        wp = self._writer(first.first if isinstance(first, Pair) else first, "pred", ins)
        wq = self._writer(first.second, "pred", ins) if isinstance(first, Pair) else None

        def setp(th):
            r = compare(cmp_op, ra(th), rb(th), t)
            nr = not r
            if rc is not None:
                c = rc(th)
                if bool_op == "and":
                    r, nr = r and c, nr and c
                elif bool_op == "or":
                    r, nr = r or c, nr or c
                else:
                    r, nr = bool(r) ^ bool(c), bool(nr) ^ bool(c)
            wp(th, 1 if r else 0)
            if wq:
                wq(th, 1 if nr else 0)
        return setp

    def _cvt(self, ins, mods, tys):
        dt, st = tys[0], tys[1]
        rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), None)
        sat = "sat" in mods
        r = self._reader(ins.operands[1], st, ins)
        w = self._writer(ins.operands[0], dt, ins)

        def cvt(th):
            v = r(th)
            if is_float(dt):
                v = float(v)
                if is_float(st) and rnd in ("rni", "rzi", "rmi", "rpi") and math.isfinite(v):
                    v = float(_round_int(v, rnd))
                if sat:
                    v = 0.0 if math.isnan(v) else min(max(v, 0.0), 1.0)
                w(th, v)
                return
            if is_float(st):
                if math.isnan(v):
                    iv = 0
                elif math.isinf(v):
                    iv = (1 << 70) if v > 0 else -(1 << 70)
                else:
                    iv = _round_int(v, rnd or "rzi")
                wd = width(dt)
                lo, hi = (-(1 << (wd - 1)), (1 << (wd - 1)) - 1) if dt.startswith("s") else (0, (1 << wd) - 1)
                v = min(max(iv, lo), hi)
            elif sat:
                wd = width(dt)
                lo, hi = (-(1 << (wd - 1)), (1 << (wd - 1)) - 1) if dt.startswith("s") else (0, (1 << wd) - 1)
                v = min(max(v, lo), hi)
            w(th, to_value(to_bits(v, dt), dt))
        return cvt

    def _shfl(self, ins, mods):
        ops = ins.operands
        mode = next(m for m in mods if m in ("up", "down", "bfly", "idx"))
        first = ops[0]
        wd = self._writer(first.first if isinstance(first, Pair) else first, "b32", ins)
        wp = self._writer(first.second, "pred", ins) if isinstance(first, Pair) else None
        ra = self._reader(ops[1], "b32", ins)
        rb = self._reader(ops[2], "b32", ins)
        rc = self._reader(ops[3], "b32", ins)

        def shfl(run):
            by_lane = {th.tid % 32: th for th in run}
            vals = {ln: ra(th) for ln, th in by_lane.items()}
            out = []
            for ln, th in by_lane.items():
                b, c = rb(th), rc(th)
                clamp, segmask = c & 0x1F, (c >> 8) & 0x1F
                max_lane = (ln & segmask) | (clamp & ~segmask)
                min_lane = ln & segmask
                if mode == "up":
                    j, ok = ln - b, ln - b >= max_lane
                elif mode == "down":
                    j, ok = ln + b, ln + b <= max_lane
                elif mode == "bfly":
                    j, ok = ln ^ b, (ln ^ b) <= max_lane
                else:
                    j = min_lane | (b & ~segmask)
                    ok = j <= max_lane
                if not ok or j not in vals:
                    j = ln
                out.append((th, vals[j], ok))
            for th, v, ok in out:
                wd(th, v)
                if wp:
                    wp(th, 1 if ok else 0)
        return shfl

    def _vote(self, ins, mods):
        ops = ins.operands
        mode = next(m for m in mods if m in ("all", "any", "uni", "ballot"))
        src = ops[-1]
        rp = self._reader(src, "pred", ins)
        w = self._writer(ops[0], "b32" if mode == "ballot" else "pred", ins)

        def vote(run):
            bits = {th.tid % 32: rp(th) for th in run}
            if mode == "ballot":
                r = sum(1 << ln for ln, v in bits.items() if v)
            elif mode == "any":
                r = int(any(bits.values()))
            elif mode == "all":
                r = int(all(bits.values()))
            else:
                r = int(len(set(bits.values())) <= 1)
            for th in run:
                w(th, r)
        return vote


    def _elect(self, ins):
        """elect.sync d|p, membermask: the leader is the lowest lane executing it whose bit is in membermask; every
        lane gets its lane number in d, p is true in the leader only."""
        first = ins.operands[0]
        wd = self._writer(first.first, "b32", ins)
        wp = self._writer(first.second, "pred", ins)
        rm = self._reader(ins.operands[1], "b32", ins)

        def elect(run):
            lanes = [th.tid % 32 for th in run if rm(th) >> (th.tid % 32) & 1]
            leader = min(lanes) if lanes else -1
            for th in run:
                wd(th, leader & 0xFFFFFFFF)
                wp(th, 1 if th.tid % 32 == leader else 0)
        return elect


def _round_int(v: float, rnd: str) -> int:
    if rnd in ("rzi", "rz"):
        return int(v)
    if rnd in ("rmi", "rm"):
        return math.floor(v)
    if rnd in ("rpi", "rp"):
        return math.ceil(v)
    return round(v)  # round half to even, like rni
