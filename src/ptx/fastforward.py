"""Loop fast-forward of the driver: runs of loop iterations applied at once at a loop header.

At every loop header the driver calls LoopFastForward._at_header, which compares the last iterations:
  * uniform-loop closed form (_try_ff): when the last two iterations were identical except for scalar
    registers advancing by constant steps (loop counters), and every instruction those registers feed is
    affine, the number of further identical iterations is solved in closed form (first iteration at which
    an affine comparison changes, or a value would wrap) and applied at once;
  * loop batching (_try_batch): when the counters feed non-affine work and one iteration is small, many
    future iterations run at once as extra lanes (the iteration number as one more axis of the blocks),
    discarded if a lane would leave the loop, kept only if every counter really advanced by its step;
  * a loop whose state no longer changes never exits: AnalysisError.
"""

from __future__ import annotations

import numpy as np

from src.ptx.arith import cmp_int
from src.ptx.cfg import defs_uses
from src.ptx.errors import AnalysisError
from src.ptx.isa import value_types
from src.ptx.lazy import Aff, CMask, simplify
from src.ptx.memo import MEMO_BYTES, Memo
from src.ptx.regvalues import Unknown, is_vec, store_as
from src.ptx.slicing import loop_carried_reads
from src.ptx.syntax import Instruction, Reg
from src.ptx.values import CMP_OPS, is_float, width

BATCH_LOOPS = True
BATCH_MAX_LANES = 8192  # batch loop iterations only when one iteration is this small (overhead-bound)
BATCH_LANES = 1 << 17  # lanes of one batch (iterations x blocks x threads)


class BatchAbort(Exception):
    """A lane would leave the loop inside a batch of iterations: fall back to one iteration at a time."""


class LoopFastForward:
    """Loop-header logic of driver.Runner: skip (closed form) or batch the iterations of steady loops.

    A mixin: it works on the Runner's state (prog, plan, ev, memo, recorded events, hist, ...) and calls
    back into its traversal (_drive, _fold, _apply).
    """

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
            live_h = self.loop_reads[h] = loop_carried_reads(self.plan, self.prog, self.loop_of[h])
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
            if isinstance(v2, Unknown) or isinstance(v1, Unknown) or isinstance(v0, Unknown):
                return
            if is_vec(v0) or is_vec(v1) or is_vec(v2):
                changed_vec.add(k)  # recomputed every iteration (checked below) or the loop is not steady
                continue
            if not (v0 == v1 == v2):
                return
        loop = self.loop_of[h]
        if not carried:
            if not seg_equal or any(k in live_h for k in changed_vec):
                return
            self._check_infinite(h, seg2)  # nothing a later iteration reads has changed: it never ends
        if seg_equal and not any(is_vec(regs.get(k)) for k in changed_vec) and self._try_ff(
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
            if reg in regs and is_vec(regs[reg]):
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
            k = _first_flip(op, a0 - b0, da - db, cmp_int(op, am, bm))
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
            carried_reads = self.loop_reads[h] = loop_carried_reads(self.plan, self.prog, loop)
        if (D - set(carried)) & carried_reads or not changed_vec <= D:
            return False
        sub = {k: _tile(v, K, B) for k, v in regs.items()}
        for r, d in carried.items():
            w = self.reg_width(r)
            vals = [store_as(regs[r] + j * d, "b64" if w >= 64 else "b32") for j in range(K)]
            sub[r] = np.repeat(np.asarray(vals, dtype=np.int64), B)[:, None]
        saved = (self.rec, self.grec, self.events, self.hist, self.memo, self.nb_cur, self.ready,
                 self.pending_now)
        self.rec, self.grec, self.events, self.hist, self.ready = {}, {}, [], {}, {}
        self.memo, self.nb_cur = Memo(MEMO_BYTES), K * B
        try:
            self._drive(sub, {h: _tile(mask, K, B)}, [h], (h, loop.body))
            ok = True
        except BatchAbort:
            ok = False
        sub_rec, sub_grec = self.rec, self.grec
        self.rec, self.grec, self.events, self.hist, self.memo, self.nb_cur, self.ready, self.pending_now = saved
        new_regs = {}
        if ok:
            for r, d in carried.items():  # the counters must really have advanced by d every iteration
                w = self.reg_width(r)
                want = np.asarray([store_as(regs[r] + j * d, "b64" if w >= 64 else "b32") for j in range(1, K + 1)],
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
            k = _first_flip(op, a0 - b0, da - db, cmp_int(op, a0, b0))
            k = min(k, _range_limit(a0, da, t), _range_limit(b0, db, t))
            n = k if n is None else min(n, k)
        return n

    def plan_fn(self, i: int):
        """The compiled closure of instruction i (cached), also for instructions outside the plan."""
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
        return cmp_int(op, e0 + k * de, 0)
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
