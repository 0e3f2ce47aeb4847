"""Tables of validate.py: the operand forms of opcodes with many forms, and the destination type rules.

Forms (`form_of`): the operand count and shapes (`{...}` vector, `[...]` address) of an opcode whose form is
decided by its modifiers, after the PTX ISA sections named at each entry (PTX ISA 8.x/9.0). Every form here was
checked against ptxas (CUDA 13.0): the real form is accepted, and each rejected variant (an operand dropped or
added, a vector written as a bare register, an address without brackets) is rejected by ptxas too.
`form_of` returns None, and nothing is counted, for forms not pinned down: see validate.py's module doc.

Destination types (`dest_type`, `fits`): the PTX ISA's "Type Information for Instructions and Operands" (table
"Type Checking Rules") and "Operand Size Exceeding Instruction-Type Size" (relaxed rules of ld, ldu and cvt
destinations), as ptxas applies them; `dest_type` names only opcodes whose destination type is certain.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from src.ptx.syntax import Vec


@dataclass(frozen=True)
class Form:
    name: str  # what errors call it: 'mma.sp', 'cp.async.bulk', ...
    lo: int  # fewest operands
    hi: int  # most operands
    dest: bool = False  # the first operand is written
    vec: tuple[int, ...] = ()  # operands that must be vectors `{...}` (ptxas: "Vector expected")
    addr: tuple[int, ...] = ()  # operands that must be addresses `[...]`
    vec_len: int = 0  # when > 0: the number of registers in the vector vec[0]


def _f(name, lo, hi=None, **kw) -> Form:
    return Form(name, lo, lo if hi is None else hi, **kw)


# Type modifiers: `.u32`, `.f16x2`, `.bf16`, `.e4m3x2`, `.tf32`, `.pred` ('pred' of a register is its own kind).
_TYPE = re.compile(r"(?:([bsuf])(\d+)|(bf16)|(tf32)|(u?e\dm\d))(?:x(\d+))?|(pred)")


def _types(mods: tuple[str, ...]) -> list[str]:
    return [m for m in mods if _TYPE.fullmatch(m)]


# -------------------------------------------------------------------------------------------------- forms
def _mma(mods) -> Form | None:
    # "Warp Level Matrix Multiply-Accumulate Instructions: mma" and "mma.sp": d, a, b, c (all vectors, even of one
    # register); mma.sp adds the sparsity metadata e and selector f; .block_scale (sm_120a) adds scale-a-data,
    # {byte-id-a, thread-id-a}, scale-b-data, {byte-id-b, thread-id-b}, and there ptxas 13.0 also takes a bare
    # register for b, c and the {byte-id, thread-id} pairs: only d and a must be vectors.
    sparse = bool(mods) and mods[0] in ("sp", "sp::ordered_metadata")
    n = 6 if sparse else 4
    name = "mma.sp" if sparse else "mma"
    if "block_scale" in mods:
        return _f(name + " .block_scale", n + 4, dest=True, vec=(0, 1))
    return _f(name, n, dest=True, vec=(0, 1, 2, 3))


def _wmma(mods) -> Form | None:
    # "Warp Level Matrix Load Instruction: wmma.load" (r, [p] {, stride}), "... Store Instruction: wmma.store"
    # ([p], r {, stride}), "... Multiply-and-Accumulate Instruction: wmma.mma" (d, a, b, c): fragments are vectors.
    op = mods[0] if mods else ""
    if op == "load":
        return _f("wmma.load", 2, 3, dest=True, vec=(0,), addr=(1,))
    if op == "store":
        return _f("wmma.store", 2, 3, vec=(1,), addr=(0,))
    if op == "mma":
        return _f("wmma.mma", 4, dest=True, vec=(0, 1, 2, 3))
    return None


def _matrix_regs(mods) -> int:
    """Registers of an ldmatrix/stmatrix vector: .x1/.x2/.x4 matrices, two registers each for .m16n16 (0: unknown)."""
    num = {"x1": 1, "x2": 2, "x4": 4}.get(next((m for m in mods if m in ("x1", "x2", "x4")), ""), 0)
    return num * 2 if "m16n16" in mods else num if ("m8n8" in mods or "m8n16" in mods or "m16n8" in mods) else 0


def _cp(mods) -> Form | None:
    # "Data Movement and Conversion Instructions": cp.async, cp.async.commit_group, cp.async.wait_group /
    # cp.async.wait_all, cp.async.mbarrier.arrive, cp.async.bulk, cp.async.bulk.prefetch, cp.reduce.async.bulk,
    # cp.async.bulk.commit_group, cp.async.bulk.wait_group. The cache-policy operand is there iff .L2::cache_hint
    # is, ctaMask iff .multicast::cluster, byteMask iff .cp_mask. The .tensor forms take `[tensorMap, {coords}]`.
    m = mods + ("", "", "")
    hint = int("L2::cache_hint" in mods)
    if m[0] == "async":
        if m[1] in ("ca", "cg"):  # [dst], [src], cp-size {, src-size | ignore-src} {, cache-policy}
            return _f("cp.async", 3 + hint, 4 + hint, addr=(0, 1))
        if m[1] in ("commit_group", "wait_all"):
            return _f(f"cp.async.{m[1]}", 0)
        if m[1] == "wait_group":
            return _f("cp.async.wait_group", 1)
        if m[1] == "mbarrier":  # cp.async.mbarrier.arrive{.noinc}{.shared{::cta}}.b64 [addr]
            return _f("cp.async.mbarrier.arrive", 1, addr=(0,))
        if m[1] == "bulk" and "tensor" not in mods:
            if m[2] == "commit_group":
                return _f("cp.async.bulk.commit_group", 0)
            if m[2] == "wait_group":
                return _f("cp.async.bulk.wait_group", 1)
            if m[2] == "prefetch":  # [srcMem], size {, cache-policy}
                return _f("cp.async.bulk.prefetch", 2 + hint, addr=(0,))
            if "bulk_group" in mods:  # [dstMem], [srcMem], size {, cache-policy} {, byteMask}
                return _f("cp.async.bulk", 3 + hint + int("cp_mask" in mods), addr=(0, 1))
            if "mbarrier::complete_tx::bytes" in mods:  # [dstMem], [srcMem], size, [mbar] {, ctaMask} {, policy}
                return _f("cp.async.bulk", 4 + hint + int("multicast::cluster" in mods), addr=(0, 1, 3))
    if m[:3] == ("reduce", "async", "bulk") and "tensor" not in mods:
        if "bulk_group" in mods:  # [dstMem], [srcMem], size {, cache-policy}
            return _f("cp.reduce.async.bulk", 3 + hint, addr=(0, 1))
        if "mbarrier::complete_tx::bytes" in mods:  # [dstMem], [srcMem], size, [mbar]
            return _f("cp.reduce.async.bulk", 4, addr=(0, 1, 3))
    return None


def _mbarrier(mods) -> Form | None:
    # "Parallel Synchronization and Communication Instructions": mbarrier.init, mbarrier.inval,
    # mbarrier.expect_tx, mbarrier.complete_tx, mbarrier.arrive, mbarrier.arrive_drop,
    # mbarrier.test_wait / mbarrier.try_wait, mbarrier.pending_count.
    op = mods[0] if mods else ""
    if op == "init" or op in ("expect_tx", "complete_tx"):  # [addr], count | txCount
        return _f(f"mbarrier.{op}", 2, addr=(0,))
    if op == "inval":
        return _f("mbarrier.inval", 1, addr=(0,))
    if op in ("arrive", "arrive_drop"):  # state | _, [addr] {, count}; .expect_tx / .noComplete: a count is required
        lo = 3 if ("expect_tx" in mods or "noComplete" in mods) else 2
        return _f(f"mbarrier.{op}", lo, 3, dest=True, addr=(1,))
    if op == "test_wait":  # waitComplete, [addr], state | phaseParity
        return _f("mbarrier.test_wait", 3, dest=True, addr=(1,))
    if op == "try_wait":  # waitComplete, [addr], state | phaseParity {, suspendTimeHint}
        return _f("mbarrier.try_wait", 3, 4, dest=True, addr=(1,))
    if op == "pending_count":  # count, state
        return _f("mbarrier.pending_count", 2, dest=True)
    return None


def _wgmma(mods, ops) -> Form | None:
    # "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions": wgmma.fence, wgmma.commit_group,
    # wgmma.wait_group, wgmma.mma_async(.sp): d, a-desc | {a}, b-desc, [sp-meta, sp-sel,] scale-d, then
    # imm-scale-a, imm-scale-b, imm-trans-a (a-desc only), imm-trans-b for .f16/.bf16; imm-scale-a, imm-scale-b
    # for .tf32/.e4m3/.e5m2; nothing for .s8/.u8/.b1.
    op = mods[0] if mods else ""
    if op in ("fence", "commit_group"):
        return _f(f"wgmma.{op}", 0)
    if op == "wait_group":
        return _f("wgmma.wait_group", 1)
    if op != "mma_async":
        return None
    types = _types(mods)
    if len(types) < 2:
        return None
    a_regs = len(ops) > 1 and isinstance(ops[1], Vec)
    extra = {"f16": 3 if a_regs else 4, "bf16": 3 if a_regs else 4, "tf32": 2, "e4m3": 2, "e5m2": 2,
             "s8": 0, "u8": 0, "b1": 0}.get(types[1])
    if extra is None:
        return None
    sparse = len(mods) > 1 and mods[1] == "sp"
    n = 4 + extra + (2 if sparse else 0)
    return _f("wgmma.mma_async.sp" if sparse else "wgmma.mma_async", n, dest=True, vec=(0, 1) if a_regs else (0,))


def form_of(base: str, mods: tuple[str, ...], ops: tuple) -> Form | None:
    """The operand form of a multi-form opcode (None: not one, or a form left unchecked)."""
    if base == "mma":
        return _mma(mods)
    if base == "wmma":
        return _wmma(mods)
    if base == "ldmatrix":  # "Warp-level matrix load instruction: ldmatrix": r, [p]
        return _f("ldmatrix", 2, dest=True, vec=(0,), addr=(1,), vec_len=_matrix_regs(mods))
    if base == "stmatrix":  # "Warp-level matrix store instruction: stmatrix": [p], r
        return _f("stmatrix", 2, vec=(1,), addr=(0,), vec_len=_matrix_regs(mods))
    if base == "cp":
        return _cp(mods)
    if base == "mbarrier":
        return _mbarrier(mods)
    if base == "wgmma":
        return _wgmma(mods, ops)
    if base == "txq":  # "Texture Instructions: txq": d, [a] ; txq.level: d, [a], lod
        return _f("txq", 3 if mods[:1] == ("level",) else 2, dest=True, addr=(1,))
    return None


# ------------------------------------------------------------------------------------- destination types
# Width of the non-basic types: packed halves, bf16, tf32 and the 8/6/4-bit float formats (cvt destinations).
@functools.cache
def type_width(t: str) -> tuple[str, int] | None:
    """('b' | 'i' | 'f' | 'x' | 'pred', bits) of a type like '.u32' / 'f16x2'; 'x' is a type only a .bN register
    (or ld/cvt's wider .bN register) holds; None if not a known type."""
    m = _TYPE.fullmatch(t.lstrip("."))
    if m is None:
        return None
    if m.group(7):
        return "pred", 1
    n = int(m.group(6) or 1)
    if m.group(1):
        bits = int(m.group(2))
        kind = {"b": "b", "s": "i", "u": "i", "f": "f"}[m.group(1)]
        return ("x" if n > 1 else kind), bits * n
    if m.group(3) or m.group(4):
        return "x", (16 if m.group(3) else 32) * n
    return "x", (4 if m.group(5) == "e2m1" else 8) * n


# Opcodes whose destination has the instruction type (their only type modifier), under the strict rules.
_SAME_TYPE = frozenset(
    "add sub mul mad div rem abs neg min max and or xor not cnot shl shr sqrt rsqrt rcp sin cos lg2 ex2 tanh "
    "copysign fma addc subc madc sad mul24 mad24 bfe bfi brev prmt shf lop3 selp mov cvta bmsk szext fns atom "
    "redux shfl vote activemask createpolicy stacksave mapa".split())
_U32_RESULT = frozenset("popc clz bfind match dp4a dp2a".split())  # d is a 32-bit integer whatever the type
_FIRST_TYPE = frozenset("set slct".split())  # set.cmp.dtype.stype, slct.dtype.stype
_RELAXED = frozenset("ld ldu cvt".split())  # "Operand Size Exceeding Instruction-Type Size"


# cvt's modifiers other than types; a cvt with any other modifier (a newer format) is not type-checked.
_CVT_MODS = frozenset("rn rz rm rp rni rzi rmi rpi rna rs ftz sat satfinite relu pack frnd2".split())
# mbarrier: state (.b64) of arrive/arrive_drop, waitComplete (.pred) of the waits, count (.b32) of pending_count.
_MBARRIER_DEST = {"arrive": "b64", "arrive_drop": "b64", "test_wait": "pred", "try_wait": "pred",
                  "pending_count": "b32"}


def dest_type(base: str, mods: tuple[str, ...]) -> tuple[str, bool] | None:
    """(the destination's instruction type, relaxed rules?) of a value-producing opcode; None if not certain."""
    if base in ("testp", "isspacep"):
        return "pred", False
    if base in _U32_RESULT:
        return "u32", False
    if base == "mbarrier":
        t = _MBARRIER_DEST.get(mods[0] if mods else "")
        return (t, False) if t else None
    types = _types(mods)
    if not types:
        return None
    if base == "cvt":
        return (types[0], True) if all(m in _CVT_MODS or _TYPE.fullmatch(m) for m in mods) else None
    if base in _FIRST_TYPE:
        return types[0], False
    if len(types) != 1 or not (base in _SAME_TYPE or base in _RELAXED):
        return None
    t = types[0]
    if base in ("mul", "mad") and "wide" in mods:
        m = re.fullmatch(r"([su])(\d+)", t)
        return (f"{m.group(1)}{2 * int(m.group(2))}", False) if m else None
    return t, base in _RELAXED


@functools.cache
def fits(reg_type: str, ins_type: str, relaxed: bool, vector: bool = False) -> bool:
    """Whether a register declared `reg_type` may be the destination of an instruction of type `ins_type`.

    Strict rules: the sizes are equal; a .bN register or instruction type goes with any kind, otherwise the
    kinds (integer .s/.u, float .f) agree; packed/other types ('x': .f16x2 instructions, .bf16, ...) take .bN
    registers. Relaxed (ld, ldu, cvt): .bN and integer instruction types may write wider .bN/integer
    registers (.bN also wider float registers); float instruction types a float register of their size or a
    wider .bN register. Vector loads ({...}) are only held to the sizes. A .f16x2 register, or an unknown
    type, is never rejected (ptxas takes .f16x2 registers for integer and predicate results alike)."""
    r, t = type_width(reg_type), type_width(ins_type)
    if r is None or t is None or reg_type.lstrip(".") == "f16x2":
        return True
    (rk, rbits), (tk, tbits) = r, t
    if rk == "pred" or tk == "pred":
        return rk == tk
    if relaxed:
        if rbits < tbits:
            return False
        if vector or rk == "b" or tk == "b":
            return True
        if tk == "i":
            return rk == "i"
        if tk == "f":
            return rk == "f" and rbits == tbits
        return True  # 'x': ptxas differs per type (cvt .f16x2 takes wider .bN, .bf16x2 does not): size only
    if rbits != tbits:
        return False
    return rk == "b" or tk == "b" or rk == tk
