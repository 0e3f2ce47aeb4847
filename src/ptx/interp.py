"""Reference interpreter: executes every instruction of every thread, with simulated memory.

It is the ground truth the fast analyzer is tested against. Threads are scheduled per warp with
min-PC SIMT scheduling (the lanes at the lowest program counter run together, one issue per step),
`bar.sync` blocks a thread until every live thread of its block arrives, shfl/vote exchange values
among the lanes that execute them together. Memory is byte-addressed and sparse (4 KiB pages);
unwritten memory reads as zero unless a fill function is given.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from src.ptx.cfg import Program, build_program
from src.ptx.isa import value_types
from src.ptx.parser import Addr, FImm, Imm, Instruction, Pair, PtxModule, Reg, Sink, Sym, Vec
from src.ptx.values import CMP_OPS, compare, is_float, to_bits, to_value, width

SHARED_WINDOW = 0x7000_0000_0000
LOCAL_WINDOW = 0x7800_0000_0000
GLOBAL_BASE = 0x1000_0000_0000
PAGE = 4096


class InterpreterError(RuntimeError):
    """The program did something the interpreter cannot execute (names the instruction and line)."""


class Memory:
    """Sparse little-endian byte memory; `fill(addr)` gives the byte of never-written addresses."""

    def __init__(self, fill: Callable[[int], int] | None = None):
        self.pages: dict[int, bytearray] = {}
        self.fill = fill

    def _page(self, p: int) -> bytearray:
        pg = self.pages.get(p)
        if pg is None:
            if self.fill is None:
                pg = bytearray(PAGE)
            else:
                base = p * PAGE
                pg = bytearray(self.fill(base + i) & 0xFF for i in range(PAGE))
            self.pages[p] = pg
        return pg

    def read(self, addr: int, n: int) -> int:
        p, o = divmod(addr, PAGE)
        if o + n <= PAGE:
            return int.from_bytes(self._page(p)[o : o + n], "little")
        return int.from_bytes(bytes(self._page((addr + i) // PAGE)[(addr + i) % PAGE] for i in range(n)),
                              "little")

    def write(self, addr: int, n: int, value: int) -> None:
        data = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        p, o = divmod(addr, PAGE)
        if o + n <= PAGE:
            self._page(p)[o : o + n] = data
            return
        for i in range(n):
            self._page((addr + i) // PAGE)[(addr + i) % PAGE] = data[i]


@dataclass
class InterpResult:
    """Counts from the interpreter, per static instruction and totals (same definitions as LaunchCounts)."""

    thread_instructions: int
    warp_instructions: int
    predicated_off: int
    by_class: dict[str, int]
    bytes_by_space: dict[str, int]
    executed: list[int]  # per instruction: thread executions with guard true
    reached: list[int]  # per instruction: thread arrivals (guard true or false)
    issued: list[int]  # per instruction: warp issues
    seconds: float
    memory: Memory = field(repr=False, default=None)
    param_addresses: dict[str, int] = field(default_factory=dict)


class _Thread:
    __slots__ = ("regs", "pc", "state", "local", "params", "tid")

    def __init__(self, regs: dict, local: Memory, tid: int):
        self.regs = regs
        self.pc = 0
        self.state = 0  # 0 runnable, 1 waiting at barrier, 2 exited
        self.local = local
        self.params: dict[str, bytearray] = {}
        self.tid = tid


def _dims(d) -> tuple[int, int, int]:
    if isinstance(d, int):
        d = (d,)
    d = tuple(int(x) for x in d)
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise ValueError(f"launch dimension must be 1-3 positive ints, got {d}")
    return d + (1,) * (3 - len(d))


class Interpreter:
    """Executes one kernel launch thread by thread. Build once per (module, kernel); call run()."""

    def __init__(self, module: PtxModule, kernel: str, program: Program | None = None):
        self.prog = program or build_program(module, kernel)
        self.module = module
        self.ops = [self._compile(i, ins) for i, ins in enumerate(self.prog.instrs)]

    # ------------------------------------------------------------------------------------ launch
    def run(self, grid, block, params=None, fill: Callable[[int], int] | None = None,
            blocks: list[int] | None = None, memory: Memory | None = None) -> InterpResult:
        """Run the launch (or only the listed linear block ids) and return exact counts."""
        t0 = time.perf_counter()
        prog = self.prog
        g, b = _dims(grid), _dims(block)
        self.grid, self.block = g, b
        self.gmem = memory or Memory(fill)
        self.param_bytes, self.param_addresses = self._param_bytes(params)
        self._layout_globals()
        n = len(prog.instrs)
        self.executed = [0] * n
        self.reached = [0] * n
        self.issued = [0] * n
        nblocks = g[0] * g[1] * g[2]
        for bid in (range(nblocks) if blocks is None else blocks):
            self._run_block(bid)
        by_class: dict[str, int] = {}
        bytes_by: dict[str, int] = {}
        thread_total = 0
        for i in range(n):
            e = self.executed[i]
            if e:
                by_class[prog.klass[i]] = by_class.get(prog.klass[i], 0) + e
                thread_total += e
                if prog.bytes_key[i]:
                    bytes_by[prog.bytes_key[i]] = bytes_by.get(prog.bytes_key[i], 0) + e * prog.nbytes[i]
        return InterpResult(
            thread_instructions=thread_total,
            warp_instructions=sum(self.issued),
            predicated_off=sum(self.reached) - thread_total,
            by_class=by_class,
            bytes_by_space=bytes_by,
            executed=self.executed,
            reached=self.reached,
            issued=self.issued,
            seconds=time.perf_counter() - t0,
            memory=self.gmem,
            param_addresses=self.param_addresses,
        )

    def _param_bytes(self, params):
        kparams = self.prog.kernel.params
        given: dict[str, int | float] = {}
        if isinstance(params, list | tuple):
            if len(params) > len(kparams):
                raise ValueError(f"{len(params)} parameters given, kernel has {len(kparams)}")
            given = {kparams[i][0]: v for i, v in enumerate(params)}
        elif params:
            given = dict(params)
        names = {p[0] for p in kparams}
        for k in given:
            if k not in names:
                raise ValueError(f"unknown parameter {k!r} (kernel parameters: {[p[0] for p in kparams]})")
        out: dict[str, bytearray] = {}
        addrs: dict[str, int] = {}
        next_buf = GLOBAL_BASE
        for name, ptype in kparams:
            t = ptype.split("[")[0].lstrip(".")
            size = max(1, width(t) // 8)
            if "[" in ptype:
                size *= int(ptype.split("[")[1].rstrip("]"))
            if name in given:
                v = given[name]
                bits = to_bits(v, t) if "[" not in ptype else int(v)
            elif width(t) == 64 and "[" not in ptype:
                bits = next_buf  # pointer parameter not given: a fresh buffer in simulated global memory
                addrs[name] = next_buf
                next_buf += 1 << 32
            else:
                raise ValueError(f"parameter {name!r} ({ptype}) needs a value")
            out[name] = bytearray((bits & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
        return out, addrs

    def _layout_globals(self) -> None:
        self.var_addr: dict[str, int] = {}
        self.shared_layout: dict[str, int] = {}
        addr = GLOBAL_BASE - (1 << 32)
        for name, var in self.module.variables.items():
            if var.space in ("global", "const"):
                self.var_addr[name] = addr
                for k, s in enumerate(var.init):
                    size = max(1, width(var.vtype.lstrip(".")) // 8)
                    v = float(s) if "." in s else int(s, 0) if not s.startswith(("0f", "0d")) else None
                    if v is None:
                        bits = int(s[2:], 16)
                    else:
                        bits = to_bits(v, var.vtype.lstrip("."))
                    self.gmem.write(addr + k * size, size, bits)
                addr += max(var.size, 16) + 256
        off = 16
        shared_vars = [v for v in self.module.variables.values() if v.space == "shared"]
        shared_vars += [v for v in self.prog.kernel.local_vars.values() if v.space == "shared"]
        for var in shared_vars:
            al = max(var.align, 4)
            off = (off + al - 1) // al * al
            self.shared_layout[var.name] = off
            off += var.size if var.size else 0
        self.shared_size = off
        self.local_layout: dict[str, int] = {}
        off = 16
        for var in self.prog.kernel.local_vars.values():
            if var.space == "local":
                al = max(var.align, 4)
                off = (off + al - 1) // al * al
                self.local_layout[var.name] = off
                off += var.size

    def _run_block(self, bid: int) -> None:
        g, b = self.grid, self.block
        cx, rem = bid % g[0], bid // g[0]
        cy, cz = rem % g[1], rem // g[1]
        nthreads = b[0] * b[1] * b[2]
        self.smem = Memory()
        threads = []
        for t in range(nthreads):
            tx, r = t % b[0], t // b[0]
            ty, tz = r % b[1], r // b[1]
            regs = {
                "%tid.x": tx, "%tid.y": ty, "%tid.z": tz, "%ntid.x": b[0], "%ntid.y": b[1], "%ntid.z": b[2],
                "%ctaid.x": cx, "%ctaid.y": cy, "%ctaid.z": cz, "%nctaid.x": g[0], "%nctaid.y": g[1],
                "%nctaid.z": g[2], "%laneid": t % 32, "%warpid": t // 32, "%nwarpid": (nthreads + 31) // 32,
                "%smid": 0, "%nsmid": 1, "%gridid": 0, "%lanemask_eq": 1 << (t % 32),
                "%lanemask_lt": (1 << (t % 32)) - 1, "%lanemask_le": (1 << (t % 32 + 1)) - 1,
                "%lanemask_gt": (0xFFFFFFFF << (t % 32 + 1)) & 0xFFFFFFFF,
                "%lanemask_ge": (0xFFFFFFFF << (t % 32)) & 0xFFFFFFFF,
                "%dynamic_smem_size": 0, "%total_smem_size": 0,
            }
            threads.append(_Thread(regs, Memory(), t))
        warps = [threads[w : w + 32] for w in range(0, nthreads, 32)]
        ops = self.ops
        issued, reached = self.issued, self.reached
        while True:
            for warp in warps:
                while True:
                    pc = None
                    for th in warp:
                        if th.state == 0 and (pc is None or th.pc < pc):
                            pc = th.pc
                    if pc is None:
                        break
                    group = [th for th in warp if th.state == 0 and th.pc == pc]
                    issued[pc] += 1
                    reached[pc] += len(group)
                    ops[pc](group)
            live = [th for th in threads if th.state != 2]
            if not live:
                return
            if all(th.state == 1 for th in live):
                for th in live:
                    th.state = 0
                continue
            raise InterpreterError("threads stuck: neither all at a barrier nor exited")

    # ------------------------------------------------------------------------------- compilation
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

    def _compile(self, pc: int, ins: Instruction):
        base, mods = ins.base, ins.mods
        tys = value_types(mods)
        guard = None
        if ins.pred:
            pname, neg = ins.pred, ins.pred_neg
            guard = (lambda th: not (th.regs.get(pname, 0) & 1)) if neg else \
                (lambda th: bool(th.regs.get(pname, 0) & 1))
        nxt = pc + 1

        if base in ("bra", "ret") and ins.operands:  # branch (or inlined return)
            target = self.prog.labels[ins.operands[-1].name]

            def op_bra(group):
                ex = self.executed
                for th in group:
                    ex[pc] += 1
                    th.pc = target if (guard is None or guard(th)) else nxt
            return op_bra
        if base in ("ret", "exit", "trap"):
            def op_exit(group):
                for th in group:
                    if guard is None or guard(th):
                        self.executed[pc] += 1
                        th.state = 2
                    else:
                        th.pc = nxt
            return op_exit
        body = self._body(pc, ins, base, mods, tys)
        barrier = base in ("bar", "barrier") and ("sync" in mods or "red" in mods or len(mods) == 0
                                                  or mods == ("aligned",)) and "warp" not in mods
        group_level = base in ("shfl", "vote", "activemask", "match", "redux")

        def op_generic(group):
            ex = self.executed
            if guard is not None:
                run = []
                for th in group:
                    th.pc = nxt
                    if guard(th):
                        run.append(th)
            else:
                run = group
                for th in group:
                    th.pc = nxt
            if not run:
                return
            ex[pc] += len(run)
            if group_level:
                body(run)
            else:
                for th in run:
                    body(th)
            if barrier:
                for th in run:
                    th.state = 1
        return op_generic

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
        if base in ("ld", "ldu", "st"):
            return self._mem(ins, base, mods, t)
        if base in ("atom", "red"):
            return self._atom(ins, base, mods, t)
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
        if base == "activemask":
            w = self._writer(ops[0], "b32", ins)

            def act(run):
                m = sum(1 << (th.tid % 32) for th in run)
                for th in run:
                    w(th, m)
            return act
        fn = _ALU.get(base)
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

    def _space_mem(self, space: str, th: _Thread, addr):
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


def _round_int(v: float, rnd: str) -> int:
    if rnd in ("rzi", "rz"):
        return int(v)
    if rnd in ("rmi", "rm"):
        return math.floor(v)
    if rnd in ("rpi", "rp"):
        return math.ceil(v)
    return round(v)  # round half to even, like rni


# ------------------------------------------------------------------------------------------ ALU table
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


_ALU = {
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


def interpret(module: PtxModule, kernel: str, grid, block, params=None, **kw) -> InterpResult:
    """Run one launch in the reference interpreter (convenience wrapper)."""
    return Interpreter(module, kernel).run(grid, block, params, **kw)


__all__ = ["Interpreter", "InterpResult", "InterpreterError", "Memory", "interpret", "struct"]
