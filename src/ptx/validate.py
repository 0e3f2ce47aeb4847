"""Static checks of a parsed PTX module: what the grammar accepts but PTX does not.

parse_ptx runs validate_module on every module it builds, so both engines (the analyzer and the interpreter)
only ever see instructions with the operands they index, and a misspelt register, parameter or special
register is a line-numbered PtxSyntaxError instead of a value "not known from the launch":

* operand counts per opcode family (_OPERANDS; opcodes with many forms, e.g. mma, wmma, cp, tex, are not
  counted) and a register (or register vector, pair, `_`) as the destination of value-producing opcodes;
* type modifiers: a modifier shaped like a type (`.f99`, `.s7`) must be a PTX type, and the opcodes whose
  meaning depends on a type must have one (`setp.ge` alone is rejected);
* setp/set: exactly one known comparison operator, no unknown modifier;
* registers: every `%name` is declared by a `.reg` of its function (the `%r<N>` form declares %r0..%r(N-1)),
  is a register parameter of the function, or is a special register (`%tid.x`, `%laneid`, ...); special
  registers are read-only; guard predicates and setp destinations are declared `.pred` registers;
* symbols used as data (`[name+8]`, `mov.u64 %rd1, name`) are parameters, variables or functions in scope;
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
    Vec,
)
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
    "nanosleep": (1, 1),
}
# Families of _OPERANDS that write no register (all others write their first operand).
_NO_DEST = frozenset({"st", "red", "bra", "ret", "exit", "trap", "brkpt", "bar", "barrier", "membar", "prefetch",
                      "prefetchu", "nanosleep"})
# Opcodes whose meaning depends on a type modifier (a PTX assembler rejects them without one).
_NEEDS_TYPE = frozenset(
    "abs neg not cnot popc clz brev bfind sqrt rsqrt rcp sin cos lg2 ex2 tanh mov cvta testp ldu add sub mul div "
    "rem and or xor shl shr mul24 addc subc copysign bmsk szext mad fma mad24 madc sad bfe prmt shf dp4a dp2a "
    "selp slct fns min max bfi lop3 setp set cvt ld st atom red shfl vote activemask".split())
# The memory operand of loads, stores and atomics (index into the operands) must be an address `[...]`.
_ADDRESS_AT = {"ld": 1, "ldu": 1, "st": 0, "atom": 1, "red": 0}
_SETP_MODS = CMP_OPS | {"and", "or", "xor", "ftz"}

# `.b1`..`.f64`: a modifier of this shape is a type; these are the widths PTX has for each letter.
_TYPE_SHAPE = re.compile(r"([bsuf])(\d+)")
_TYPE_WIDTHS = {"b": {1, 8, 16, 32, 64, 128}, "s": {4, 8, 16, 32, 64}, "u": {4, 8, 16, 32, 64}, "f": {16, 32, 64}}
_HAS_TYPE = re.compile(r"[bsuf]\d+(?:x\d+)?|bf16(?:x2)?|pred|tf32|u?e\dm\d(?:x\d+)?")

_SPECIAL_VECTORS = frozenset({"%tid", "%ntid", "%ctaid", "%nctaid", "%clusterid", "%nclusterid", "%cluster_ctaid",
                              "%cluster_nctaid"})
_SPECIAL_SCALAR = re.compile(
    r"%(?:laneid|warpid|nwarpid|smid|nsmid|gridid|lanemask_(?:eq|le|lt|ge|gt)|clock|clock_hi|clock64|pm[0-7]"
    r"|pm[0-7]_64|envreg(?:[0-9]|[12][0-9]|3[01])|globaltimer|globaltimer_lo|globaltimer_hi|total_smem_size"
    r"|aggr_smem_size|dynamic_smem_size|reserved_smem_offset_(?:begin|end|cap|[01])|current_graph_exec"
    r"|is_explicit_cluster|cluster_ctarank|cluster_nctarank)")
_INDEXED = re.compile(r"(.*?)(0|[1-9][0-9]*)")  # %r12 -> ('%r', '12'); leading zeros are not in %r<N>
_IMM_MIN, _IMM_MAX = -(1 << 63), (1 << 64) - 1


def is_special_register(name: str) -> bool:
    """A predefined read-only register: %tid, %tid.x .. %tid.z (and the other vectors), %laneid, %clock, ..."""
    if name in _SPECIAL_VECTORS:
        return True
    base, dot, comp = name.partition(".")
    if dot:
        return base in _SPECIAL_VECTORS and comp in ("x", "y", "z")
    return _SPECIAL_SCALAR.fullmatch(name) is not None


class _FunctionChecker:
    def __init__(self, fn: Function, module: PtxModule, lines: list[str], extra_names: set[str]):
        self.fn = fn
        self.module = module
        self.lines = lines
        self.regs = dict(fn.regs)
        for pname, ptype in (*fn.params, *fn.returns):
            if pname.startswith("%"):
                self.regs[pname] = ptype
        self.known_regs: set[str] = set()  # checked already (speed: most registers are read many times)
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
        if self.reg_type(name) is not None:
            self.known_regs.add(name)
            return
        if is_special_register(name):
            if dest:
                raise self.error(ins, f"special register {name} is read-only")
            return
        if "." in name:
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
        if t != ".pred":
            raise self.error(ins, f"{what} {name} is not a predicate register "
                                  f"({'declared ' + t if t else 'a special register'})")

    def check_operand(self, ins: Instruction, op, dest: bool = False) -> None:
        if isinstance(op, Reg):
            self.check_reg(ins, op.name, dest)
        elif isinstance(op, Pair):
            self.check_reg(ins, op.first.name, dest)
            self.check_reg(ins, op.second.name, dest)
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
        if base in ("setp", "set"):
            cmps = [m for m in mods if m in CMP_OPS]
            bad = [m for m in mods if m not in _SETP_MODS and not _HAS_TYPE.fullmatch(m)]
            if bad:
                raise self.error(ins, f"unknown comparison operator or modifier .{bad[0]} of {base}")
            if len(cmps) != 1:
                raise self.error(ins, f"{base} needs one comparison operator (.eq, .lt, ...), found "
                                      f"{len(cmps)}")

    def check(self, ins: Instruction) -> None:
        base, ops = ins.base, ins.operands
        if ins.opcode not in self.good_opcodes:
            self.check_opcode(ins)
            self.good_opcodes.add(ins.opcode)
        counts = _OPERANDS.get(base)
        if counts is not None:
            lo, hi = counts
            if not lo <= len(ops) <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise self.error(ins, f"{base} takes {want} operands, found {len(ops)}")
            if base not in _NO_DEST and ops and not isinstance(ops[0], Reg | Pair | Vec | Sink) and not (
                    isinstance(ops[0], Sym) and ops[0].name in self.regs):  # registers may be named without %
                raise self.error(ins, f"the destination of {base} must be a register")
            at = _ADDRESS_AT.get(base)
            if at is not None and not isinstance(ops[at], Addr):
                raise self.error(ins, f"operand {at + 1} of {base} must be an address [...]")
        if ins.pred is not None:
            self.check_pred(ins, ins.pred, "guard")
        if base in ("bra", "brx", "call"):  # labels and callees are checked by the parser and cfg.py
            for op in ops:
                for x in op.items if isinstance(op, ArgList) else (op,):
                    if not isinstance(x, Sym):
                        self.check_operand(ins, x)
            return
        for k, op in enumerate(ops):
            is_dest = k == 0 and counts is not None and base not in _NO_DEST
            self.check_operand(ins, op, dest=is_dest)
        if base == "setp":
            first = ops[0]
            for r in (first.first, first.second) if isinstance(first, Pair) else (first,):
                if isinstance(r, Reg):
                    self.check_pred(ins, r.name, "setp destination")


def validate_module(module: PtxModule, lines: list[str], extra_names: set[str] | None = None) -> None:
    """Raise PtxSyntaxError (file and line) for the first instruction PTX does not allow; see the module doc.

    lines: the PTX text's lines (quoted in errors); extra_names: further declared names in scope everywhere
    (the second and later names of multi-name variable declarations, which the module does not keep)."""
    for fn in module.functions.values():
        if not fn.defined:
            continue
        checker = _FunctionChecker(fn, module, lines, extra_names or set())
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
