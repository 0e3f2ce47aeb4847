"""The parsed form of PTX: operands, instructions, functions, variables, modules; and PtxSyntaxError.

parser.py builds these from text; cfg.py, the analyzer and the interpreter only read them, so they
depend on this module, not on the parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class PtxSyntaxError(ValueError):
    """Malformed or unsupported PTX, with the 1-based line number and the text of that line."""

    def __init__(self, line_no: int, line_text: str, message: str, source: str = "<string>"):
        self.line_no = line_no
        self.line_text = line_text
        self.message = message
        self.source = source
        super().__init__(f"{source}:{line_no}: {message}: {line_text.strip()!r}")


# ----------------------------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class Reg:
    name: str  # '%r1', '%tid.x', '%p2'; special registers keep their dotted name


@dataclass(frozen=True)
class Imm:
    value: int


@dataclass(frozen=True)
class FImm:
    value: float
    double: bool


@dataclass(frozen=True)
class Sym:
    name: str  # label, variable, function or parameter name


@dataclass(frozen=True)
class Addr:
    base: Reg | Sym | Imm | None
    offset: int


@dataclass(frozen=True)
class TexAddr:
    """`[handle, {coords}]` or `[handle, sampler, {coords}]`: the memory operand of tex, tld4, suld, sust, sured
    (and of the .tensor bulk copies, whose handle is a tensor map). The handle and sampler are a register
    (.b64 object handle) or a .texref/.surfref/.samplerref variable; the coordinates a vector or one register."""

    handle: Reg | Sym
    sampler: Reg | Sym | None
    coords: Vec | Reg


@dataclass(frozen=True)
class Vec:
    items: tuple


@dataclass(frozen=True)
class Pair:
    """`%r10|%p2`: a value and a predicate written by one instruction (shfl.sync, setp with two outputs, elect.sync,
    a sparse texture fetch `{%f1, %f2, %f3, %f4}|%p1`). Either half may be a sink `_` (`_|%p1`), not both."""

    first: Reg | Sink | Vec
    second: Reg | Sink


@dataclass(frozen=True)
class Sink:
    """`_` operand: result discarded."""


@dataclass(frozen=True)
class ArgList:
    """Parenthesised operand list of `call`: (retval0) or (param0, param1)."""

    items: tuple


Operand = Reg | Imm | FImm | Sym | Addr | TexAddr | Vec | Pair | Sink | ArgList


# ------------------------------------------------------------------------------------- program structure
@dataclass
class Instruction:
    opcode: str  # full dotted opcode, e.g. 'ld.global.nc.v4.f32'
    operands: tuple
    line: int
    text: str
    pred: str | None = None  # guard predicate register
    pred_neg: bool = False

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def mods(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])


@dataclass
class Variable:
    name: str
    space: str  # global, shared, const, local, param
    vtype: str
    size: int  # bytes (0 for extern/unsized)
    align: int = 0
    init: tuple = ()


@dataclass
class Function:
    """A .entry (kernel) or .func. Body items: Instruction or label str, in program order."""

    name: str
    is_entry: bool
    params: list[tuple[str, str]]  # (name, ptx type) in order
    returns: list[tuple[str, str]]
    body: list = field(default_factory=list)  # Instruction | str (label)
    regs: dict[str, str] = field(default_factory=dict)  # register name -> type
    reg_ranges: dict[str, tuple[int, str]] = field(default_factory=dict)  # '%r' -> (count, type) of %r<N>
    local_vars: dict[str, Variable] = field(default_factory=dict)
    # `name: .callprototype ...` declarations (the signature of an indirect `call ..., %rd, (...), name`): name ->
    # the declaration's text after `.callprototype`; recorded only, cfg.py does not inline indirect calls
    prototypes: dict[str, str] = field(default_factory=dict)
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)  # .reqntid, .maxntid, ...
    line: int = 0
    defined: bool = True

    @property
    def instructions(self) -> list[Instruction]:
        return [x for x in self.body if isinstance(x, Instruction)]


Kernel = Function


@dataclass
class PtxModule:
    version: str = ""
    target: tuple[str, ...] = ()
    address_size: int = 64
    functions: dict[str, Function] = field(default_factory=dict)
    variables: dict[str, Variable] = field(default_factory=dict)
    pragmas: list[str] = field(default_factory=list)
    source: str = "<string>"

    @property
    def kernels(self) -> dict[str, Function]:
        return {n: f for n, f in self.functions.items() if f.is_entry and f.defined}
