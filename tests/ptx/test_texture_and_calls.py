"""Real nvcc PTX that the front end used to reject: texture/surface instructions and indirect calls.

The kernels are nvcc 13.0 output (comments and tabs trimmed) of these sources, and ptxas 13.0 accepts them:

    // tex_small.cu: nvcc -ptx -arch=sm_80 -O3
    __global__ void tex_copy(cudaTextureObject_t t, cudaSurfaceObject_t s, float* out, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) {
        float a = tex1Dfetch<float>(t, i);
        float4 b = tex2D<float4>(t, i * 0.5f, 0.5f);
        surf2Dwrite(a + b.x, s, i * 4, 1);
        out[i] = a + surf2Dread<float>(s, i * 4, 0);
      }
    }
    __global__ void tex_sparse(cudaTextureObject_t t, float* out) {  // tex2D with isResident: `{...}|%p1`
      bool res;
      float4 v = tex2D<float4>(t, threadIdx.x * 0.5f, 0.5f, &res);
      out[threadIdx.x] = res ? v.x : 0.f;
    }

    // indirect.cu: nvcc -ptx -arch=sm_80 -O3 (and -G: the same call sequence)
    __device__ int twice(int x) { return 2 * x; }
    __device__ int thrice(int x) { return 3 * x; }
    __device__ int (*table[2])(int) = {twice, thrice};
    __global__ void call_indirect(int* out, int sel) { out[threadIdx.x] = table[sel & 1](threadIdx.x); }

Before: `expected ']'` at the first `[handle, {coords}]` operand, `expected an opcode, found '.callprototype'`. Every
rejected variant below was checked against ptxas 13.0 (which rejects it too).
"""

from __future__ import annotations

import pytest

from src.ptx import PtxSyntaxError, count_launch, interpret, parse_ptx
from src.ptx.cfg import PtxUnsupportedError, build_program
from src.ptx.syntax import ArgList, Pair, Reg, Sym, TexAddr, Vec

from .conftest import edit, header, rejected_at

TEX_PTX = header("sm_80") + """
.visible .entry _Z8tex_copyyyPfi(
    .param .u64 _Z8tex_copyyyPfi_param_0,
    .param .u64 _Z8tex_copyyyPfi_param_1,
    .param .u64 _Z8tex_copyyyPfi_param_2,
    .param .u32 _Z8tex_copyyyPfi_param_3
)
{
    .reg .pred %p<2>;
    .reg .f32 %f<15>;
    .reg .b32 %r<11>;
    .reg .b64 %rd<7>;

    ld.param.u64 %rd1, [_Z8tex_copyyyPfi_param_0];
    ld.param.u64 %rd2, [_Z8tex_copyyyPfi_param_1];
    ld.param.u64 %rd3, [_Z8tex_copyyyPfi_param_2];
    ld.param.u32 %r2, [_Z8tex_copyyyPfi_param_3];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.s32 %p1, %r1, %r2;
    @%p1 bra $L__BB0_2;

    tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd1, {%r1}];
    cvt.rn.f32.s32 %f5, %r1;
    mul.f32 %f6, %f5, 0f3F000000;
    mov.f32 %f7, 0f3F000000;
    tex.2d.v4.f32.f32 {%f8, %f9, %f10, %f11}, [%rd1, {%f6, %f7}];
    add.f32 %f12, %f1, %f8;
    mov.b32 %r6, %f12;
    shl.b32 %r7, %r1, 2;
    mov.u32 %r8, 1;
    sust.b.2d.b32.trap [%rd2, {%r7, %r8}], {%r6};
    mov.u32 %r9, 0;
    suld.b.2d.b32.trap {%r10}, [%rd2, {%r7, %r9}];
    mov.b32 %f13, %r10;
    add.f32 %f14, %f1, %f13;
    cvta.to.global.u64 %rd4, %rd3;
    mul.wide.s32 %rd5, %r1, 4;
    add.s64 %rd6, %rd4, %rd5;
    st.global.f32 [%rd6], %f14;

$L__BB0_2:
    ret;

}
.visible .entry _Z10tex_sparseyPf(
    .param .u64 _Z10tex_sparseyPf_param_0,
    .param .u64 _Z10tex_sparseyPf_param_1
)
{
    .reg .pred %p<2>;
    .reg .f32 %f<12>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<7>;

    ld.param.u64 %rd1, [_Z10tex_sparseyPf_param_0];
    ld.param.u64 %rd2, [_Z10tex_sparseyPf_param_1];
    cvta.to.global.u64 %rd3, %rd2;
    mov.u32 %r1, %tid.x;
    cvt.rn.f32.u32 %f1, %r1;
    mul.f32 %f2, %f1, 0f3F000000;
    mov.f32 %f3, 0f3F000000;
    tex.2d.v4.f32.f32 {%f4, %f5, %f6, %f7}|%p1, [%rd1, {%f2, %f3}];
    selp.f32 %f11, %f4, 0f00000000, %p1;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    st.global.f32 [%rd6], %f11;
    ret;

}
"""  # nvcc 13.0 -arch=sm_80 -O3, tex_small.cu below

INDIRECT_PTX = header("sm_80") + """
.func  (.param .b32 func_retval0) _Z5twicei
(
    .param .b32 _Z5twicei_param_0
)
;
.func  (.param .b32 func_retval0) _Z6thricei
(
    .param .b32 _Z6thricei_param_0
)
;
.global .align 8 .u64 table[2] = {_Z5twicei, _Z6thricei};

.func  (.param .b32 func_retval0) _Z5twicei(
    .param .b32 _Z5twicei_param_0
)
{
    .reg .b32 %r<3>;

    ld.param.u32 %r1, [_Z5twicei_param_0];
    shl.b32 %r2, %r1, 1;
    st.param.b32 [func_retval0+0], %r2;
    ret;

}
.func  (.param .b32 func_retval0) _Z6thricei(
    .param .b32 _Z6thricei_param_0
)
{
    .reg .b32 %r<3>;

    ld.param.u32 %r1, [_Z6thricei_param_0];
    mul.lo.s32 %r2, %r1, 3;
    st.param.b32 [func_retval0+0], %r2;
    ret;

}
.visible .entry _Z13call_indirectPii(
    .param .u64 _Z13call_indirectPii_param_0,
    .param .u32 _Z13call_indirectPii_param_1
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [_Z13call_indirectPii_param_0];
    ld.param.u32 %rd2, [_Z13call_indirectPii_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    shl.b64 %rd4, %rd2, 3;
    and.b64 %rd5, %rd4, 8;
    mov.u64 %rd6, table;
    add.s64 %rd7, %rd6, %rd5;
    ld.global.u64 %rd8, [%rd7];
    mov.u32 %r1, %tid.x;
    { // callseq 0, 0
    .reg .b32 temp_param_reg;
    .param .b32 param0;
    st.param.b32 [param0+0], %r1;
    .param .b32 retval0;
    prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
    call (retval0),
    %rd8,
    (
    param0
    )
    , prototype_0;
    ld.param.b32 %r2, [retval0+0];
    } // callseq 0
    mul.wide.u32 %rd9, %r1, 4;
    add.s64 %rd10, %rd3, %rd9;
    st.global.u32 [%rd10], %r2;
    ret;

}
"""  # nvcc 13.0 -arch=sm_80 -O3, indirect.cu below


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_texture_and_surface_operands_parse(fast):
    m = parse_ptx(TEX_PTX, "tex.ptx", fast=fast)
    ins = {i.opcode: i for fn in m.kernels.values() for i in fn.instructions}
    assert ins["tex.1d.v4.f32.s32"].operands == (Vec(tuple(Reg(f"%f{k}") for k in range(1, 5))),
                                                  TexAddr(Reg("%rd1"), None, Vec((Reg("%r1"),))))
    assert ins["sust.b.2d.b32.trap"].operands == (TexAddr(Reg("%rd2"), None, Vec((Reg("%r7"), Reg("%r8")))),
                                                  Vec((Reg("%r6"),)))
    assert ins["suld.b.2d.b32.trap"].operands[1] == TexAddr(Reg("%rd2"), None, Vec((Reg("%r7"), Reg("%r9"))))
    sparse = next(i for i in m.kernels["_Z10tex_sparseyPf"].instructions if i.base == "tex")  # d|p, d a vector
    assert sparse.operands[0] == Pair(Vec(tuple(Reg(f"%f{k}") for k in range(4, 8))), Reg("%p1"))
    assert m == parse_ptx(TEX_PTX, "tex.ptx", fast=not fast)


def test_texture_fetches_count_as_global_loads_in_both_engines():
    m = parse_ptx(TEX_PTX)
    launch = ("_Z8tex_copyyyPfi", (4,), (256,))
    fast = count_launch(m, *launch, {"_Z8tex_copyyyPfi_param_3": 1000})
    ref = interpret(m, *launch, {"_Z8tex_copyyyPfi_param_3": 1000})
    assert not fast.estimate
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == \
        (ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
    for key in ("by_class", "bytes_by_space"):
        assert {k: v for k, v in getattr(fast, key).items() if v} == {k: v for k, v in getattr(ref, key).items() if v}
    # per in-bounds thread: tex.1d, tex.2d, suld (load.global); sust, st.global (store.global); the four f32
    # instructions (mul, mov, add, add) are fp32 (the tex fetches counted as fp32 by their .f32 type before)
    assert fast.by_class["load.global"] == 3 * 1000 and fast.by_class["store.global"] == 2 * 1000
    assert fast.by_class["fp32"] == 4 * 1000
    # bytes: suld.b/sust.b .b32 move 4 bytes each; a tex fetch's texel size is not in the PTX (no bytes)
    assert fast.bytes_by_space["load.global"] == 4 * 1000
    assert fast.bytes_by_space["store.global"] == (4 + 4) * 1000
    sparse = count_launch(m, "_Z10tex_sparseyPf", (2,), (64,), {})
    ref = interpret(m, "_Z10tex_sparseyPf", (2,), (64,), {})
    assert (sparse.thread_instructions, sparse.warp_instructions) == (ref.thread_instructions, ref.warp_instructions)
    assert sparse.by_class["load.global"] == 128


TEX1D = "tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd1, {%r1}];"
SPARSE = "tex.2d.v4.f32.f32 {%f4, %f5, %f6, %f7}|%p1, [%rd1, {%f2, %f3}];"
SULD = "suld.b.2d.b32.trap {%r10}, [%rd2, {%r7, %r9}];"
BAD_TEX = [  # ptxas 13.0 rejects each: "Arguments mismatch", else "syntax error"
    (TEX1D, TEX1D.replace(", {%r1}]", "]"), "operand 2 of tex must be a texture or surface address"),
    (TEX1D, TEX1D.replace("%rd1,", "%rd1+8,"), "expected ']'"),
    (TEX1D, TEX1D.replace("{%r1}]", "5]"), "a texture or surface address is"),
    (TEX1D, TEX1D.replace("{%r1}]", "{%r1}, {%r1}]"), "a texture or surface address is"),
    (TEX1D, TEX1D.replace("%rd1", "%rd9"), "register %rd9 is outside its declaration"),
    (SPARSE, SPARSE.replace("|%p1", "|_"), "expected a predicate after '|'"),
    (SULD, SULD.replace("suld.b.2d.b32.trap {%r10}", "ld.global.u32 %r10"), "operand 2 of ld must be an address"),
]


@pytest.mark.parametrize(("old", "new", "fragment"), BAD_TEX, ids=[c[1] for c in BAD_TEX])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_malformed_texture_operands_are_rejected(old, new, fragment, fast):
    rejected_at(TEX_PTX, old, new, fragment, fast)


# ------------------------------------------------------------------------------------------- indirect calls
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_callprototype_is_recorded_and_the_indirect_call_parsed(fast):
    m = parse_ptx(INDIRECT_PTX, "indirect.ptx", fast=fast)
    k = m.kernels["_Z13call_indirectPii"]
    assert k.prototypes == {"prototype_0": ".callprototype (.param .b32 _) _ (.param .b32 _)"}
    call = next(i for i in k.instructions if i.base == "call")
    assert call.operands == (ArgList((Sym("retval0"),)), Reg("%rd8"), ArgList((Sym("param0"),)), Sym("prototype_0"))
    assert "prototype_0" not in k.body  # a declaration, not a code label
    # the other form an indirect call may name (ptxas 13.0 accepts this variant)
    text, _ = edit(INDIRECT_PTX, "prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);",
                   "targets_0 : .calltargets _Z5twicei, _Z6thricei;")
    text, _ = edit(text, ", prototype_0;", ", targets_0;")
    k = parse_ptx(text, fast=fast).kernels["_Z13call_indirectPii"]
    assert k.prototypes == {"targets_0": ".calltargets _Z5twicei, _Z6thricei"}


def test_indirect_call_is_unsupported_like_a_call_to_an_external_function():
    m = parse_ptx(INDIRECT_PTX, "indirect.ptx")
    with pytest.raises(PtxUnsupportedError, match="indirect call is not supported"):
        count_launch(m, "_Z13call_indirectPii", (1,), (32,), {"_Z13call_indirectPii_param_1": 1})
    text, _ = edit(INDIRECT_PTX, "    %rd8,\n", "    ext,\n")
    text, _ = edit(text, "    , prototype_0;", "    ;")
    text, _ = edit(text, ".global .align 8", ".extern .func (.param .b32 func_retval0) ext(.param .b32 x);\n"
                                             ".global .align 8")
    with pytest.raises(PtxUnsupportedError, match="call to undefined function 'ext'"):
        build_program(parse_ptx(text, "extern.ptx"), "_Z13call_indirectPii")


BAD_CALLS = [  # ptxas 13.0: "Unknown symbol 'prototype_0'", "Duplicate definition of label", "Unknown symbol"
    ("    prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);\n", "",
     "an indirect call needs a .callprototype or .calltargets label", "call (retval0),"),
    ("    prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);\n",
     "    prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);\n"
     "    prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);\n", "label 'prototype_0' defined twice",
     "prototype_0 : .callprototype"),
    ("    mul.wide.u32 %rd9", "    bra prototype_0;\n    mul.wide.u32 %rd9", "branch to undefined label 'prototype_0'",
     "bra prototype_0;"),
]


@pytest.mark.parametrize(("old", "new", "fragment", "at"), BAD_CALLS, ids=["undeclared", "twice", "bra"])
def test_malformed_prototypes_and_indirect_calls_are_rejected(old, new, fragment, at):
    text, _ = edit(INDIRECT_PTX, old, new)
    with pytest.raises(PtxSyntaxError) as ei:
        parse_ptx(text, "bad.ptx")
    assert fragment in ei.value.message, str(ei.value)
    assert at in ei.value.line_text
