"""Launch driver of the analyzer: min-PC SIMT traversal of the slice over basic blocks, vectorised over lanes.

run_launch() evaluates a launch with one Runner, in chunks of blocks; blocks are enumerated only for the
%ctaid components the slice reads, the rest of the grid is a multiplier (a slice without %ctaid is
evaluated for one block). Values carry their own broadcast shape (regvalues.py), so uniform work is done
once and only values mixing block and thread indices become (B, T). The Runner follows SIMT min-PC
scheduling over basic blocks with a per-lane mask: the pending block with the lowest program position
runs next for all lanes waiting there (exactly the per-warp schedule of the reference interpreter, since
warps do not influence each other's control flow). Guards depending on unknown data go through the
policy (decide). Block visits and guards are recorded as (mask, multiplicity); uniform loops keep the same
mask object from iteration to iteration and accumulate a multiplicity instead of per-thread work, and
at loop headers the LoopFastForward mixin (fastforward.py) skips or batches iterations.
"""

from __future__ import annotations

import heapq

import numpy as np

from src.ptx.cfg import Program
from src.ptx.errors import AnalysisError, UnresolvedBranchError
from src.ptx.fastforward import BatchAbort, LoopFastForward
from src.ptx.lazy import CMask, lanes_warps_cmask
from src.ptx.memo import MEMO_BYTES, Memo, nbytes_of, vkey
from src.ptx.regvalues import Unknown, full, is_vec, read_as
from src.ptx.semantics import Evaluator
from src.ptx.slicing import build_plan

LANES_PER_CHUNK = 1 << 19
MAX_STEPS = 2_000_000


class Runner(LoopFastForward):
    """Evaluates one launch chunk by chunk; block_lanes / block_warps / guard_lanes accumulate the counts."""

    def __init__(self, prog: Program, params: dict, grid, block, policy: str, prob: float, forced: str | None):
        self.prog = prog
        self.ev = Evaluator(prog, params)
        self.plan = build_plan(prog, self.ev)
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
        self.blocks_evaluated = self.blocks_total = 0

    def lanes_warps(self, mask, nblocks: int) -> tuple[int, int]:
        """(lanes, warps) a mask covers over nblocks blocks (mask rows repeat when fewer than nblocks)."""
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
        if not isinstance(g, Unknown):
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
        """Run nblocks blocks from their special registers regs; each stands for mult blocks of the grid."""
        self.nb_cur = nblocks
        self.mult_cur = mult
        self.memo = Memo(MEMO_BYTES)
        self.rec, self.grec = {}, {}
        self.events = []
        self.hist: dict[int, list] = {}
        self.ready = {}
        self._drive(regs, {0: True}, [0], None)
        self._fold(self.rec, self.grec, nblocks, mult)

    def _drive(self, regs: dict, pending: dict, heap: list, stop) -> None:
        """Min-PC traversal until no lane is pending. With stop=(header, body, returned) it runs one batch of
        loop iterations: lanes reaching the header are collected, leaving the loop aborts (BatchAbort)."""
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
                    raise BatchAbort
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
                    g = self.decide(read_as(regs[gp], "pred") if gp in regs else Unknown(f"{gp} unset"), i, visit)
                    if gneg:
                        g = lnot(g)
                    m = land(mask, g)
                    if m is not None:
                        record(grec, i, m)
                        events.append(("g", i, m))
                    if is_exit:  # predicated exit mid-block: remove exiting lanes
                        if stop is not None and m is not None:
                            raise BatchAbort
                        mask = land(mask, lnot(g))
                        if mask is None:
                            break
                        continue
                if fn is not None:
                    vals = [regs.get(r) for r in plan.reads[i]]
                    for v in vals:
                        if type(v) is ndarray:
                            key = (i, *map(vkey, vals))
                            writes = memo.get(key)
                            if writes is None:
                                writes = fn(regs)
                                memo.put(key, vals, writes, nbytes_of(*(w[1] for w in writes)))
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
                        raise BatchAbort
                    continue
                g = self.decide(read_as(regs[gp], "pred") if gp in regs else Unknown(f"{gp} unset"), ti, visit)
                if gneg:
                    g = lnot(g)
                taken = land(mask, g)
                if kind == "bra":
                    if taken is not None:
                        push(tgt, taken)
                else:
                    if taken is not None:
                        if stop is not None:
                            raise BatchAbort
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

    # memoised mask / value combinators (identity in, identity out)
    def _cached(self, key, keep, compute):
        memo = self.memo
        v = memo.get(key)
        if v is None:
            v = compute()
            memo.put(key, keep, (v,), nbytes_of(v))
            return v
        return v[0]

    def _where(self, mask, new, old):
        if mask is True or old is None or isinstance(new, Unknown):
            return new
        if isinstance(old, Unknown):
            return old
        if not is_vec(mask):
            return new if mask else old
        return self._cached(("w", id(mask), vkey(new), vkey(old)), (mask, new, old),
                            lambda: np.where(full(mask), full(new), full(old)))

    def _and(self, mask, g):
        if not is_vec(g) or mask is True:
            return _and(mask, g)
        return self._cached(("a", vkey(mask), id(g)), (mask, g), lambda: _and(mask, g))

    def _not(self, g):
        if not is_vec(g):
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
    if g is True or (g is not False and not is_vec(g) and g):
        return mask
    if g is False or (not is_vec(g) and not g):
        return None
    if mask is True:
        return _norm(g)
    return _norm(mask & g)


def _special_regs(grid, block, used: set[str], blocks: np.ndarray) -> dict:
    T = block[0] * block[1] * block[2]
    t = np.arange(T, dtype=np.int64)[None, :]
    regs: dict[str, object] = {
        "%tid.x": t % block[0], "%tid.y": (t // block[0]) % block[1], "%tid.z": t // (block[0] * block[1]),
        "%ntid.x": block[0], "%ntid.y": block[1], "%ntid.z": block[2],
        "%nctaid.x": grid[0], "%nctaid.y": grid[1], "%nctaid.z": grid[2],
        "%tid.w": 0, "%ntid.w": 0, "%ctaid.w": 0, "%nctaid.w": 0,  # PTX ISA: the unused 4th component reads 0
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


def chunk_plan(n_chunks: int, max_chunks: int | None) -> list[tuple[int, int]]:
    """(chunk evaluated, how many chunks it stands for) for a launch of n_chunks chunks of blocks.

    All of them when there are at most max_chunks. Else a systematic sample: the first and the last chunk
    exactly (the boundary blocks of guarded tails live there), the interior in max_chunks - 2 equal strata
    whose middle chunk stands for the whole stratum. Interior chunks hold the same number of blocks, so a
    stratum's weight is an exact integer.
    """
    if max_chunks is None or n_chunks <= max(max_chunks, 3):
        return [(c, 1) for c in range(n_chunks)]
    interior = n_chunks - 2
    size = -(-interior // (max_chunks - 2))
    plan = [(0, 1)]
    for start in range(1, n_chunks - 1, size):
        count = min(size, n_chunks - 1 - start)
        plan.append((start + count // 2, count))
    plan.append((n_chunks - 1, 1))
    return plan


def run_launch(prog: Program, grid, block, params, policy: str, prob: float, forced: str | None,
               max_chunks: int | None = None) -> Runner:
    """Run a whole launch (3-tuples grid, block; params by PTX name) and return the Runner with its counts.

    forced overrides the policy for unresolved guards ('taken', 'not_taken', 'diverge': the bounds runs).
    max_chunks: evaluate at most this many chunks of LANES_PER_CHUNK lanes, the rest by stratified sample
    (chunk_plan); runner.blocks_evaluated / blocks_total say how much of the grid was evaluated.
    """
    runner = Runner(prog, params, grid, block, policy, prob, forced)
    used = {r for r in prog.slice_regs if r.startswith("%") and "." in r or r in (
        "%laneid", "%warpid", "%nwarpid") or r.startswith("%lanemask")}
    T = runner.T
    dims_used = [c for c, name in enumerate(("%ctaid.x", "%ctaid.y", "%ctaid.z")) if name in used]
    nblocks_total = grid[0] * grid[1] * grid[2]
    runner.blocks_total = nblocks_total
    if not dims_used:
        regs = _special_regs(grid, block, used, np.zeros(1, np.int64))
        runner.run_chunk(regs, 1, nblocks_total)
        runner.blocks_evaluated = nblocks_total
        return runner
    # evaluate one representative block per combination of the used ctaid components
    sub = [grid[c] if c in dims_used else 1 for c in range(3)]
    mult = nblocks_total // (sub[0] * sub[1] * sub[2])
    n_sub = sub[0] * sub[1] * sub[2]
    sx, sy = sub[0], sub[1]
    per_chunk = max(1, LANES_PER_CHUNK // max(T, 1))
    evaluated = 0
    for chunk, weight in chunk_plan(-(-n_sub // per_chunk), max_chunks):
        start = chunk * per_chunk
        ids = np.arange(start, min(n_sub, start + per_chunk), dtype=np.int64)
        cx, cy, cz = ids % sx, (ids // sx) % sy, ids // (sx * sy)
        lin = cx + grid[0] * (cy + grid[1] * cz)
        regs = _special_regs(grid, block, used, lin)
        runner.run_chunk(regs, len(ids), mult * weight)
        evaluated += len(ids)
    runner.blocks_evaluated = evaluated * mult
    return runner
