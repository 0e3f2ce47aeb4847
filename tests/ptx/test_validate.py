"""validate.py (run by parse_ptx): malformed instructions, undeclared registers, unknown symbols -> file:line errors.

Each case corrupts one line of the real vector_add kernel (nvcc 13, sm_86, -O3). Before these checks the cases
crashed the analyzer (IndexError, StopIteration), were counted silently, or were reported as branches that
depend on data ("use policy=bounds").
"""

from __future__ import annotations

import pytest

from src.ptx import PtxSyntaxError, parse_ptx

from .conftest import edit, vector_add_ptx

SETP = "setp.ge.s32 \t%p1, %r1, %r2;"
MAD = "mad.lo.s32 \t%r1, %r3, %r4, %r5;"
ADD = "add.f32 \t%f3, %f2, %f1;"
BRA = "@%p1 bra \t$L__BB0_2;"
LDP = "ld.param.u32 \t%r2, [vector_add_param_3];"
CTAID = "mov.u32 \t%r3, %ctaid.x;"

CASES = [
    # defect 2: crashed the analyzer with a traceback
    (SETP, "setp.ge.s32 \t%p1, %r1;", "setp takes 3 to 4 operands, found 2"),
    (SETP, "setp.zz.s32 \t%p1, %r1, %r2;", "unknown comparison operator or modifier .zz"),
    (SETP, "setp.ge \t%p1, %r1, %r2;", "setp.ge needs a type"),
    (SETP, "setp.s32 \t%p1, %r1, %r2;", "setp needs one comparison operator"),
    (MAD, "mad.lo.s32 \t%r1, %r3;", "mad takes 4 operands, found 2"),
    (MAD, "mad.lo.s32;", "mad takes 4 operands, found 0"),
    (MAD, "mad.lo.s32 \t5, %r3, %r4, %r5;", "destination of mad must be a register"),
    # defect 3: accepted and counted
    (ADD, "add.f32 \t%f3, %f2;", "add takes 3 operands, found 2"),
    (ADD, "add.f32 \t%f3, %f2, %f1, %f1;", "add takes 3 operands, found 4"),
    (ADD, "add.f99 \t%f3, %f2, %f1;", "unknown type .f99"),
    (MAD, "mad.lo.s99 \t%r1, %r3, %r4, %r5;", "unknown type .s99"),
    (ADD, "add.f32 \t%f3, %f2, %zz1;", "undeclared register %zz1"),
    (ADD, "add.f32 \t%f3, %f2, %f9;", "register %f9 is outside its declaration %f<4>"),
    (ADD, "add.f32 \t%f4, %f2, %f1;", "register %f4 is outside its declaration %f<4>"),
    (BRA, "@%r1 bra \t$L__BB0_2;", "guard %r1 is not a predicate register (declared .b32)"),
    (SETP, "setp.ge.s32 \t%r1, %r1, %r2;", "setp destination %r1 is not a predicate register"),
    (MAD, "shl.b32 \t%r1, %r3, 99999999999999999999;", "does not fit in 64 bits"),
    (CTAID, "mov.u32 \t%tid.x, %r3;", "special register %tid.x is read-only"),
    (LDP, "ld.param.u32 \t%r2, vector_add_param_3;", "operand 2 of ld must be an address"),
    # defect 4: reported as a data-dependent branch ("use policy=bounds")
    (LDP, "ld.param.u32 \t%r2, [vector_add_param_9];", "unknown parameter or variable 'vector_add_param_9'"),
    (CTAID, "mov.u32 \t%r3, %ctaid.w;", "unknown special register %ctaid.w"),
    (CTAID, "mov.u32 \t%r3, %foo.x;", "unknown special register %foo.x"),
    (BRA, "@%p7 bra \t$L__BB0_2;", "register %p7 is outside its declaration %p<2>"),
    (SETP, "setp.ge.s32 \t%p1, %r1, %r99;", "register %r99 is outside its declaration %r<6>"),
]


@pytest.mark.parametrize(("old", "new", "fragment"), CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_malformed_instruction_is_a_line_numbered_syntax_error(old, new, fragment, fast):
    text, line = edit(vector_add_ptx(), old, new)
    with pytest.raises(PtxSyntaxError) as ei:
        parse_ptx(text, "va.ptx", fast=fast)
    err = ei.value
    assert fragment in err.message, str(err)
    assert err.line_no == line and str(err).startswith(f"va.ptx:{line}: ")
    assert err.line_text == text.split("\n")[line - 1]


def test_duplicate_register_declaration_in_one_scope():
    text, line = edit(vector_add_ptx(), ".reg .b32 \t%r<6>;", ".reg .b32 \t%r<6>;\n\t.reg .b32 \t%f<4>;")
    with pytest.raises(PtxSyntaxError, match=r"register %f<4> declared twice in one scope") as ei:
        parse_ptx(text, "va.ptx")
    assert ei.value.line_no == line + 1
    text, line = edit(vector_add_ptx(), ".reg .b32 \t%r<6>;", ".reg .b32 \t%r<6>;\n\t.reg .f32 \t%f2;")
    with pytest.raises(PtxSyntaxError, match=r"register %f2 declared twice in one scope"):
        parse_ptx(text, "va.ptx")


VALID = """
.version 8.0
.target sm_86
.address_size 64
.global .align 4 .u32 g_a, g_b;

.func (.reg .b32 %ret) addone(.reg .b32 %x)
{
    add.s32 %ret, %x, 1;
    ret;
}

.visible .entry k(.param .u32 k_n)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<3>;
    .reg .b32 temp;
    ld.param.u32 %r0, [k_n];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %nctaid.y;
    mov.u32 %r3, %laneid;
    mov.u64 %rd1, %clock64;
    mov.u32 %r4, %envreg3;
    mov.u32 %r5, WARP_SZ;
    mov.u64 %rd2, g_b;
    ld.global.u32 %r6, [g_b+4];
    setp.lt.and.u32 %p1|%p2, %r1, %r0, %p0;
    @!%p1 bra $L__end;
    { // a nested scope may declare a name again
    .reg .b32 temp;
    .reg .b32 %r<4>;
    mov.u32 temp, %r1;
    }
    call (%r7), addone, (%r1);
    mov.u32 %r11, temp;
$L__end:
    ret;
}
"""


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_register_scopes_declarations_and_special_registers(fast):
    m = parse_ptx(VALID, fast=fast)  # all accepted
    assert set(m.kernels) == {"k"}
    assert m.kernels["k"].reg_ranges["%r"] == (12, ".b32")  # the widest declaration of a prefix
    # the same declaration twice in one scope is not
    text, _ = edit(VALID, "    }\n    call", "    call")
    text, line = edit(text, "{ // a nested scope may declare a name again\n    ", "")
    with pytest.raises(PtxSyntaxError, match="register temp declared twice in one scope") as ei:
        parse_ptx(text, fast=fast)
    assert ei.value.line_no == line
