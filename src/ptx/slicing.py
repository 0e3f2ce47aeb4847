"""The slice plan of a kernel: what the driver does in each basic block, and liveness of slice registers.

Only the instructions in the backward slice of guard predicates (Program.slice_instrs, from cfg.py) are
evaluated; every other instruction matters only through its guard. The plan lists per block its actions
(slice instructions compiled by the Evaluator, guarded instructions) and its terminator, the registers
each slice instruction reads, and liveness: a masked write needs no merge with the old value when no lane
waiting elsewhere can still read it, and a loop iteration reads only some registers before writing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from src.ptx.cfg import Program, defs_uses
from src.ptx.semantics import Evaluator
from src.ptx.syntax import Addr, Sym


@dataclass
class Plan:
    """Per basic block: actions (instruction index, evaluate?, guard?) and the terminator."""

    actions: list[list[tuple]]
    term: list[tuple]  # (kind, target block, fallthrough block, guard reg, neg)
    reads: dict[int, tuple[str, ...]]  # slice instruction -> registers / parameter slots it reads
    live_in: list[frozenset]  # per block: slice registers whose value on entry may still be read
    use: list = None  # per block: registers read before written in the block
    kill: list = None  # per block: registers written (unguarded) in the block


def build_plan(prog: Program, ev: Evaluator) -> Plan:
    """The plan of a kernel: per block its actions (slice instructions compiled by ev) and terminator."""
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
    return Plan(actions, term, reads, live_in, use, kill)


def _liveness(prog: Program, actions, term, reads) -> tuple[list[frozenset], list[set], list[set]]:
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


def loop_carried_reads(plan: Plan, prog: Program, loop) -> frozenset:
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
