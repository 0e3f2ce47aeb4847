"""Per-kernel program analysis: call inlining, basic blocks, CFG, dominators, loops, def-use, slices.

Both the reference interpreter and the fast analyzer run on the same flattened Program, so that
"program counter order" (which the SIMT min-PC scheduling relies on) is the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from src.ptx.isa import access_bytes, classify
from src.ptx.syntax import (
    Addr,
    ArgList,
    Function,
    Instruction,
    Pair,
    PtxModule,
    PtxSyntaxError,
    Reg,
    Sym,
    TexAddr,
    Vec,
)

NO_DEF = frozenset(
    {"st", "red", "bar", "barrier", "bra", "brx", "call", "ret", "exit", "membar", "fence", "prefetch",
     "prefetchu", "trap", "brkpt", "stmatrix", "sust", "sured", "pmevent", "nanosleep", "discard",
     "applypriority", "mbarrier", "griddepcontrol", "setmaxnreg", "cp", "multimem"}
)
MAX_INLINE_DEPTH = 16


class PtxUnsupportedError(PtxSyntaxError):
    """Well-formed PTX using a construct the analysis does not support (named with its line)."""


def regs_in(op) -> list[str]:
    """Register names read or written through one operand (addresses included)."""
    if isinstance(op, Reg):
        return [op.name.lstrip("!")]
    if isinstance(op, Addr):
        return [op.base.name] if isinstance(op.base, Reg) else []
    if isinstance(op, Vec | ArgList):
        out: list[str] = []
        for x in op.items:
            out.extend(regs_in(x))
        return out
    if isinstance(op, Pair):
        return regs_in(op.first) + regs_in(op.second)
    if isinstance(op, TexAddr):  # texture/surface handle, sampler and coordinates: all read
        return regs_in(op.handle) + regs_in(op.sampler) + regs_in(op.coords)
    return []


def defs_uses(ins: Instruction) -> tuple[list[str], list[str]]:
    """(registers written, registers read) by an instruction, the guard predicate counted as a use."""
    ops = ins.operands
    uses: list[str] = [ins.pred] if ins.pred else []
    if ins.base in NO_DEF or not ops:
        for op in ops:
            uses.extend(regs_in(op))
        return [], uses
    first = ops[0]
    defs: list[str] = []
    if isinstance(first, Reg | Pair | Vec):
        defs = [r for r in regs_in(first) if not r.startswith("%") or "." not in r]
    else:
        uses.extend(regs_in(first))
    for op in ops[1:]:
        uses.extend(regs_in(op))
    return defs, uses


@dataclass
class Block:
    index: int
    start: int  # first instruction index
    end: int  # one past the last
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)


@dataclass
class Loop:
    header: int
    latches: list[int]
    body: set[int]  # block indices
    exits: list[int]  # blocks outside the loop reached from inside


@dataclass
class Program:
    """A kernel with calls inlined, split into basic blocks, with its static analyses."""

    kernel: Function
    module: PtxModule
    instrs: list[Instruction]
    labels: dict[str, int]
    blocks: list[Block]
    block_of: list[int]
    klass: list[str]
    bytes_key: list[str | None]
    nbytes: list[int]
    defs: dict[str, list[int]]
    uses: dict[str, list[int]]
    idom: list[int]
    loops: list[Loop]
    slice_regs: set[str]
    slice_instrs: set[int]
    decision_instrs: list[int]  # guarded instructions (branches and predicated instructions)
    param_types: dict[str, str]

    @property
    def branch_instrs(self) -> list[int]:
        return [i for i in self.decision_instrs if self.instrs[i].base == "bra"]


def _rename_op(op, regmap, symmap):
    if isinstance(op, Reg):
        neg = op.name.startswith("!")
        n = op.name.lstrip("!")
        if n in regmap:
            return Reg(("!" if neg else "") + regmap[n])
        return op
    if isinstance(op, Sym):
        return Sym(symmap.get(op.name, op.name))
    if isinstance(op, Addr):
        b = op.base
        if isinstance(b, Reg | Sym):
            b = _rename_op(b, regmap, symmap)
        return Addr(b, op.offset)
    if isinstance(op, Vec):
        return Vec(tuple(_rename_op(x, regmap, symmap) for x in op.items))
    if isinstance(op, ArgList):
        return ArgList(tuple(_rename_op(x, regmap, symmap) for x in op.items))
    if isinstance(op, Pair):
        return Pair(_rename_op(op.first, regmap, symmap), _rename_op(op.second, regmap, symmap))
    if isinstance(op, TexAddr):
        return TexAddr(_rename_op(op.handle, regmap, symmap), _rename_op(op.sampler, regmap, symmap),
                       _rename_op(op.coords, regmap, symmap))
    return op


def _flatten(fn: Function, module: PtxModule, counter: list[int], depth: int, out: list) -> None:
    """Append fn's body to out (instructions and labels) with every call inlined."""
    for item in fn.body:
        if not isinstance(item, Instruction) or item.base != "call":
            out.append(item)
            continue
        ins = item
        ops = list(ins.operands)
        rets: tuple = ()
        if ops and isinstance(ops[0], ArgList):
            rets = ops.pop(0).items
        if not ops or not isinstance(ops[0], Sym):
            raise PtxUnsupportedError(ins.line, ins.text, "indirect call is not supported", module.source)
        callee = module.functions.get(ops[0].name)
        args: tuple = ops[1].items if len(ops) > 1 and isinstance(ops[1], ArgList) else ()
        if callee is None or not callee.defined:
            raise PtxUnsupportedError(ins.line, ins.text, f"call to undefined function {ops[0].name!r}",
                                      module.source)
        if depth >= MAX_INLINE_DEPTH:
            raise PtxUnsupportedError(ins.line, ins.text, "call nesting too deep (recursion?)", module.source)
        if len(args) != len(callee.params) or len(rets) != len(callee.returns):
            raise PtxSyntaxError(ins.line, ins.text, f"call of {callee.name!r} with wrong argument count",
                                 module.source)
        counter[0] += 1
        k = counter[0]
        out.append(ins)
        sub: list = []
        _flatten(callee, module, counter, depth + 1, sub)
        regs: set[str] = set()
        labels = {x for x in sub if isinstance(x, str)}
        for x in sub:
            if isinstance(x, Instruction):
                d, u = defs_uses(x)
                regs.update(d)
                regs.update(u)
        regmap = {r: f"{r}@{k}" for r in regs if "." not in r}
        symmap = {name: f"{name}@{k}" for name in labels | set(callee.local_vars)}
        for (pname, _), a in zip(callee.params, args, strict=True):
            symmap[pname] = a.name if isinstance(a, Sym) else pname
        for (rname, _), r in zip(callee.returns, rets, strict=True):
            symmap[rname] = r.name if isinstance(r, Sym) else rname
        ret_label = f"$__ret@{k}"
        for x in sub:
            if isinstance(x, str):
                out.append(symmap.get(x, x))
                continue
            ops2 = tuple(_rename_op(o, regmap, symmap) for o in x.operands)
            pred = regmap.get(x.pred, x.pred) if x.pred else None
            if x.base == "ret" and not x.operands:
                ops2 = (Sym(ret_label),)
            out.append(Instruction(x.opcode, ops2, x.line, x.text, pred, x.pred_neg))
        out.append(ret_label)


def build_program(module: PtxModule, kernel: str) -> Program:
    """Flatten a kernel (inlining calls) and compute blocks, CFG, dominators, loops, def-use and slices."""
    if kernel not in module.kernels:
        raise KeyError(f"kernel {kernel!r} not in module (kernels: {sorted(module.kernels)})")
    fn = module.kernels[kernel]
    items: list = []
    _flatten(fn, module, [0], 0, items)
    instrs: list[Instruction] = []
    labels: dict[str, int] = {}
    for x in items:
        if isinstance(x, str):
            labels[x] = len(instrs)
        else:
            instrs.append(x)
    if not instrs or instrs[-1].base not in ("ret", "exit", "bra", "trap"):
        # falling off the end is an implicit exit
        instrs.append(Instruction("exit", (), fn.line, "<implicit exit>"))
    n = len(instrs)
    for ins in instrs:
        if ins.base == "brx":
            raise PtxUnsupportedError(ins.line, ins.text, "indirect branch brx.idx is not supported",
                                      module.source)
    leaders = {0}
    for idx in labels.values():
        if idx < n:
            leaders.add(idx)
    for i, ins in enumerate(instrs):
        if ins.base in ("bra", "ret", "exit", "trap", "bar", "barrier") and i + 1 < n:
            leaders.add(i + 1)
    starts = sorted(leaders)
    blocks: list[Block] = []
    block_of = [0] * n
    for bi, s in enumerate(starts):
        e = starts[bi + 1] if bi + 1 < len(starts) else n
        blocks.append(Block(bi, s, e))
        for i in range(s, e):
            block_of[i] = bi
    for b in blocks:
        last = instrs[b.end - 1]
        succ: list[int] = []
        if last.base == "bra" or (last.base == "ret" and last.operands):
            tgt = last.operands[-1]
            if not isinstance(tgt, Sym) or tgt.name not in labels or labels[tgt.name] >= n:
                raise PtxSyntaxError(last.line, last.text, "branch target is not a label", module.source)
            succ.append(block_of[labels[tgt.name]])
            if last.pred and b.end < n:
                succ.append(block_of[b.end])
        elif last.base in ("ret", "exit", "trap"):
            if last.pred and b.end < n:
                succ.append(block_of[b.end])
        elif b.end < n:
            succ.append(block_of[b.end])
        b.succs = list(dict.fromkeys(succ))
        for s in b.succs:
            blocks[s].preds.append(b.index)
    klass, bkey, nbytes = [], [], []
    for ins in instrs:
        c, key = classify(ins.opcode)
        klass.append(c)
        bkey.append(key)
        nbytes.append(access_bytes(ins.opcode) if key else 0)
    defs: dict[str, list[int]] = {}
    uses: dict[str, list[int]] = {}
    for i, ins in enumerate(instrs):
        d, u = defs_uses(ins)
        for r in d:
            defs.setdefault(r, []).append(i)
        for r in u:
            uses.setdefault(r, []).append(i)
    idom = _dominators(blocks)
    loops = _loops(blocks, idom)
    decisions = [i for i, ins in enumerate(instrs) if ins.pred]
    slice_regs, slice_instrs = backward_slice(instrs, defs, [instrs[i].pred for i in decisions])
    ptypes = {name: t for name, t in fn.params}
    return Program(fn, module, instrs, labels, blocks, block_of, klass, bkey, nbytes, defs, uses, idom, loops,
                   slice_regs, slice_instrs, decisions, ptypes)


def backward_slice(instrs: list[Instruction], defs: dict[str, list[int]], seeds: list[str]):
    """Registers and instructions that can influence the seed registers (flow-insensitive closure).

    Values passed through call parameters (st.param / ld.param of the same slot) are followed too.
    """
    param_writers: dict[str, list[int]] = {}
    for i, ins in enumerate(instrs):
        if ins.base == "st" and "param" in ins.mods and ins.operands and isinstance(ins.operands[0], Addr):
            a = ins.operands[0]
            if isinstance(a.base, Sym):
                param_writers.setdefault(f"{a.base.name}+{a.offset}", []).append(i)
    regs: set[str] = set()
    out: set[int] = set()
    work = [s for s in seeds if s]
    while work:
        r = work.pop()
        if r in regs:
            continue
        regs.add(r)
        for i in defs.get(r, ()):
            if i in out:
                continue
            out.add(i)
            ins = instrs[i]
            _, u = defs_uses(ins)
            work.extend(u)
            if ins.base == "ld" and "param" in ins.mods and len(ins.operands) > 1:
                a = ins.operands[1]
                if isinstance(a, Addr) and isinstance(a.base, Sym):
                    for w in param_writers.get(f"{a.base.name}+{a.offset}", ()):
                        if w not in out:
                            out.add(w)
                            work.extend(defs_uses(instrs[w])[1])
    return regs, out


def _dominators(blocks: list[Block]) -> list[int]:
    """Immediate dominators (Cooper-Harvey-Kennedy); unreachable blocks get -1."""
    order: list[int] = []
    seen = set()
    stack = [(0, iter(blocks[0].succs))] if blocks else []
    seen.add(0)
    while stack:
        b, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            order.append(b)
            stack.pop()
        elif nxt not in seen:
            seen.add(nxt)
            stack.append((nxt, iter(blocks[nxt].succs)))
    rpo = order[::-1]
    pos = {b: i for i, b in enumerate(rpo)}
    idom = [-1] * len(blocks)
    if not blocks:
        return idom
    idom[0] = 0
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            ps = [p for p in blocks[b].preds if idom[p] != -1 and p in pos]
            if not ps:
                continue
            new = ps[0]
            for p in ps[1:]:
                a, c = p, new
                while a != c:
                    while pos[a] > pos[c]:
                        a = idom[a]
                    while pos[c] > pos[a]:
                        c = idom[c]
                new = a
            if idom[b] != new:
                idom[b] = new
                changed = True
    return idom


def dominates(idom: list[int], a: int, b: int) -> bool:
    while True:
        if a == b:
            return True
        if b == 0 or idom[b] in (-1, b):
            return False
        b = idom[b]


def _loops(blocks: list[Block], idom: list[int]) -> list[Loop]:
    by_header: dict[int, Loop] = {}
    for b in blocks:
        if idom[b.index] == -1:
            continue
        for s in b.succs:
            if dominates(idom, s, b.index):
                loop = by_header.setdefault(s, Loop(s, [], {s}, []))
                loop.latches.append(b.index)
                work = [b.index]
                while work:
                    x = work.pop()
                    if x in loop.body:
                        continue
                    loop.body.add(x)
                    work.extend(blocks[x].preds)
    for loop in by_header.values():
        loop.exits = sorted({s for x in loop.body for s in blocks[x].succs if s not in loop.body})
    return [by_header[h] for h in sorted(by_header)]


def def_use_chains(prog: Program) -> dict[tuple[int, str], list[int]]:
    """Reaching definitions: (instruction index, register it reads) -> indices of the instructions whose
    write of that register can reach the read (predicated writes do not kill earlier ones)."""
    nb = len(prog.blocks)
    gen: list[dict[str, set[int]]] = []
    for b in prog.blocks:
        g: dict[str, set[int]] = {}
        for i in range(b.start, b.end):
            ins = prog.instrs[i]
            for r in defs_uses(ins)[0]:
                g[r] = (g.get(r, set()) | {i}) if ins.pred else {i}
        gen.append(g)
    reach_in: list[dict[str, set[int]]] = [{} for _ in range(nb)]
    reach_out: list[dict[str, set[int]]] = [dict(g) for g in gen]
    changed = True
    while changed:
        changed = False
        for b in prog.blocks:
            inn: dict[str, set[int]] = {}
            for p in b.preds:
                for r, ds in reach_out[p].items():
                    inn.setdefault(r, set()).update(ds)
            out = {r: set(ds) for r, ds in inn.items()}
            for r, ds in gen[b.index].items():
                killed = all(not prog.instrs[i].pred for i in ds)
                out[r] = set(ds) if killed else out.get(r, set()) | ds
            if inn != reach_in[b.index] or out != reach_out[b.index]:
                reach_in[b.index], reach_out[b.index] = inn, out
                changed = True
    chains: dict[tuple[int, str], list[int]] = {}
    for b in prog.blocks:
        cur = {r: set(ds) for r, ds in reach_in[b.index].items()}
        for i in range(b.start, b.end):
            ins = prog.instrs[i]
            d, u = defs_uses(ins)
            for r in u:
                chains[(i, r)] = sorted(cur.get(r, ()))
            for r in d:
                cur[r] = (cur.get(r, set()) | {i}) if ins.pred else {i}
    return chains
