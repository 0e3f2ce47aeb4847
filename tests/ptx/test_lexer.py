"""lexer.py: an unterminated /* comment is an error at the line where it opens (it used to swallow the rest of the
file, which then had no kernels: "kernel 'vector_add' not in module (kernels: [])")."""

from __future__ import annotations

import pytest

from src.ptx import PtxSyntaxError, parse_ptx
from src.ptx.lexer import strip_comments

from .conftest import edit, vector_add_ptx


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_unterminated_block_comment_names_its_opening_line(fast):
    text, line = edit(vector_add_ptx(), ".visible .entry vector_add(", "/* .visible .entry vector_add(")
    with pytest.raises(PtxSyntaxError, match="unterminated /\\* comment") as ei:
        parse_ptx(text, "va.ptx", fast=fast)
    assert ei.value.line_no == line and str(ei.value).startswith(f"va.ptx:{line}: ")
    assert ei.value.line_text == "/* .visible .entry vector_add("


def test_closed_block_comments_and_comment_markers_in_strings_are_fine():
    text = 'a /* x\n y */ b\n"/*" c // d /*\n/**/ e\n'
    assert strip_comments(text, "f.ptx") == strip_comments(text) == 'a \n b\n"/*" c \n e\n'
    with pytest.raises(PtxSyntaxError) as ei:
        strip_comments("a\nb /*/\nc\n", "f.ptx")  # "/*/" opens a comment and does not close it
    assert ei.value.line_no == 2
