"""Instruction operands: the fast path's one-regex reading of plain lines, and the token parser's operand grammar.

parser.py's _Parser inherits OperandParser (it provides peek/next/accept/expect/error/int_tok); both paths build
the same operands for the lines the fast path takes (tests/ptx/test_parser.py compares them on every fixture).
"""

from __future__ import annotations

import re

from src.ptx.lexer import BadLiteral, parse_hex_float, parse_int
from src.ptx.syntax import Addr, ArgList, FImm, Imm, Pair, Reg, Sink, Sym, TexAddr, Vec

# A plain instruction line: optional guard, opcode, operands that are registers, decimal/hex integers, hex
# floats, symbols, the sink `_`, [reg or symbol (+ decimal offset)] or {vector of registers}. Anything else (labels,
# directives, pairs, call argument lists, negated predicates, decimal floats, texture addresses) goes through the
# tokens.
_ID = r"[A-Za-z_$%.][A-Za-z0-9_$%.]*"
_FAST_OPERAND = (rf"%[A-Za-z0-9_$%.]+|0[fF][0-9a-fA-F]{{8}}|0[dD][0-9a-fA-F]{{16}}|-?(?:0[xX][0-9a-fA-F]+|[0-9]+)U?"
                 rf"|[A-Za-z_$][A-Za-z0-9_$]*|\[\s*{_ID}\s*(?:\+\s*[0-9]+\s*)?\]"
                 rf"|\{{\s*%[A-Za-z0-9_$%.]+(?:\s*,\s*%[A-Za-z0-9_$%.]+)*\s*\}}")
FAST_LINE = re.compile(rf"\s*(?:@(!?)(%[A-Za-z0-9_$%.]+)\s+)?([a-z][a-z0-9_.]*)"
                       rf"(?:\s+((?:{_FAST_OPERAND})(?:\s*,\s*(?:{_FAST_OPERAND}))*))?\s*;\s*")
FAST_SPLIT = re.compile(rf"\s*({_FAST_OPERAND})\s*(?:,|$)")
_FAST_ADDR = re.compile(rf"\[\s*({_ID})\s*(?:\+\s*([0-9]+)\s*)?\]")


def fast_operand(text: str):
    """One operand of a line FAST_LINE matched, as the token parser would build it."""
    c = text[0]
    if c == "%":
        return Reg(text)
    if c == "[":
        m = _FAST_ADDR.fullmatch(text)
        base = m.group(1)
        return Addr(Reg(base) if base.startswith("%") else Sym(base), int(m.group(2) or 0))
    if c == "{":
        return Vec(tuple(Reg(x.strip()) for x in text[1:-1].split(",")))
    if c == "0" and len(text) > 1 and text[1] in "fFdD":
        return parse_hex_float(text)
    if c == "-" or c.isdigit():
        neg = c == "-"
        v = parse_int(text[1:] if neg else text)
        return Imm(-v if neg else v)
    if text == "_":  # the sink, as in `mbarrier.arrive_drop.shared.b64 _, [%r1];`
        return Sink()
    return Sym(text)


class OperandParser:
    """The operand grammar of the token parser (a base of parser._Parser, which supplies the token helpers)."""

    def parse_operand(self):
        """One operand; `a|b` pairs: a register, `_` or a vector `{...}` (sparse tex), then `|` and a predicate or
        `_` (ptxas: `_|_` and `{...}|_` are syntax errors)."""
        op = self._primary_operand()
        t = self.peek()
        if t is None or t.text != "|" or not isinstance(op, Reg | Sink | Vec) or (
                isinstance(op, Reg) and op.name.startswith("!")):
            return op
        self.next()
        s = self.next()
        if s.text == "_" and isinstance(op, Reg):
            return Pair(op, Sink())
        if s.kind != "id" or s.text == "_":
            self.i -= 1
            raise self.error(f"expected a predicate after '|', found {s.text!r}", s)
        return Pair(op, Reg(s.text))

    def _items(self, close: str) -> tuple:
        items = []
        if not self.accept(close):
            while True:
                items.append(self.parse_operand())
                if self.accept(close):
                    break
                self.expect(",")
        return tuple(items)

    def _primary_operand(self):
        t = self.peek()
        if t is None:
            raise self.error("operand expected")
        if t.text == "{":
            self.next()
            return Vec(self._items("}"))
        if t.text == "(":
            self.next()
            return ArgList(self._items(")"))
        if t.text == "[":
            return self._address()
        if t.text == "_":
            self.next()
            return Sink()
        if t.text == "!":  # negated predicate source operand
            self.next()
            r = self.next()
            if r.kind != "id":
                raise self.error("expected a predicate after '!'", r)
            return Reg("!" + r.text)
        if t.kind == "float":
            self.next()
            return parse_hex_float(t.text)
        if t.kind == "num" or t.text == "-":
            neg = self.accept("-")
            n = self.next()
            if n.kind == "float":
                f = parse_hex_float(n.text)
                return FImm(-f.value, f.double) if neg else f
            if n.kind != "num":
                raise self.error(f"expected a number, found {n.text!r}", n)
            if "." in n.text:
                v = float(n.text)
                return FImm(-v if neg else v, True)
            try:
                v = parse_int(n.text)
            except BadLiteral as exc:
                raise self.error(str(exc), n) from None
            return Imm(-v if neg else v)
        if t.kind == "id":
            self.next()
            if t.text.startswith("%"):
                return Reg(t.text)
            name = t.text
            if self.peek() is not None and self.peek().text == "+" and self.peek(1) is not None \
                    and self.peek(1).kind == "num":
                self.next()
                off = self.int_tok()
                return Addr(Sym(name), off)
            return Sym(name)
        raise self.error(f"unexpected token {t.text!r} in operand", t)

    def _address(self):
        """`[%rd1+16]`, `[sym+8]`, `[0x100]`; or a texture/surface address `[handle, {coords}]`,
        `[handle, sampler, {coords}]` (TexAddr; coordinates a vector or one register, as ptxas takes them)."""
        self.expect("[")
        base = None
        offset = 0
        if self.peek() is not None and self.peek().kind == "id":
            b = self.next().text
            base = Reg(b) if b.startswith("%") else Sym(b)
            if self.peek() is not None and self.peek().text == ",":
                return self._tex_address(base)
        elif self.peek() is not None and self.peek().kind == "num":
            base = Imm(self.int_tok())
        while self.peek() is not None and self.peek().text in ("+", "-"):
            sign = -1 if self.next().text == "-" else 1
            offset += sign * self.int_tok()
        self.expect("]")
        if base is None and offset == 0:
            raise self.error("empty address")
        return Addr(base, offset)

    def _tex_address(self, handle: Reg | Sym) -> TexAddr:
        first = self.peek()
        items = []
        while self.accept(","):
            items.append(self.parse_operand())
        self.expect("]")
        sampler = items[0] if len(items) == 2 else None
        coords = items[-1]
        if len(items) > 2 or (sampler is not None and not isinstance(sampler, Reg | Sym)) \
                or not isinstance(coords, Vec | Reg) or isinstance(coords, Reg) and coords.name.startswith("!"):
            raise self.error("a texture or surface address is [handle, {coordinates}] or "
                             "[handle, sampler, {coordinates}]", first)
        return TexAddr(handle, sampler, coords)


def walk(ops):
    """The operands and, recursively, the parts of vectors, argument lists, pairs and texture addresses."""
    for op in ops:
        if isinstance(op, Vec | ArgList):
            yield from walk(op.items)
        elif isinstance(op, Pair):
            yield from walk((op.first, op.second))
        elif isinstance(op, TexAddr):
            yield from walk((op.handle, op.coords) if op.sampler is None else (op.handle, op.sampler, op.coords))
        else:
            yield op
