"""Static checks of a parsed PTX module: what the grammar accepts but PTX does not.

parse_ptx runs validate_module on every module it builds, so both engines (the analyzer and the interpreter)
only ever see instructions with the operands they index, and a misspelt register, parameter or special
register is a line-numbered PtxSyntaxError instead of a value "not known from the launch":

* operand counts per opcode family (_OPERANDS) and a register (or register vector, pair, `_`) as the
  destination of value-producing opcodes; for opcodes with many forms the count and the operand shapes (a
  vector `{...}`, an address `[...]`) of the form the modifiers select (validate_forms.form_of): mma, mma.sp
  (also .block_scale), wmma.load/store/mma, ldmatrix/stmatrix (with the vector's length), cp.async,
  cp.async.bulk (not .tensor), cp.async.bulk.prefetch (not .tensor), cp.reduce.async.bulk (not .tensor), the
  cp.async/cp.async.bulk groups, mbarrier.*, wgmma.*, txq. Not counted: tex, tld4, suld, sust, sured (but their
  `[handle, {coords}]` operand, a TexAddr, must be at its place and appears nowhere else), the .tensor bulk copies
  (same operand), tcgen05, multimem, tensormap, clusterlaunchcontrol, fence, the video instructions (vadd, vset,
  ...), and the vector lengths of mma/wmma/wgmma fragments (a table per shape and type); elect and istypep write a
  predicate (`d|p` or `_|p` for elect), shfl's value cannot be discarded (`_|p`);
* destination types (validate_forms.fits): a register declared too narrow, too wide or of the wrong kind for
  the instruction type (`add.f64 %f1` with %f1 .f32, `ld.global.u64` into a .b32, a .pred destination of add),
  after the PTX ISA's type-checking rules, which let ld, ldu and cvt write wider registers; a `d|p` pair's
  second register is a .pred. Only opcodes whose destination type is certain are checked (validate_forms.
  dest_type: not mma, tex, mov/atom with vector destinations, cvt with newer formats, ...); a register
  declared with different types in different scopes or functions, a vector register (`.reg .v4`) and a .f16x2
  register are never rejected;
* type modifiers: a modifier shaped like a type (`.f99`, `.s7`) must be a PTX type, and the opcodes whose
  meaning depends on a type must have one (`setp.ge` alone is rejected);
* setp/set: exactly one known comparison operator, no unknown modifier;
* registers: every `%name` is declared by a `.reg` of its function (the `%r<N>` form declares %r0..%r(N-1)),
  is a register parameter of the function, or is a special register (`%tid.x`, `%laneid`, `%tid.w`, ...); special
  registers are read-only; guard predicates and setp destinations are declared `.pred` registers;
* symbols used as data (`[name+8]`, `mov.u64 %rd1, name`) are parameters, variables or functions in scope; an
  indirect call (through a register) names a `.callprototype`/`.calltargets` label of its function;
* integer immediates fit in 64 bits.

Duplicate `.reg` declarations in one scope are rejected by the parser itself (it knows the scopes).
"""

from __future__ import annotations

import re

from src.ptx.syntax import (
    Addr,
    ArgList,
    Function,
    Imm,
    Instruction,
    Pair,
    PtxModule,
    PtxSyntaxError,
    Reg,
    Sink,
    Sym,
    TexAddr,
    Vec,
)
from src.ptx.validate_forms import Form, dest_type, fits, form_of
from src.ptx.values import CMP_OPS

# (fewest, most) operands per opcode family; a `%r|%p` pair, a `{...}` vector and a `[...]` address are one each.
_OPERANDS: dict[str, tuple[int, int]] = {
    **{op: (2, 2) for op in "abs neg not cnot popc clz brev bfind sqrt rsqrt rcp sin cos lg2 ex2 tanh mov cvta "
                            "testp ldu isspacep elect".split()},
    **{op: (3, 3) for op in "add sub mul div rem and or xor shl shr mul24 addc subc copysign bmsk szext "
                            "match redux".split()},
    **{op: (4, 4) for op in "mad fma mad24 madc sad bfe prmt shf dp4a dp2a selp slct fns".split()},
    "min": (3, 4), "max": (3, 4),  # three-input min/max (sm_100)
    "bfi": (5, 5), "lop3": (5, 6),  # lop3.or.b32 d|p, a, b, c, lut, q
    "setp": (3, 4), "set": (3, 4),  # with a boolean op: a fourth (predicate) source
    "cvt": (2, 4),  # cvt.rn.f16x2.f32 d, a, b; cvt.pack.sat... d, a, b, c
    "ld": (2, 3), "st": (2, 3),  # + a cache-policy operand (L2::cache_hint); st.async's mbarrier
    "atom": (3, 5), "red": (2, 4),  # atom.cas has two sources; + cache policy
    "shfl": (4, 5), "vote": (2, 3), "activemask": (1, 1), "createpolicy": (1, 4),
    "bra": (1, 1), "ret": (0, 0), "exit": (0, 0), "trap": (0, 0), "brkpt": (0, 0),
    "bar": (0, 4), "barrier": (0, 4), "membar": (0, 0), "prefetch": (1, 1), "prefetchu": (1, 1),
    "nanosleep": (1, 1), "movmatrix": (2, 2), "getctarank": (2, 2), "mapa": (3, 3), "discard": (2, 2),
    "applypriority": (2, 2), "griddepcontrol": (0, 0), "setmaxnreg": (1, 1), "stacksave": (1, 1),
    "stackrestore": (1, 1), "suq": (2, 2), "alloca": (2, 3), "pmevent": (1, 1), "istypep": (2, 2),
}
# Families of _OPERANDS that write no register (all others write their first operand).
_NO_DEST = frozenset({"st", "red", "bra", "ret", "exit", "trap", "brkpt", "bar", "barrier", "membar", "prefetch",
                      "prefetchu", "nanosleep", "discard", "applypriority", "griddepcontrol", "setmaxnreg",
                      "stackrestore", "pmevent"})
# Opcodes whose meaning depends on a type modifier (a PTX assembler rejects them without one).
_NEEDS_TYPE = frozenset(
    "abs neg not cnot popc clz brev bfind sqrt rsqrt rcp sin cos lg2 ex2 tanh mov cvta testp ldu add sub mul div "
    "rem and or xor shl shr mul24 addc subc copysign bmsk szext mad fma mad24 madc sad bfe prmt shf dp4a dp2a "
    "selp slct fns min max bfi lop3 setp set cvt ld st atom red shfl vote activemask".split())
# The memory operand of loads, stores and atomics (index into the operands) must be an address `[...]`.
_ADDRESS_AT = {"ld": 1, "ldu": 1, "st": 0, "atom": 1, "red": 0, "discard": 0, "applypriority": 0, "suq": 1}
# The `[handle, {coords}]` operand of texture and surface instructions (ptxas: "Arguments mismatch" without it).
_TEX_ADDRESS_AT = {"tex": 1, "tld4": 1, "suld": 1, "sust": 0, "sured": 0}
_SETP_MODS = CMP_OPS | {"and", "or", "xor", "ftz"}

# `.b1`..`.f64`: a modifier of this shape is a type; these are the widths PTX has for each letter.
_TYPE_SHAPE = re.compile(r"([bsuf])(\d+)")
_TYPE_WIDTHS = {"b": {1, 8, 16, 32, 64, 128}, "s": {4, 8, 16, 32, 64}, "u": {4, 8, 16, 32, 64}, "f": {16, 32, 64}}
# Opcodes that name a destination type and a source type (cvt.s32.f32, set.eq.u32.f32, slct.u32.s32).
_TWO_TYPES = frozenset({"cvt", "set", "slct"})
_HAS_TYPE = re.compile(r"[bsuf]\d+(?:x\d+)?|bf16(?:x2)?|pred|tf32|u?e\dm\d(?:x\d+)?")

_SPECIAL_VECTORS = frozenset({"%tid", "%ntid", "%ctaid", "%nctaid", "%clusterid", "%nclusterid", "%cluster_ctaid",
                              "%cluster_nctaid"})
# Vectors whose fourth component `.w` the PTX ISA defines ("unused and always returns zero"; both engines read 0).
# ptxas also takes .w of the cluster vectors, which neither engine models: rejected.
_ZERO_W = frozenset({"%tid", "%ntid", "%ctaid", "%nctaid"})
_SPECIAL_SCALAR = re.compile(
    r"%(?:laneid|warpid|nwarpid|smid|nsmid|gridid|lanemask_(?:eq|le|lt|ge|gt)|clock|clock_hi|clock64|pm[0-7]"
    r"|pm[0-7]_64|envreg(?:[0-9]|[12][0-9]|3[01])|globaltimer|globaltimer_lo|globaltimer_hi|total_smem_size"
    r"|aggr_smem_size|dynamic_smem_size|reserved_smem_offset_(?:begin|end|cap|[01])|current_graph_exec"
    r"|is_explicit_cluster|cluster_ctarank|cluster_nctarank)")
_INDEXED = re.compile(r"(.*?)(0|[1-9][0-9]*)")  # %r12 -> ('%r', '12'); leading zeros are not in %r<N>
_IMM_MIN, _IMM_MAX = -(1 << 63), (1 << 64) - 1
# `.reg .v4 .f32 %v, %w<4>;` (also inside inline-asm scopes): the names, types and vector-ness of every .reg
_REG_DECL = re.compile(r"\.reg((?:\s*\.\w+)+)\s+([%\w$]+(?:\s*<\s*\d+\s*>)?(?:\s*,\s*[%\w$]+(?:\s*<\s*\d+\s*>)?)*)\s*;")
_DECL_NAME = re.compile(r"([%\w$]+)(?:\s*<\s*(\d+)\s*>)?")


class RegDecls:
    """Every `.reg` declaration of a module's text, for the destination type check: the parser keeps one type
    per name (the last), so a name declared with two types (in nested scopes, or in two functions) is not
    type-checked, nor is a vector register (the parser drops `.v4`)."""

    def __init__(self, lines: list[str]):
        self.plain: dict[str, set[str]] = {}  # name -> declared types
        self.ranges: dict[str, dict[str, int]] = {}  # '%r' -> {type: the largest N of a %r<N> of that type}
        self.vectors: set[str] = set()  # names and range prefixes declared .v2/.v4
        self.only_cache: dict[tuple[str, str], bool] = {}
        for m in _REG_DECL.finditer("\n".join(x for x in lines if ".reg" in x)):
            mods = m.group(1).split()
            rtype = next((x for x in reversed(mods) if x not in (".v2", ".v4", ".v8")), "")
            for n in _DECL_NAME.finditer(m.group(2)):
                if any(x in (".v2", ".v4", ".v8") for x in mods):
                    self.vectors.add(n.group(1))
                if n.group(2) is None:
                    self.plain.setdefault(n.group(1), set()).add(rtype)
                else:
                    by_type = self.ranges.setdefault(n.group(1), {})
                    by_type[rtype] = max(by_type.get(rtype, 0), int(n.group(2)))

    def is_vector(self, name: str) -> bool:
        m = _INDEXED.fullmatch(name)
        return name in self.vectors or (m is not None and m.group(1) in self.vectors)

    def types(self, name: str) -> set[str]:
        """The types `name` is declared with anywhere in the module."""
        types = set(self.plain.get(name, ()))
        m = _INDEXED.fullmatch(name)
        if m is not None:
            k = int(m.group(2))
            types.update(t for t, n in self.ranges.get(m.group(1), {}).items() if k < n)
        return types

    def only(self, name: str, rtype: str) -> bool:
        """Whether every declaration of `name` in the module has type `rtype` and none is a vector."""
        ok = self.only_cache.get((name, rtype))
        if ok is None:
            ok = self.only_cache[name, rtype] = self.types(name) <= {rtype} and not self.is_vector(name)
        return ok


def _count(lo: int, hi: int) -> str:
    return ("1 operand" if lo == 1 else f"{lo} operands") if lo == hi else f"{lo} to {hi} operands"


def is_special_register(name: str) -> bool:
    """A predefined read-only register: %tid, %tid.x .. %tid.z (and the other vectors; %tid.w .. %nctaid.w, which
    read 0), %laneid, %clock, ..."""
    if name in _SPECIAL_VECTORS:
        return True
    base, dot, comp = name.partition(".")
    if dot:
        return base in _SPECIAL_VECTORS and (comp in ("x", "y", "z") or comp == "w" and base in _ZERO_W)
    return _SPECIAL_SCALAR.fullmatch(name) is not None


class _FunctionChecker:
    def __init__(self, fn: Function, module: PtxModule, lines: list[str], extra_names: set[str], decls: RegDecls):
        self.fn = fn
        self.decls = decls
        self.dest_types: dict[str, tuple[str, bool] | None] = {}  # opcode -> dest_type (speed)
        self.certain_types: dict[str, str | None] = {}  # register -> its one declared type (speed)
        self.module = module
        self.lines = lines
        self.regs = dict(fn.regs)
        for pname, ptype in (*fn.params, *fn.returns):
            if pname.startswith("%"):
                self.regs[pname] = ptype
        self.known_regs: dict[str, str] = {}  # checked already -> type (speed: registers are read many times)
        self.good_opcodes: set[str] = set()
        self.symbols = ({p for p, _ in (*fn.params, *fn.returns)} | set(fn.local_vars) | set(fn.regs)
                        | set(module.variables) | set(module.functions) | extra_names | {"WARP_SZ"})

    def error(self, ins: Instruction, message: str) -> PtxSyntaxError:
        text = self.lines[ins.line - 1] if 0 < ins.line <= len(self.lines) else ins.text
        return PtxSyntaxError(ins.line, text, message, self.module.source)

    # -- registers
    def reg_type(self, name: str) -> str | None:
        """The declared type of a register of this function ('.b32', '.pred'), None if not declared."""
        t = self.regs.get(name)
        if t is not None:
            return t
        m = _INDEXED.fullmatch(name)
        if m is not None:
            rng = self.fn.reg_ranges.get(m.group(1))
            if rng is not None and int(m.group(2)) < rng[0]:
                return rng[1]
        return None

    def check_reg(self, ins: Instruction, name: str, dest: bool = False) -> None:
        if name in self.known_regs:
            return
        name = name.lstrip("!")
        t = self.reg_type(name)
        if t is not None:
            self.known_regs[name] = t
            return
        if is_special_register(name):
            if dest:
                raise self.error(ins, f"special register {name} is read-only")
            return
        if "." in name:
            base, _, comp = name.partition(".")
            if comp in ("x", "y", "z", "w", "r", "g", "b", "a") and self.decls.is_vector(base) \
                    and self.reg_type(base) is not None:  # a component of a vector register
                return
            raise self.error(ins, f"unknown special register {name}")
        m = _INDEXED.fullmatch(name)
        rng = self.fn.reg_ranges.get(m.group(1)) if m is not None else None
        if rng is not None:
            raise self.error(ins, f"register {name} is outside its declaration {m.group(1)}<{rng[0]}> "
                                  f"({m.group(1)}0..{m.group(1)}{rng[0] - 1})")
        raise self.error(ins, f"undeclared register {name}")

    def check_pred(self, ins: Instruction, name: str, what: str) -> None:
        self.check_reg(ins, name)
        t = self.reg_type(name.lstrip("!"))
        # the parser keeps one type per name: `p` declared .pred in one inline-asm scope and .b16 in another is taken
        if t != ".pred" and ".pred" not in self.decls.types(name.lstrip("!")):
            raise self.error(ins, f"{what} {name} is not a predicate register "
                                  f"({'declared ' + t if t else 'a special register'})")

    def check_operand(self, ins: Instruction, op, dest: bool = False) -> None:
        if isinstance(op, Reg):
            self.check_reg(ins, op.name, dest)
        elif isinstance(op, Pair):
            self.check_operand(ins, op.first, dest)
            self.check_operand(ins, op.second, dest)
        elif isinstance(op, TexAddr):
            self.check_tex_address(ins, op)
        elif isinstance(op, Vec | ArgList):
            for x in op.items:
                self.check_operand(ins, x, dest)
        elif isinstance(op, Addr):
            if isinstance(op.base, Reg):
                self.check_reg(ins, op.base.name)
            elif isinstance(op.base, Sym):
                self.check_symbol(ins, op.base.name)
            elif isinstance(op.base, Imm):
                self.check_imm(ins, op.base.value)
        elif isinstance(op, Sym):
            self.check_symbol(ins, op.name)
        elif isinstance(op, Imm):
            self.check_imm(ins, op.value)

    def check_symbol(self, ins: Instruction, name: str) -> None:
        if name not in self.symbols:
            raise self.error(ins, f"unknown parameter or variable {name!r} (not declared in {self.fn.name!r} "
                                  "or the module)")

    def check_imm(self, ins: Instruction, v: int) -> None:
        if not _IMM_MIN <= v <= _IMM_MAX:
            raise self.error(ins, f"integer constant {v} does not fit in 64 bits")

    # -- instructions
    def check_opcode(self, ins: Instruction) -> None:
        """The opcode's modifiers: types, and setp/set's comparison (depends on the opcode text only)."""
        base, mods = ins.base, ins.mods
        for m in mods:
            tm = _TYPE_SHAPE.fullmatch(m)
            if tm is not None and int(tm.group(2)) not in _TYPE_WIDTHS[tm.group(1)]:
                raise self.error(ins, f"unknown type .{m}")
        if base in _NEEDS_TYPE and not any(_HAS_TYPE.fullmatch(m) for m in mods):
            raise self.error(ins, f"{ins.opcode} needs a type (.s32, .f32, ...)")
        if base in _TWO_TYPES and sum(1 for m in mods if _HAS_TYPE.fullmatch(m)) < 2:
            # ptxas: "Unexpected instruction types specified for 'cvt'"; the engines index both types
            raise self.error(ins, f"{ins.opcode} needs a destination and a source type (e.g. {base}.s32.f32)")
        if base in ("setp", "set"):
            cmps = [m for m in mods if m in CMP_OPS]
            bad = [m for m in mods if m not in _SETP_MODS and not _HAS_TYPE.fullmatch(m)]
            if bad:
                raise self.error(ins, f"unknown comparison operator or modifier .{bad[0]} of {base}")
            if len(cmps) != 1:
                raise self.error(ins, f"{base} needs one comparison operator (.eq, .lt, ...), found "
                                      f"{len(cmps)}")

    def check_dest_register(self, ins: Instruction, name: str) -> None:
        d = ins.operands[0] if ins.operands else None
        if d is not None and not isinstance(d, Reg | Pair | Vec | Sink) and not (
                isinstance(d, Sym) and d.name in self.regs):  # registers may be named without %
            raise self.error(ins, f"the destination of {name} must be a register")

    def is_vector_reg(self, op) -> bool:
        """A register declared `.reg .v2/.v4 ...`: it stands for a vector (the parser keeps its element type)."""
        return isinstance(op, Reg | Sym) and self.reg_type(op.name) is not None and self.decls.is_vector(op.name)

    def check_form(self, ins: Instruction, form: Form) -> None:
        ops = ins.operands
        if not form.lo <= len(ops) <= form.hi:
            raise self.error(ins, f"{form.name} takes {_count(form.lo, form.hi)}, found {len(ops)}")
        if form.dest:
            self.check_dest_register(ins, form.name)
        for k in form.addr:
            if not isinstance(ops[k], Addr):
                raise self.error(ins, f"operand {k + 1} of {form.name} must be an address [...]")
        for k in form.vec:
            if not isinstance(ops[k], Vec) and not self.is_vector_reg(ops[k]):
                raise self.error(ins, f"operand {k + 1} of {form.name} must be a vector {{...}}")
        if form.vec_len and isinstance(ops[form.vec[0]], Vec) and len(ops[form.vec[0]].items) != form.vec_len:
            raise self.error(ins, f"operand {form.vec[0] + 1} of {ins.opcode} must be a vector of "
                                  f"{form.vec_len} registers, found {len(ops[form.vec[0]].items)}")

    def certain_type(self, name: str) -> str | None:
        """The type a register certainly has: declared once, or always with one type (not a vector)."""
        if name in self.certain_types:
            return self.certain_types[name]
        t = self.known_regs.get(name) or self.reg_type(name)
        t = self.certain_types[name] = t if t is not None and self.decls.only(name, t) else None
        return t

    def check_dest_type(self, ins: Instruction) -> None:
        """The destination register can take the instruction's result (validate_forms.fits)."""
        if ins.opcode not in self.dest_types:
            self.dest_types[ins.opcode] = dest_type(ins.base, ins.mods)
        dt = self.dest_types[ins.opcode]
        if dt is None or not ins.operands:
            return
        ins_type, relaxed = dt
        d = ins.operands[0]
        vector = isinstance(d, Vec)
        if vector and ins.base not in ("ld", "ldu"):  # mov unpacks, vector atomics: element types vary
            return
        for x in d.items if vector else (d.first,) if isinstance(d, Pair) else (d,):
            if not isinstance(x, Reg | Sym) or isinstance(x, Sym) and x.name not in self.regs:
                continue
            rt = self.certain_type(x.name)
            if rt is not None and not fits(rt, ins_type, relaxed, vector):
                raise self.error(ins, f"destination {x.name} is declared {rt}, which cannot take the .{ins_type} "
                                      f"result of {ins.opcode}")

    def check_tex_address(self, ins: Instruction, op: TexAddr) -> None:
        """A texture address `[handle, {...}]` only where the opcode takes one (its handle, sampler, coordinates)."""
        at = _TEX_ADDRESS_AT.get(ins.base)
        if ins.base != "cp" and (at is None or len(ins.operands) <= at or ins.operands[at] is not op):
            raise self.error(ins, "a texture address [handle, {coordinates}] is an operand of tex, tld4, suld, "
                                  "sust, sured and the .tensor copies only")
        for x in (op.handle, op.sampler):
            if isinstance(x, Reg):
                self.check_reg(ins, x.name)
            elif isinstance(x, Sym):
                self.check_symbol(ins, x.name)
        self.check_operand(ins, op.coords)

    def check_indirect_call(self, ins: Instruction) -> None:
        """`call (ret), %rd, (args), proto;`: the last operand is a `.callprototype`/`.calltargets` label of the
        function (ptxas: "Unknown symbol" otherwise)."""
        ops = ins.operands
        k = 1 if ops and isinstance(ops[0], ArgList) else 0
        if len(ops) > k and isinstance(ops[k], Reg):
            last = ops[-1]
            if not isinstance(last, Sym) or last.name not in self.fn.prototypes:
                raise self.error(ins, "an indirect call needs a .callprototype or .calltargets label of its "
                                      "function as its last operand")

    def check(self, ins: Instruction) -> None:
        base, ops = ins.base, ins.operands
        if ins.opcode not in self.good_opcodes:
            self.check_opcode(ins)
            self.good_opcodes.add(ins.opcode)
        counts = _OPERANDS.get(base)
        writes = counts is not None and base not in _NO_DEST
        if counts is not None:
            lo, hi = counts
            if not lo <= len(ops) <= hi:
                raise self.error(ins, f"{base} takes {_count(lo, hi)}, found {len(ops)}")
            if writes:
                self.check_dest_register(ins, base)
            at = _ADDRESS_AT.get(base)
            if at is not None and not isinstance(ops[at], Addr):
                raise self.error(ins, f"operand {at + 1} of {base} must be an address [...]")
            if base == "elect" and not (isinstance(ops[0], Pair) and isinstance(ops[0].second, Reg)):
                raise self.error(ins, "elect needs a predicate destination: d|p or _|p")  # ptxas: same
            if base == "shfl" and isinstance(ops[0], Pair) and isinstance(ops[0].first, Sink):
                raise self.error(ins, "the value of shfl cannot be discarded (_|p)")  # ptxas: same
            if base == "istypep" and isinstance(ops[0], Reg):
                self.check_pred(ins, ops[0].name, "the destination of istypep")
        else:
            form = form_of(base, ins.mods, ops)
            if form is not None:
                self.check_form(ins, form)
                writes = form.dest
        at = _TEX_ADDRESS_AT.get(base)
        if at is not None and (len(ops) <= at or not isinstance(ops[at], TexAddr)):
            raise self.error(ins, f"operand {at + 1} of {base} must be a texture or surface address "
                                  "[handle, {coordinates}]")
        if ins.pred is not None:
            self.check_pred(ins, ins.pred, "guard")
        if base == "call":
            self.check_indirect_call(ins)
        if base in ("bra", "brx", "call"):  # labels and callees are checked by the parser and cfg.py
            for op in ops:
                for x in op.items if isinstance(op, ArgList) else (op,):
                    if not isinstance(x, Sym):
                        self.check_operand(ins, x)
            return
        for k, op in enumerate(ops):
            self.check_operand(ins, op, dest=writes and k == 0)
        if not writes or not ops:
            return
        first = ops[0]
        if base == "setp":
            for r in (first.first, first.second) if isinstance(first, Pair) else (first,):
                if isinstance(r, Reg):
                    self.check_pred(ins, r.name, "setp destination")
        elif isinstance(first, Pair) and isinstance(first.second, Reg):  # shfl, lop3, elect, tex, ...: `d|p`
            self.check_pred(ins, first.second.name, f"the predicate destination of {base}")
        self.check_dest_type(ins)


def validate_module(module: PtxModule, lines: list[str], extra_names: set[str] | None = None) -> None:
    """Raise PtxSyntaxError (file and line) for the first instruction PTX does not allow; see the module doc.

    lines: the PTX text's lines (quoted in errors); extra_names: further declared names in scope everywhere
    (the second and later names of multi-name variable declarations, which the module does not keep)."""
    decls = RegDecls(lines)
    for fn in module.functions.values():
        if not fn.defined:
            continue
        checker = _FunctionChecker(fn, module, lines, extra_names or set(), decls)
        for x in fn.body:
            if isinstance(x, Instruction):
                checker.check(x)


class RegScopes:
    """The `.reg` names declared in each open `{ }` scope of a function body, for the parser's duplicate check.

    A name may be declared again in a nested scope (nvcc -G declares `temp_param_reg` in every call sequence),
    not twice in one scope; `%r<N>` declares %r0..%r(N-1)."""

    def __init__(self) -> None:
        self.stack: list[tuple[set[str], dict[str, int]]] = []

    def push(self) -> None:
        self.stack.append((set(), {}))

    def pop(self) -> None:
        self.stack.pop()

    def declare(self, name: str, count: int | None) -> str | None:
        """Record a declaration (count: that of `name<count>`, None for a plain name); the error message of a
        duplicate, else None."""
        names, ranges = self.stack[-1]
        if count is None:
            m = _INDEXED.fullmatch(name)
            if name in names or (m is not None and int(m.group(2)) < ranges.get(m.group(1), 0)):
                return f"register {name} declared twice in one scope"
            names.add(name)
            return None
        if name in ranges or any((m := _INDEXED.fullmatch(x)) is not None and m.group(1) == name
                                 and int(m.group(2)) < count for x in names):
            return f"register {name}<{count}> declared twice in one scope"
        ranges[name] = count
        return None
