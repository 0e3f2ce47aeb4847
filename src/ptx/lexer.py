"""PTX lexer: comment stripping, tokens with line numbers, integer and hex-float literals.

Comments are removed first (keeping newlines, so token line numbers are those of the file); `.loc` and
`.file` debug lines are dropped here because they end at the line end instead of a ';'. Directive words
run together (`.reg.b32`) become one token per word.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

from src.ptx.syntax import FImm, PtxSyntaxError

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<float>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16})
  | (?P<num>0[xX][0-9a-fA-F]+U?|0[bB][01]+U?|[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+U?)
  | (?P<id>[A-Za-z_$%.][A-Za-z0-9_$%.]*(?:::[A-Za-z0-9_$%.]+)*)
  | (?P<punct>[;,{}\[\]()+\-@!:<>|=*/~&^])
    """,
    re.VERBOSE,
)


# Directive words written without spaces between them, `.reg.b32`, `.visible.entry`, `.param.u64` (ptxas reads them as
# `.reg .b32`, ...): split into one token per word. Identifiers cannot start with '.', so nothing else has this shape.
_DOTTED = re.compile(r"(?:\.[A-Za-z_$][A-Za-z0-9_$]*(?:::[A-Za-z0-9_$]+)*){2,}")


class Tok:
    """One token: kind (a group of the token regex), text, 1-based line number; kind "insn" is a whole instruction
    line already parsed (`value`, text = its opcode) by the caller's fast path."""

    __slots__ = ("kind", "text", "line", "value")

    def __init__(self, kind: str, text: str, line: int, value: object = None):
        self.kind = kind
        self.text = text
        self.line = line
        self.value = value


_COMMENT_RE = re.compile(r'("(?:[^"\\\n]|\\[\s\S])*"?)|//[^\n]*|/\*[\s\S]*?(?:\*/|\Z)')


def _keep_strings_and_newlines(m: re.Match) -> str:
    return m.group(1) if m.group(1) is not None else "\n" * m.group().count("\n")


def strip_comments(text: str, source: str | None = None) -> str:
    """Remove // and /* */ comments, keeping newlines so line numbers stay valid (and strings as they are).

    With `source` (the file name for errors), a `/*` without its `*/` raises PtxSyntaxError at the line where the
    comment opens; without it, the comment runs to the end of the text."""
    if "/" not in text:
        return text
    if source is None:
        return _COMMENT_RE.sub(_keep_strings_and_newlines, text)

    def keep(m: re.Match) -> str:
        c = m.group()
        if c.startswith("/*") and (len(c) < 4 or not c.endswith("*/")):
            line_no = text.count("\n", 0, m.start()) + 1
            line = text.split("\n", line_no)[line_no - 1]
            raise PtxSyntaxError(line_no, line, "unterminated /* comment", source)
        return _keep_strings_and_newlines(m)
    return _COMMENT_RE.sub(keep, text)


def tokenize(text: str, lines: list[str], source: str,
             fast_line: Callable[[str, int], Any] | None = None) -> list[Tok]:
    """Tokens line by line (whitespace skipped by the regex scanner); .loc/.file lines dropped.

    text is the PTX without comments (strip_comments); lines are the original lines, quoted in errors.
    fast_line(line text, line number) may return a whole parsed line (a plain instruction), which becomes one
    "insn" token; it returns None for anything else, which is tokenized as usual.
    """
    toks: list[Tok] = []
    append = toks.append
    finditer = _TOKEN_RE.finditer
    for line_no, line_text in enumerate(text.split("\n"), start=1):
        if fast_line is not None:
            parsed = fast_line(line_text, line_no)
            if parsed is not None:
                append(Tok("insn", parsed.opcode, line_no, parsed))
                continue
        pos = 0
        first = True
        for m in finditer(line_text):
            if m.start() != pos:
                break
            pos = m.end()
            kind = m.lastgroup
            if kind == "ws":
                continue
            s = m.group()
            if first and kind == "id" and s in (".loc", ".file"):
                pos = len(line_text)  # debug line directives have no ';' and end at the line end
                break
            first = False
            if kind == "id" and s[0] == "." and _DOTTED.fullmatch(s):  # `.reg.b32` (inline asm of cuda_bf16.h)
                for part in s[1:].split("."):
                    append(Tok("id", "." + part, line_no))
                continue
            append(Tok(kind, s, line_no))
        if pos != len(line_text):
            raw = lines[line_no - 1] if line_no <= len(lines) else ""
            raise PtxSyntaxError(line_no, raw, f"unexpected character {line_text[pos]!r}", source)
    return toks


class BadLiteral(ValueError):
    """A number token that is no PTX integer (`068`: a leading 0 is octal). The callers know the line and turn it
    into a PtxSyntaxError."""


def parse_int(s: str) -> int:
    """Integer literal: decimal, 0x hex, 0b binary or leading-0 octal, with an optional U suffix; BadLiteral if it
    is none of them."""
    text = s
    s = s.rstrip("U")
    try:
        if s[:2] in ("0x", "0X"):
            return int(s[2:], 16)
        if s[:2] in ("0b", "0B"):
            return int(s[2:], 2)
        if len(s) > 1 and s.startswith("0") and s.isdigit():
            return int(s, 8)
        return int(s)
    except ValueError:
        raise BadLiteral(f"invalid integer literal {text!r}") from None


def parse_hex_float(s: str) -> FImm:
    """0fXXXXXXXX (f32) or 0dXXXXXXXXXXXXXXXX (f64) literal: the float with those IEEE bits."""
    bits = int(s[2:], 16)
    if s[1] in "fF":
        return FImm(struct.unpack("<f", struct.pack("<I", bits))[0], False)
    return FImm(struct.unpack("<d", struct.pack("<Q", bits))[0], True)
