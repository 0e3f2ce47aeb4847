"""validate.py (run by parse_ptx): malformed instructions, undeclared registers, unknown symbols -> file:line errors.

Each case corrupts one line of the real vector_add kernel (nvcc 13, sm_86, -O3). Before these checks the cases
crashed the analyzer (IndexError, StopIteration), were counted silently, or were reported as branches that
depend on data ("use policy=bounds"). The destination-type and multi-form cases (validate_forms.py) corrupt
vector_add and FORMS_PTX (nvcc 13 output with tensor-core, async-copy and mbarrier instructions); ptxas 13.0
rejects every corrupted line and accepts every line of the *_OK lists.
"""

from __future__ import annotations

import pytest

from src.ptx import PtxSyntaxError, parse_ptx

from .conftest import O3, edit, rejected_at, vector_add_ptx

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
    (CTAID, "mov.u32 \t%r3, %ctaid.q;", "unknown special register %ctaid.q"),  # ptxas: unknown vector selector
    (CTAID, "mov.u32 \t%r3, %clusterid.w;", "unknown special register %clusterid.w"),  # ptxas: ok; see _ZERO_W
    (CTAID, "mov.u32 \t%r3, %foo.x;", "unknown special register %foo.x"),
    (BRA, "@%p7 bra \t$L__BB0_2;", "register %p7 is outside its declaration %p<2>"),
    (SETP, "setp.ge.s32 \t%p1, %r1, %r99;", "register %r99 is outside its declaration %r<6>"),
]


@pytest.mark.parametrize(("old", "new", "fragment"), CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_malformed_instruction_is_a_line_numbered_syntax_error(old, new, fragment, fast):
    rejected_at(vector_add_ptx(), old, new, fragment, fast, "va.ptx")


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


# ------------------------------------------------------------------------------ destination register types
DEST_CASES = [  # the PTX ISA's type-checking rules; ptxas: "Arguments mismatch"
    (ADD, "add.f64 \t%f3, %f2, %f1;", "destination %f3 is declared .f32, which cannot take the .f64 result of add.f64"),
    (LDP, "ld.param.u64 \t%r2, [vector_add_param_3];",
     "destination %r2 is declared .b32, which cannot take the .u64 result of ld.param.u64"),
    (MAD, "mad.lo.s32 \t%p1, %r3, %r4, %r5;", "destination %p1 is declared .pred, which cannot take the .s32 result"),
    ("mul.wide.s32 \t%rd5, %r1, 4;", "mul.wide.s32 \t%r5, %r1, 4;",
     "destination %r5 is declared .b32, which cannot take the .s64 result of mul.wide.s32"),
    ("ld.global.f32 \t%f1, [%rd8];", "ld.global.u32 \t%f1, [%rd8];",  # an integer load into a float register
     "destination %f1 is declared .f32, which cannot take the .u32 result of ld.global.u32"),
    ("cvta.to.global.u64 \t%rd4, %rd1;", "cvta.to.global.u64 \t%r4, %rd1;", "%r4 is declared .b32"),
    (ADD, "add.f32 \t%rd3, %f2, %f1;", "%rd3 is declared .b64, which cannot take the .f32 result"),  # wider: not ld
]
DEST_OK = [  # legal under the same rules: ld/cvt may write wider registers, .bN registers take any type of their size
    (LDP, "ld.param.u8 \t%r2, [vector_add_param_3];"),
    ("ld.global.f32 \t%f1, [%rd8];", "ld.global.b32 \t%f1, [%rd8];"),
    ("ld.global.f32 \t%f1, [%rd8];", "ld.global.f32 \t%rd9, [%rd8];"),
    (ADD, "add.f32 \t%r3, %f2, %f1;"),
    (MAD, "mad.lo.u32 \t%r1, %r3, %r4, %r5;"),
]


@pytest.mark.parametrize(("old", "new", "fragment"), DEST_CASES, ids=[c[1] for c in DEST_CASES])
def test_destination_register_that_cannot_take_the_result(old, new, fragment):
    rejected_at(vector_add_ptx(), old, new, fragment, name="va.ptx")


@pytest.mark.parametrize(("old", "new"), DEST_OK, ids=[c[1] for c in DEST_OK])
def test_destination_register_allowed_by_the_relaxed_rules(old, new):
    parse_ptx(edit(vector_add_ptx(), old, new)[0], "va.ptx")


def test_a_register_declared_with_two_types_is_not_type_checked():
    # a nested scope declares %f3 again as .f64: which declaration an instruction sees is not tracked
    text, _ = edit(vector_add_ptx(), ADD, "{\n\t.reg .f64 \t%f3;\n\tadd.f64 \t%f3, %fd1, %fd1;\n\t}\n\t" + ADD)
    text, _ = edit(text, ".reg .b64 \t%rd<11>;", ".reg .b64 \t%rd<11>;\n\t.reg .f64 \t%fd<2>;")
    parse_ptx(text, "va.ptx")


def test_the_predicate_of_a_pair_destination_is_a_pred_register():
    text, line = edit(O3.read_text(), "shfl.sync.bfly.b32 \t%r10|%p2,", "shfl.sync.bfly.b32 \t%r10|%r11,")
    with pytest.raises(PtxSyntaxError, match=r"the predicate destination of shfl %r11 is not a predicate register "
                                              r"\(declared \.b32\)") as ei:
        parse_ptx(text, "o3.ptx")
    assert ei.value.line_no == line


# ------------------------------------------------------------------------ opcodes with many operand forms
# nvcc 13.0 -ptx -arch=sm_90 -O3: wmma::load/mma/store_matrix_sync, __pipeline_memcpy_async, cuda::ptx
# mbarrier_init / cp_async_bulk / mbarrier_arrive / mbarrier_try_wait, and ldmatrix / stmatrix / mma.sync in asm()
# (header comments and trailing blanks dropped; the one wmma.mma line is WMMA_MMA, too long for this file).
WMMA_MMA = ("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, "
            "{%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, {%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, "
            "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8};")
FORMS_PTX = """
.version 9.0
.target sm_90
.address_size 64

.visible .entry _Z2tcPK6__halfS1_Pf(
	.param .u64 _Z2tcPK6__halfS1_Pf_param_0,
	.param .u64 _Z2tcPK6__halfS1_Pf_param_1,
	.param .u64 _Z2tcPK6__halfS1_Pf_param_2
)
{
	.reg .f32 	%f<17>;
	.reg .b32 	%r<18>;
	.reg .b64 	%rd<7>;


	ld.param.u64 	%rd1, [_Z2tcPK6__halfS1_Pf_param_0];
	ld.param.u64 	%rd2, [_Z2tcPK6__halfS1_Pf_param_1];
	ld.param.u64 	%rd3, [_Z2tcPK6__halfS1_Pf_param_2];
	cvta.to.global.u64 	%rd4, %rd3;
	cvta.to.global.u64 	%rd5, %rd2;
	cvta.to.global.u64 	%rd6, %rd1;
	mov.u32 	%r1, 16;
	wmma.load.a.sync.aligned.row.m16n16k16.global.f16 	{%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, [%rd6], %r1;
	wmma.load.b.sync.aligned.col.m16n16k16.global.f16 	{%r10, %r11, %r12, %r13, %r14, %r15, %r16, %r17}, [%rd5], %r1;
	wmma.load.c.sync.aligned.row.m16n16k16.global.f32 	{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, [%rd4], %r1;
	@WMMA_MMA@
	wmma.store.d.sync.aligned.row.m16n16k16.global.f32 	[%rd4], {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, %r1;
	ret;

}
	// .globl	_Z4copyPK6float4Pf
.visible .entry _Z4copyPK6float4Pf(
	.param .u64 _Z4copyPK6float4Pf_param_0,
	.param .u64 _Z4copyPK6float4Pf_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .f32 	%f<11>;
	.reg .b32 	%r<26>;
	.reg .b64 	%rd<13>;
	// demoted variable
	.shared .align 16 .b8 _ZZ4copyPK6float4PfE1s[1024];
	// demoted variable
	.shared .align 8 .u64 _ZZ4copyPK6float4PfE3bar;

	ld.param.u64 	%rd4, [_Z4copyPK6float4Pf_param_0];
	ld.param.u64 	%rd5, [_Z4copyPK6float4Pf_param_1];
	mov.u32 	%r2, %tid.x;
	cvt.u64.u32 	%rd1, %r2;
	mul.wide.u32 	%rd7, %r2, 16;
	add.s64 	%rd6, %rd4, %rd7;
	shl.b32 	%r3, %r2, 4;
	mov.u32 	%r4, _ZZ4copyPK6float4PfE1s;
	add.s32 	%r1, %r4, %r3;
	// begin inline asm
	cp.async.cg.shared.global [%r1], [%rd6], 16, 16;
	// end inline asm
	// begin inline asm
	cp.async.commit_group;
	// end inline asm
	// begin inline asm
	cp.async.wait_group 0;
	// end inline asm
	setp.ne.s32 	%p1, %r2, 0;
	@%p1 bra 	$L__BB1_2;

	mov.u32 	%r5, _ZZ4copyPK6float4PfE3bar;
	mov.u32 	%r6, 1;
	// begin inline asm
	mbarrier.init.shared.b64 [%r5], %r6;
	// end inline asm

$L__BB1_2:
	bar.sync 	0;
	cvta.to.global.u64 	%rd8, %rd4;
	add.s32 	%r7, %r4, 512;
	mov.u32 	%r8, 512;
	mov.u32 	%r9, _ZZ4copyPK6float4PfE3bar;
	// begin inline asm
	cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r7], [%rd8], %r8, [%r9];
	// end inline asm
	// begin inline asm
	mbarrier.arrive.shared.b64                                  %rd9,  [%r9];           // 1.
	// end inline asm
	cvta.to.global.u64 	%rd3, %rd5;

$L__BB1_3:
	// begin inline asm
	{
	.reg .pred P_OUT;
	mbarrier.try_wait.shared::cta.b64         P_OUT, [%r9], %rd9;                                      // 5a.
	selp.b32 %r12, 1, 0, P_OUT;
}
	// end inline asm
	setp.eq.s32 	%p2, %r12, 0;
	@%p2 bra 	$L__BB1_3;

	cvt.u32.u64 	%r23, %rd1;
	// begin inline asm
	ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r14, %r15}, [%r4];
	// end inline asm
	// begin inline asm
	stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r4], {%r14, %r15};
	// end inline asm
	mov.f32 	%f5, 0f00000000;
	// begin inline asm
	mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r14, %r15}, {%r4}, {%f5, %f5, %f5, %f5};
	// end inline asm
	shl.b32 	%r24, %r23, 4;
	add.s32 	%r25, %r4, %r24;
	ld.shared.f32 	%f6, [%r25];
	add.f32 	%f7, %f6, %f1;
	add.f32 	%f8, %f2, %f7;
	add.f32 	%f9, %f3, %f8;
	add.f32 	%f10, %f4, %f9;
	shl.b64 	%rd11, %rd1, 2;
	add.s64 	%rd12, %rd3, %rd11;
	st.global.f32 	[%rd12], %f10;
	ret;

}
""".replace("@WMMA_MMA@", WMMA_MMA)
WMMA_A = "{%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, [%rd6], %r1;"
WMMA_C = ", {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8};"
WMMA_D = "[%rd4], {%f9, %f10, %f11, %f12, %f13, %f14, %f15, %f16}, %r1;"
CP_ASYNC = "cp.async.cg.shared.global [%r1], [%rd6], 16, 16;"
BULK = "[%r7], [%rd8], %r8, [%r9];"
ARRIVE = "mbarrier.arrive.shared.b64                                  %rd9,  [%r9];"
TRY_WAIT = "P_OUT, [%r9], %rd9;"
LDMATRIX = "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r14, %r15}, [%r4];"
STMATRIX = "stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r4], {%r14, %r15};"
MMA = "{%f1, %f2, %f3, %f4}, {%r14, %r15}, {%r4}, {%f5, %f5, %f5, %f5};"

FORM_CASES = [
    (WMMA_A, "{%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, %rd6, %r1;", "operand 2 of wmma.load must be an address [...]"),
    (WMMA_C, ";", "wmma.mma takes 4 operands, found 3"),
    (WMMA_D, "[%rd4], %f9, %r1;", "operand 2 of wmma.store must be a vector {...}"),
    (CP_ASYNC, "cp.async.cg.shared.global [%r1], [%rd6];", "cp.async takes 3 to 4 operands, found 2"),
    (CP_ASYNC, "cp.async.cg.shared.global [%r1], [%rd6], 16, 16, %rd6;", "cp.async takes 3 to 4 operands, found 5"),
    ("cp.async.wait_group 0;", "cp.async.wait_group;", "cp.async.wait_group takes 1 operand, found 0"),
    (BULK, "[%r7], [%rd8], %r8, %r9;", "operand 4 of cp.async.bulk must be an address [...]"),
    ("mbarrier.init.shared.b64 [%r5], %r6;", "mbarrier.init.shared.b64 [%r5];", "mbarrier.init takes 2 operands"),
    (ARRIVE, "mbarrier.arrive.shared.b64 %r9, [%r9];",
     "destination %r9 is declared .b32, which cannot take the .b64 result of mbarrier.arrive.shared.b64"),
    (TRY_WAIT, "%r12, [%r9], %rd9;", "destination %r12 is declared .b32, which cannot take the .pred result"),
    (LDMATRIX, "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r14}, [%r4];",
     "operand 1 of ldmatrix.sync.aligned.m8n8.x2.shared.b16 must be a vector of 2 registers, found 1"),
    (LDMATRIX, "ldmatrix.sync.aligned.m8n8.x2.shared.b16 %r14, [%r4];", "operand 1 of ldmatrix must be a vector {...}"),
    (STMATRIX, "stmatrix.sync.aligned.m8n8.x2.shared.b16 %r4, {%r14, %r15};",
     "operand 1 of stmatrix must be an address [...]"),
    (MMA, "{%f1, %f2, %f3, %f4}, {%r14, %r15}, %r4, {%f5, %f5, %f5, %f5};", "operand 3 of mma must be a vector {...}"),
    (MMA, "{%f1, %f2, %f3, %f4}, {%r14, %r15}, {%r4};", "mma takes 4 operands, found 3"),
    ("cvt.u32.u64 \t%r23, %rd1;", "cvt.u64.u32 \t%r23, %r2;",
     "destination %r23 is declared .b32, which cannot take the .u64 result of cvt.u64.u32"),
    # one type where cvt names two (ptxas: "Unexpected instruction types"; the interpreter crashed on it)
    ("cvt.u32.u64 \t%r23, %rd1;", "cvt.rn.u32 \t%r23, %rd1;",
     "cvt.rn.u32 needs a destination and a source type (e.g. cvt.s32.f32)"),
]
FORM_OK = [  # other forms PTX allows (ptxas accepts them)
    (WMMA_A, "{%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}, [%rd6];"),  # the stride is optional
    (CP_ASYNC, "cp.async.ca.shared.global.L2::cache_hint [%r1], [%rd6], 16, 16, %rd6;"),  # + cache policy
    (ARRIVE, "mbarrier.arrive_drop.shared.b64 _, [%r9];"),  # `_` sink (cuda::barrier::arrive_and_drop)
    ("cvt.u32.u64 \t%r23, %rd1;", "cvt.u32.u64 \t%rd10, %rd1;"),  # cvt may write a wider register
]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_real_multi_form_instructions_are_accepted(fast):
    m = parse_ptx(FORMS_PTX, "forms.ptx", fast=fast)
    assert set(m.kernels) == {"_Z2tcPK6__halfS1_Pf", "_Z4copyPK6float4Pf"}
    for old, new in FORM_OK:
        parse_ptx(edit(FORMS_PTX, old, new)[0], "forms.ptx", fast=fast)


def test_a_vector_register_is_a_vector_operand():
    # `.reg .v2 .b32 %v`: the parser keeps .b32 only; %v stands for {%v.x, %v.y} (ptxas accepts this)
    text, _ = edit(FORMS_PTX, LDMATRIX, "ldmatrix.sync.aligned.m8n8.x2.shared.b16 %v, [%r4];\n"
                                        "\tmov.b32 \t%r14, %v.x;\n\tmov.b32 \t%r15, %v.y;")
    parse_ptx(edit(text, ".reg .pred \t%p<3>;", ".reg .pred \t%p<3>;\n\t.reg .v2 .b32 \t%v;")[0], "forms.ptx")


@pytest.mark.parametrize(("old", "new", "fragment"), FORM_CASES, ids=[c[1] for c in FORM_CASES])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_multi_form_instruction_with_wrong_operands(old, new, fragment, fast):
    rejected_at(FORMS_PTX, old, new, fragment, fast, "forms.ptx")
