"""PTX parser: text -> PtxModule (kernels, functions, variables, instructions with line numbers).

Covers what nvcc 11-13, LLVM NVPTX (XLA, Triton) and TVM-via-nvcc emit. Debug info (.loc, .file,
.section blocks) is skipped. Anything the grammar does not accept raises PtxSyntaxError with the line.
"""

from __future__ import annotations

import re
import struct

from src.ptx.isa import KNOWN_OPCODES
from src.ptx.lexer import BadLiteral, Tok, parse_int, strip_comments, tokenize
from src.ptx.operands import FAST_LINE, FAST_SPLIT, OperandParser, fast_operand, walk
from src.ptx.syntax import Function, Instruction, PtxModule, PtxSyntaxError, Sym, Variable
from src.ptx.validate import RegScopes, validate_module

# ---------------------------------------------------------------------------------------------- grammar
_TYPES = {
    ".b8", ".b16", ".b32", ".b64", ".b128", ".u8", ".u16", ".u32", ".u64", ".s8", ".s16", ".s32", ".s64",
    ".f16", ".f16x2", ".bf16", ".bf16x2", ".f32", ".f64", ".pred", ".tf32", ".e4m3", ".e5m2",
}
_TYPE_SIZE = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
_SPACES = {".global", ".shared", ".const", ".local", ".param", ".tex"}
_LINKAGE = {".visible", ".extern", ".weak", ".common"}
_PERF_DIRECTIVES = {
    ".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".noreturn", ".pragma",
    ".explicitcluster", ".reqnctapercluster", ".maxclusterrank", ".blocksareclusters",
}


def type_size(ptype: str) -> int:
    """Bytes of a PTX scalar type like '.f32' or 'u64' (pred counts as 1)."""
    t = ptype.lstrip(".")
    if t == "pred":
        return 1
    if t in ("f16x2", "bf16x2"):
        return 4
    m = re.search(r"(\d+)$", t)
    if not m:
        return 4
    return _TYPE_SIZE.get(m.group(1), int(m.group(1)) // 8 or 1)


class _Parser(OperandParser):
    def __init__(self, text: str, source: str, fast: bool = True):
        self.source = source
        self.lines = text.split("\n")
        code = strip_comments(text, source)
        self.code_lines = code.split("\n")
        self.toks = tokenize(code, self.lines, source, self.fast_line if fast else None)
        self.i = 0
        self.module = PtxModule(source=source)
        self.scopes = RegScopes()  # .reg names per open { } scope (duplicates are errors)
        self.extra_names: set[str] = set()  # 2nd.. names of multi-name variable declarations

    def fast_line(self, line_text: str, line_no: int) -> Instruction | None:
        """A plain instruction line parsed in one go (most of TVM's and nvcc's PTX), else None."""
        m = FAST_LINE.fullmatch(line_text)
        if m is None or m.group(3).split(".", 1)[0] not in KNOWN_OPCODES:
            return None
        ops = m.group(4)
        try:
            operands = tuple(fast_operand(x) for x in FAST_SPLIT.findall(ops)) if ops else ()
        except BadLiteral:
            return None  # the token parser reports it, on this line

        text = self.lines[line_no - 1] if 0 < line_no <= len(self.lines) else ""
        return Instruction(m.group(3), operands, line_no, text.strip(), m.group(2), m.group(1) == "!")

    def instruction_line(self, tok: Tok) -> bool:
        """Whether `tok`'s whole line is a plain instruction (what the fast path turns into one "insn" token).
        Why: a declaration's name must not be read from such a line (`.param .u64 a,` then `ret;`), so the token
        parser rejects it exactly where the fast path does."""
        n = tok.line
        return 0 < n <= len(self.code_lines) and self.fast_line(self.code_lines[n - 1], n) is not None

    # -- errors / token helpers
    def error(self, message: str, tok: Tok | None = None) -> PtxSyntaxError:
        if tok is None:
            tok = self.toks[self.i] if self.i < len(self.toks) else (self.toks[-1] if self.toks else None)
        line = tok.line if tok else 1
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return PtxSyntaxError(line, text, message, self.source)

    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def next(self) -> Tok:
        if self.i >= len(self.toks):
            raise self.error("unexpected end of input")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> Tok:
        t = self.next()
        if t.text != text:
            self.i -= 1
            raise self.error(f"expected {text!r}, found {t.text!r}", t)
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t is not None and t.text == text:
            self.i += 1
            return True
        return False

    def int_tok(self) -> int:
        neg = self.accept("-")
        t = self.next()
        if t.kind != "num" or "." in t.text:
            self.i -= 1
            raise self.error(f"expected an integer, found {t.text!r}", t)
        try:
            v = parse_int(t.text)
        except BadLiteral as exc:
            raise self.error(str(exc), t) from None
        return -v if neg else v

    def skip_braces(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.next()
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1

    # -- module level
    def parse(self) -> PtxModule:
        mod = self.module
        while self.peek() is not None:
            t = self.peek()
            s = t.text
            if s == ".version":
                self.next()
                v = self.next()
                mod.version = v.text
            elif s == ".target":
                self.next()
                targets = [self.next().text]
                while self.accept(","):
                    targets.append(self.next().text)
                mod.target = tuple(targets)
            elif s == ".address_size":
                self.next()
                mod.address_size = self.int_tok()
            elif s == ".section":
                self.next()
                self.next()
                self.skip_braces()
            elif s == ".pragma":
                self.next()
                mod.pragmas.append(self.next().text)
                self.expect(";")
            elif s in _LINKAGE or s in (".entry", ".func") or s in _SPACES or s == ".alias":
                self.parse_decl()
            elif s == ";":
                self.next()
            else:
                raise self.error(f"unexpected token {s!r} at module level", t)
        return mod

    def parse_decl(self) -> None:
        linkage = set()
        while self.peek() is not None and self.peek().text in _LINKAGE:
            linkage.add(self.next().text)
        t = self.peek()
        if t is None:
            raise self.error("declaration expected")
        if t.text in (".entry", ".func"):
            self.parse_function(linkage)
        elif t.text in _SPACES:
            var = self.parse_variable()
            self.module.variables[var.name] = var
        elif t.text == ".alias":
            while self.next().text != ";":
                pass
        else:
            raise self.error(f"expected .entry, .func or a state space, found {t.text!r}", t)

    def parse_variable(self) -> Variable:
        space_tok = self.next()
        space = space_tok.text.lstrip(".")
        align = 0
        vec = 1
        vtype = None
        while True:
            t = self.peek()
            if t is None:
                raise self.error("unterminated variable declaration", space_tok)
            if t.text == ".align":
                self.next()
                align = self.int_tok()
            elif t.text in (".v2", ".v4", ".v8"):
                self.next()
                vec = int(t.text[2:])
            elif t.text in _TYPES or t.text in (".texref", ".samplerref", ".surfref"):
                vtype = self.next().text
            elif t.text in (".ptr",) or t.text in _SPACES:
                self.next()
            else:
                break
        if vtype is None:
            raise self.error("variable declaration without a type", self.peek())
        name_tok = self.next()
        if name_tok.kind != "id" or self.instruction_line(name_tok):
            raise self.error(f"expected a variable name, found {name_tok.text!r}", name_tok)
        count = 1
        unsized = False
        while self.accept("["):
            if self.accept("]"):
                unsized = True
                continue
            count *= self.int_tok()
            self.expect("]")
        if self.accept("<"):  # parameterised names: .reg .b32 %r<14>
            count = self.int_tok()
            self.expect(">")
        init: list = []
        if self.accept("="):
            depth = 0
            while True:
                t = self.next()
                if t.text == "{":
                    depth += 1
                elif t.text == "}":
                    depth -= 1
                elif t.kind in ("num", "float"):
                    init.append(t.text)
                if depth == 0 and self.peek() is not None and self.peek().text in (";", ","):
                    break
        size = 0 if unsized else type_size(vtype) * vec * count
        var = Variable(name_tok.text, space, vtype, size, align, tuple(init))
        # Several names in one declaration are rare outside .reg: accept them and keep the first. Each must be a
        # name (optionally sized); skipping to the next ';' instead would swallow whatever follows a malformed list.
        while self.accept(","):
            extra = self.next()
            if extra.kind != "id" or self.instruction_line(extra):
                raise self.error(f"expected a variable name after ',', found {extra.text!r}", extra)
            self.extra_names.add(extra.text)
            while self.accept("["):
                if not self.accept("]"):
                    self.int_tok()
                    self.expect("]")
        self.expect(";")
        return var

    def parse_param_list(self) -> list[tuple[str, str]]:
        params: list[tuple[str, str]] = []
        self.expect("(")
        if self.accept(")"):
            return params
        while True:
            t = self.next()
            if t.text not in (".param", ".reg"):
                self.i -= 1
                raise self.error(f"expected .param in parameter list, found {t.text!r}", t)
            ptype = None
            while self.peek() is not None and self.peek().text.startswith(".") and self.peek().kind == "id":
                x = self.next().text
                if x == ".align":
                    self.int_tok()
                elif x in _TYPES:
                    ptype = x
                elif x == ".ptr" or x in _SPACES:
                    pass
                else:
                    raise self.error(f"unexpected parameter attribute {x!r}")
            name = self.next()
            if name.kind != "id" or ptype is None:
                raise self.error("malformed parameter declaration", name)
            pname = name.text
            ptext = ptype
            if self.accept("["):
                n = self.int_tok()
                self.expect("]")
                ptext = f"{ptype}[{n}]"
            params.append((pname, ptext))
            if self.accept(")"):
                return params
            self.expect(",")

    def parse_function(self, linkage: set[str]) -> None:
        kind_tok = self.next()
        is_entry = kind_tok.text == ".entry"
        returns: list[tuple[str, str]] = []
        if not is_entry and self.peek() is not None and self.peek().text == "(":
            returns = self.parse_param_list()
        name_tok = self.next()
        if name_tok.kind != "id":
            raise self.error(f"expected a function name, found {name_tok.text!r}", name_tok)
        params: list[tuple[str, str]] = []
        if self.peek() is not None and self.peek().text == "(":
            params = self.parse_param_list()
        fn = Function(name_tok.text, is_entry, params, returns, line=kind_tok.line)
        while self.peek() is not None and self.peek().text in _PERF_DIRECTIVES:
            d = self.next().text
            vals: list[int] = []
            if d == ".pragma":
                self.next()
                self.expect(";")
                continue
            if d != ".noreturn":
                vals.append(self.int_tok())
                while self.accept(","):
                    vals.append(self.int_tok())
            fn.directives[d.lstrip(".")] = tuple(vals)
        if self.accept(";"):
            fn.defined = False
            if fn.name not in self.module.functions:
                self.module.functions[fn.name] = fn
            return
        self.expect("{")
        self.parse_body(fn)
        existing = self.module.functions.get(fn.name)
        if existing is not None and existing.defined:
            raise self.error(f"function {fn.name!r} defined twice", name_tok)
        self.module.functions[fn.name] = fn

    # -- bodies
    def parse_body(self, fn: Function) -> None:
        depth = 1
        labels: set[str] = set()
        self.scopes.push()
        while True:
            t = self.peek()
            if t is None:
                raise self.error(f"unterminated body of {fn.name!r}", self.toks[-1])
            if t.kind == "insn":
                self.i += 1
                fn.body.append(t.value)
                continue
            s = t.text
            if s == "}":
                self.next()
                depth -= 1
                self.scopes.pop()
                if depth == 0:
                    break
                continue
            if s == "{":
                self.next()
                depth += 1
                self.scopes.push()
                continue
            if s == ";":
                self.next()
                continue
            if s == ".reg":
                self.parse_reg_decl(fn)
                continue
            if s in _SPACES:
                var = self.parse_variable()
                fn.local_vars[var.name] = var
                continue
            if s == ".pragma":
                self.next()
                self.next()
                self.expect(";")
                continue
            if s == ".section":
                raise self.error(".section inside a function body", t)
            nt = self.peek(1)
            if t.kind == "id" and nt is not None and nt.text == ":" and not s.startswith("%"):
                self.next()
                self.next()
                if s in labels or s in fn.prototypes:
                    raise self.error(f"label {s!r} defined twice", t)
                d = self.peek()
                if d is not None and d.text in (".callprototype", ".calltargets"):
                    fn.prototypes[s] = self.parse_call_signature()
                    continue
                labels.add(s)
                fn.body.append(s)
                continue
            fn.body.append(self.parse_instruction())
        for x in fn.body:
            if isinstance(x, Instruction) and x.opcode.startswith(("bra", "brx")) and x.base in ("bra", "brx"):
                for op in walk(x.operands):
                    if isinstance(op, Sym) and op.name not in labels:
                        raise PtxSyntaxError(x.line, self.lines[x.line - 1], f"branch to undefined label "
                                             f"{op.name!r}", self.source)

    def parse_call_signature(self) -> str:
        """`.callprototype (.param .b32 _) _ (.param .b64 _);` or `.calltargets f, g;` after `label:` (what an indirect
        `call` names as its last operand); returns the declaration's text. Only inside bodies, as ptxas takes it."""
        start = self.next()
        if start.text == ".calltargets":
            names = [self.next()]
            while self.accept(","):
                names.append(self.next())
            bad = next((x for x in names if x.kind != "id" or x.text.startswith((".", "%"))), None)
            if bad is not None:
                raise self.error(f"expected a function name in .calltargets, found {bad.text!r}", bad)
            self.expect(";")
            return ".calltargets " + ", ".join(x.text for x in names)
        rets = self.parse_param_list() if self.peek() is not None and self.peek().text == "(" else []
        self.expect("_")
        params = self.parse_param_list() if self.peek() is not None and self.peek().text == "(" else []
        noreturn = self.accept(".noreturn")
        self.expect(";")
        return f".callprototype {_params_text(rets)} _ {_params_text(params)}" + (" .noreturn" if noreturn else "")

    def parse_reg_decl(self, fn: Function) -> None:
        self.next()
        rtype = None
        while self.peek() is not None and self.peek().text in _TYPES | {".v2", ".v4"}:
            x = self.next().text
            if x in _TYPES:
                rtype = x
        if rtype is None:
            raise self.error(".reg without a type")
        while True:
            name = self.next()
            if name.kind != "id":
                self.i -= 1
                raise self.error(f"expected a register name, found {name.text!r}", name)
            if self.accept("<"):
                n = self.int_tok()
                self.expect(">")
                if n < 0 or n > 1 << 24:
                    raise self.error(f"bad register count {n}", name)
                dup = self.scopes.declare(name.text, n)
                old = fn.reg_ranges.get(name.text)
                if old is None or n > old[0]:  # nested scopes may declare a prefix again: keep the widest
                    fn.reg_ranges[name.text] = (n, rtype)
            else:
                dup = self.scopes.declare(name.text, None)
                fn.regs[name.text] = rtype
            if dup:
                raise self.error(dup, name)
            if self.accept(";"):
                return
            self.expect(",")

    def parse_instruction(self) -> Instruction:
        first = self.peek()
        line = first.line
        pred = None
        neg = False
        if self.accept("@"):
            neg = self.accept("!")
            p = self.next()
            if p.kind != "id":
                raise self.error("expected a predicate register after '@'", p)
            pred = p.text
        op = self.next()
        if op.kind != "id" or op.text.startswith((".", "%", "$")):
            self.i -= 1
            raise self.error(f"expected an opcode, found {op.text!r}", op)
        opcode = op.text
        base = opcode.split(".", 1)[0]
        if base not in KNOWN_OPCODES:
            raise self.error(f"unknown or unsupported opcode {opcode!r}", op)
        operands: list = []
        if not self.accept(";"):
            while True:
                operands.append(self.parse_operand())
                if self.accept(";"):
                    break
                t = self.next()
                if t.text != ",":
                    self.i -= 1
                    raise self.error(f"expected ',' or ';' between operands, found {t.text!r}", t)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Instruction(opcode, tuple(operands), line, text.strip(), pred, neg)


def _params_text(params: list[tuple[str, str]]) -> str:
    return "(" + ", ".join(f".param {t} {n}" for n, t in params) + ")"


def parse_ptx(text: str, source: str = "<string>", fast: bool = True) -> PtxModule:
    """Parse PTX text into a PtxModule; raises PtxSyntaxError(line_no, line_text, message).

    fast: plain instruction lines are parsed by one regular expression instead of token by token (the same
    result, about twice as fast on TVM's PTX: tests/ptx/test_parser.py compares both on every fixture)."""
    if not isinstance(text, str):
        raise TypeError("parse_ptx expects the PTX text as str")
    parser = _Parser(text, source, fast)
    try:
        module = parser.parse()
        validate_module(module, parser.lines, parser.extra_names)
        return module
    except PtxSyntaxError:
        raise
    except (ValueError, IndexError, OverflowError, struct.error) as exc:  # defensive: numbers out of range
        raise parser.error(f"malformed PTX ({exc})") from exc
