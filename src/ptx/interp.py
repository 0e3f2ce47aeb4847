"""Reference interpreter: executes every instruction of every thread, with simulated memory.

It is the ground truth the fast analyzer is tested against. Threads are scheduled per warp with
min-PC SIMT scheduling (the lanes at the lowest program counter run together, one issue per step),
`bar.sync` blocks a thread until every live thread of its block arrives, shfl/vote exchange values
among the lanes that execute them together. Memory is byte-addressed and sparse (4 KiB pages);
unwritten memory reads as zero unless a fill function is given.

This module holds the launch: parameters, memory layout, threads, warps, scheduling and control flow
(branches, exits, barriers). What each other instruction does is in interp_ops.py (operands, memory,
setp/cvt, shfl/vote) and interp_alu.py (arithmetic). None of it imports the fast analyzer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from src.ptx.cfg import Program, build_program
from src.ptx.interp_ops import InstructionBodies, InterpreterError
from src.ptx.isa import value_types
from src.ptx.syntax import Instruction, PtxModule
from src.ptx.values import to_bits, width

GLOBAL_BASE = 0x1000_0000_0000
PAGE = 4096


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


class Interpreter(InstructionBodies):
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
                "%nctaid.z": g[2], "%tid.w": 0, "%ntid.w": 0, "%ctaid.w": 0, "%nctaid.w": 0,  # .w: reads 0 (ISA)
                "%laneid": t % 32, "%warpid": t // 32, "%nwarpid": (nthreads + 31) // 32,
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
        group_level = base in ("shfl", "vote", "activemask", "match", "redux", "elect")

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


def interpret(module: PtxModule, kernel: str, grid, block, params=None, **kw) -> InterpResult:
    """Run one launch in the reference interpreter (convenience wrapper)."""
    return Interpreter(module, kernel).run(grid, block, params, **kw)


__all__ = ["Interpreter", "InterpResult", "InterpreterError", "Memory", "interpret"]
