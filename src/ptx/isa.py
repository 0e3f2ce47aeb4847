"""PTX opcode table and the instruction classes the counts are broken down by.

Classes (one per instruction): integer, fp16, fp32, fp64, fma, special, convert, load.<space>,
store.<space>, atomic, barrier, warp, tensor, control, other. <space> is global, shared, local,
param, const or generic (no state space written). Texture and surface instructions count as global memory
accesses (tex, tld4, suld: load.global; sust: store.global; sured: atomic).
"""

from __future__ import annotations

import re

KNOWN_OPCODES = frozenset(
    """
    abs activemask add addc and applypriority atom createpolicy bar barrier bfe bfi bfind bmsk bra brev brkpt brx call
    clz cnot copysign cos cp cvt cvta discard div dp2a dp4a elect ex2 exit fence fma fns getctarank griddepcontrol
    isspacep istypep ld ldmatrix ldu lg2 lop3 mad mad24 madc mapa match max mbarrier membar min mma mov
    movmatrix mul mul24 multimem nanosleep neg not or pmevent popc prefetch prefetchu prmt rcp red redux rem
    ret rsqrt sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore stacksave stmatrix
    sub subc suld suq sured sust szext tanh testp tex tld4 trap txq vabsdiff vabsdiff2 vabsdiff4 vadd vadd2
    vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote vset vset2 vset4 vshl vshr vsub vsub2
    vsub4 wgmma wmma xor alloca tcgen05 clusterlaunchcontrol tensormap
    """.split()
)

SPACES = ("global", "shared", "local", "param", "const")

CLASSES = (
    "integer", "fp16", "fp32", "fp64", "fma", "special", "convert",
    *(f"load.{s}" for s in (*SPACES, "generic")),
    *(f"store.{s}" for s in (*SPACES, "generic")),
    "atomic", "barrier", "warp", "tensor", "control", "other",
)

BYTES_KEYS = (
    *(f"load.{s}" for s in (*SPACES, "generic")),
    *(f"store.{s}" for s in (*SPACES, "generic")),
    *(f"atomic.{s}" for s in ("global", "shared", "generic")),
)

_SPECIAL = {"sin", "cos", "ex2", "lg2", "rsqrt", "rcp", "sqrt", "tanh"}
_CONTROL = {"bra", "brx", "call", "ret", "exit", "trap", "brkpt"}
_BARRIER = {"bar", "barrier", "membar", "fence", "mbarrier", "griddepcontrol"}
_WARP = {"shfl", "vote", "match", "redux", "activemask", "elect"}
_TENSOR = {"mma", "wgmma", "tcgen05"}
_CONVERT = {"cvt", "cvta"}
_OTHER = {"createpolicy", "txq", "suq", "istypep"}  # createpolicy: an opaque L2 cache-policy value for later
# loads' cache_hint operand; txq/suq/istypep: queries of texture/surface object attributes
_ATOMIC = {"atom", "red"}
_TEXTURE = {"tex": "load.global", "tld4": "load.global", "suld": "load.global", "sust": "store.global",
            "sured": "atomic"}
_TYPE_RE = re.compile(r"^(?:[subf]\d+|bf16|bf16x2|f16x2|pred|tf32|e4m3|e5m2|e4m3x2|e5m2x2)$")


def _space(mods: tuple[str, ...]) -> str:
    for m in mods:
        if m in SPACES:
            return m
        if m == "shared::cta" or m == "shared::cluster":
            return "shared"
    return "generic"


def value_types(mods: tuple[str, ...]) -> list[str]:
    """Type modifiers of an opcode in order, e.g. ('rn','f32','s32') -> ['f32', 's32']."""
    return [m for m in mods if _TYPE_RE.match(m)]


def access_bytes(opcode: str) -> int:
    """Bytes moved by one thread for a load/store/atomic opcode (vector width x element size)."""
    mods = opcode.split(".")[1:]
    vec = 1
    for m in mods:
        if m in ("v2", "v4", "v8"):
            vec = int(m[1:])
    tys = value_types(tuple(mods))
    if not tys:
        return 0
    t = tys[-1]
    if t in ("f16x2", "bf16x2"):
        size = 4
    elif t in ("pred",):
        size = 1
    else:
        m = re.search(r"(\d+)", t)
        size = int(m.group(1)) // 8 if m else 4
        size = max(size, 1)
    return vec * size


def classify(opcode: str) -> tuple[str, str | None]:
    """(class, bytes key or None) of one opcode; bytes key like 'load.global' for memory instructions."""
    parts = opcode.split(".")
    base, mods = parts[0], tuple(parts[1:])
    if base in ("ld", "ldu", "ldmatrix"):
        key = f"load.{_space(mods)}"
        return key, key
    if base in ("st", "stmatrix"):
        key = f"store.{_space(mods)}"
        return key, key
    if base == "cp" and mods[:1] == ("async",):
        return "load.global", None
    if base in _TEXTURE:
        # Texture fetches and surface accesses read/write CUDA arrays in global memory (through the texture path):
        # counted as global loads/stores, surface reductions as atomics, so the classes stay those of ld/st. Bytes
        # only for the unformatted surface forms (.b: the instruction's type is the element's); a texel's size is
        # set by the texture object's format, which the PTX does not show.
        klass = _TEXTURE[base]
        key = "atomic.global" if klass == "atomic" else klass
        return klass, key if base[0] == "s" and mods[:1] == ("b",) else None  # not tld4.b (the blue component)
    if base == "wmma":
        if mods[:1] == ("load",):
            key = f"load.{_space(mods)}"
            return key, None
        if mods[:1] == ("store",):
            key = f"store.{_space(mods)}"
            return key, None
        return "tensor", None
    if base in _ATOMIC:
        return "atomic", f"atomic.{_space(mods)}"
    if base in _CONTROL:
        return "control", None
    if base in _BARRIER:
        return "barrier", None
    if base in _WARP:
        return "warp", None
    if base in _TENSOR:
        return "tensor", None
    if base in _CONVERT:
        return "convert", None
    if base in _OTHER:
        return "other", None
    if base in ("fma", "mad", "mad24", "madc"):
        return "fma", None
    tys = value_types(mods)
    ftys = [t for t in tys if t.startswith("f") or t.startswith("bf")]
    if base in _SPECIAL:
        return "special", None
    if base == "div" and ftys:
        return "special", None
    if ftys:
        t = ftys[0]
        if t.startswith("bf16") or t.startswith("f16"):
            return "fp16", None
        if t == "f64":
            return "fp64", None
        return "fp32", None
    if tys or base in ("not", "and", "or", "xor", "shl", "shr", "mov", "selp", "setp", "popc", "clz",
                       "brev", "bfe", "bfi", "prmt", "lop3", "shf", "add", "sub", "mul", "min", "max",
                       "abs", "neg", "rem", "div", "sad", "cnot", "bfind", "dp4a", "dp2a", "szext", "bmsk"):
        return "integer", None
    return "other", None
