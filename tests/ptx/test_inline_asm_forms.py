"""Real nvcc PTX (mostly inline asm of CUDA's own headers) that the front end used to reject or misread.

Each kernel is nvcc 13.0 output (comments and tabs trimmed), accepted by ptxas 13.0:

* `{.reg.b16 hl, hu; .reg.b32 h,r,fl,fu, C; ...}`: `.reg` and the type written together (h2exp of cuda_bf16.hpp,
  also cuda_fp16/cuda_fp8 conversions): the lexer read `.reg.b32` as one word ("expected an opcode");
* `mbarrier.arrive_drop.shared.b64 _, [%r4];` (cuda::barrier::arrive_and_drop): the fast path read the sink `_`
  as a symbol (validate.py skipped the symbol `_`; the workaround is gone, `_` is a Sink on both paths);
* `elect.sync _|P_OUT, %r2;` (CUB's transform kernel): a sink as the value half of a `d|p` pair;
* `istypep.texref %p1, %rd1;`: the opcode list had `istypeof` (PTX ISA: istypep), handwritten, ptxas-checked;
* `{ .reg .pred p; elect.sync %r3|p, %r5; ...}` next to hexp's `{.reg.b16 spc, ulp, p; ...}` (cooperative_groups
  invoke_one and cuda_fp16.hpp in one kernel): the predicate check took `p` for the .b16 of the other scope;
* `mov.u32 %r2, %tid.w;` and %ntid.w, %ctaid.w, %nctaid.w: the fourth component, "unused and always returns
  zero" (PTX ISA, special registers): both engines read 0.

    __global__ void bf16_exp(__nv_bfloat162* x, int n) {  // -arch=sm_80 -O3
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] = h2exp(x[i]);
    }
    __global__ void drop(int* out) {  // #include <cuda/barrier>, -arch=sm_90 -O3
      __shared__ cuda::barrier<cuda::thread_scope_block> bar;
      if (threadIdx.x == 0) init(&bar, blockDim.x);
      __syncthreads();
      out[threadIdx.x] = threadIdx.x;
      bar.arrive_and_drop();
    }
    __global__ void elect_one(unsigned* out) {  // -arch=sm_90 -O3; the asm is cub/.../kernels/transform.cuh's
      unsigned is_elected;
      asm volatile("{\\n\\t .reg .pred P_OUT; \\n\\t" "elect.sync _|P_OUT, %1;\\n\\t"
                   "selp.b32 %0, 1, 0, P_OUT; \\n" "}" : "=r"(is_elected) : "r"(0xffffffffu));
      if (is_elected) atomicAdd(out, 1u);
    }
    // cg.cu: #include <cooperative_groups.h>, <cuda_fp16.h>, <cuda_fp8.h>; namespace cg = cooperative_groups;
    __global__ void cg_one(int* out, __half* h, __nv_fp8_e4m3* f8, float* f, int n) {  // -arch=sm_90 -O3
      auto warp = cg::tiled_partition<32>(cg::this_thread_block());  // invoke_one: `elect.sync %r3|p, %r5;`
      cg::invoke_one(warp, [&] { atomicAdd(out, 1); });
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) { h[i] = hexp(h[i]); f8[i] = __nv_fp8_e4m3(f[i]); f[i] = float(f8[i]) + __half2float(h[i]); }
    }
    __global__ void tid_w(int* out, int n) {  // -arch=sm_80 -O3
      unsigned w, nw, cw, ncw;
      asm("mov.u32 %0, %%tid.w;" : "=r"(w));  // and %%ntid.w, %%ctaid.w, %%nctaid.w into nw, cw, ncw
      int i = threadIdx.x + w + nw + cw + ncw;
      if (i < n) out[i] = i;
    }
"""

from __future__ import annotations

import pytest

from src.ptx import PtxSyntaxError, count_launch, interpret, parse_ptx
from src.ptx.interp import Interpreter, Memory
from src.ptx.lexer import tokenize
from src.ptx.syntax import Pair, Reg, Sink

from .conftest import edit, header, rejected_at, vector_add_ptx

BF16_PTX = header("sm_80") + """
.visible .entry _Z8bf16_expP14__nv_bfloat162i(
    .param .u64 _Z8bf16_expP14__nv_bfloat162i_param_0,
    .param .u32 _Z8bf16_expP14__nv_bfloat162i_param_1
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [_Z8bf16_expP14__nv_bfloat162i_param_0];
    ld.param.u32 %r2, [_Z8bf16_expP14__nv_bfloat162i_param_1];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.s32 %p1, %r1, %r2;
    @%p1 bra $L__BB0_2;

    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    // begin inline asm
    {.reg.b16         hl, hu;
 .reg.b32         h,r,fl,fu, C;
  mov.b32         {hl, hu}, %r7;
  mov.b32         h, %r7;
  mov.b32         fl, {0,hl};
  mov.b32         fu, {0,hu};
  mov.b32         C, 0x3FB8AA3CU;
  mul.f32         fl,fl,C;
  mul.f32         fu,fu,C;
  ex2.approx.f32      fl, fl;
  ex2.approx.f32      fu, fu;
  cvt.rn.bf16.f32    hl, fl;
  cvt.rn.bf16.f32    hu, fu;
  mov.b32         r, {hl, hu};
  mov.b32         %r6, r;
}
    // end inline asm
    st.global.u32 [%rd4], %r6;

$L__BB0_2:
    ret;

}
"""  # h2exp of cuda_bf16.hpp: `{.reg.b16 hl, hu; .reg.b32 ...`

MBARRIER_PTX = header("sm_90") + """
// _ZZ4dropPiE3bar has been demoted

.visible .entry _Z4dropPi(
    .param .u64 _Z4dropPi_param_0
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    // demoted variable
    .shared .align 8 .b8 _ZZ4dropPiE3bar[8];

    ld.param.u64 %rd1, [_Z4dropPi_param_0];
    mov.u32 %r1, %tid.x;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $L__BB0_2;

    mov.u32 %r3, %ntid.x;
    mov.u32 %r2, _ZZ4dropPiE3bar;
    // begin inline asm
    mbarrier.init.shared.b64 [%r2], %r3;
    // end inline asm

$L__BB0_2:
    bar.sync 0;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r1;
    mov.u32 %r4, _ZZ4dropPiE3bar;
    // begin inline asm
    mbarrier.arrive_drop.shared.b64 _, [%r4];
    // end inline asm
    ret;

}
"""  # cuda::barrier::arrive_and_drop: `mbarrier.arrive_drop.shared.b64 _, [%r4];`

ELECT_PTX = header("sm_90") + """
.visible .entry _Z9elect_onePj(
    .param .u64 _Z9elect_onePj_param_0
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [_Z9elect_onePj_param_0];
    mov.u32 %r2, -1;
    // begin inline asm
    {
     .reg .pred P_OUT;
    elect.sync _|P_OUT, %r2;
    selp.b32 %r1, 1, 0, P_OUT;
}
    // end inline asm
    setp.eq.s32 %p1, %r1, 0;
    @%p1 bra $L__BB0_2;

    cvta.to.global.u64 %rd2, %rd1;
    atom.global.add.u32 %r3, [%rd2], 1;

$L__BB0_2:
    ret;

}
"""  # the elect.sync of CUB's transform kernel: `elect.sync _|P_OUT, %r2;`

TIDW_PTX = header("sm_80") + """
.visible .entry _Z5tid_wPii(
    .param .u64 _Z5tid_wPii_param_0,
    .param .u32 _Z5tid_wPii_param_1
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<11>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [_Z5tid_wPii_param_0];
    ld.param.u32 %r6, [_Z5tid_wPii_param_1];
    // begin inline asm
    mov.u32 %r2, %tid.w;
    // end inline asm
    // begin inline asm
    mov.u32 %r3, %ntid.w;
    // end inline asm
    // begin inline asm
    mov.u32 %r4, %ctaid.w;
    // end inline asm
    // begin inline asm
    mov.u32 %r5, %nctaid.w;
    // end inline asm
    mov.u32 %r7, %tid.x;
    add.s32 %r8, %r2, %r7;
    add.s32 %r9, %r8, %r3;
    add.s32 %r10, %r9, %r4;
    add.s32 %r1, %r10, %r5;
    setp.ge.s32 %p1, %r1, %r6;
    @%p1 bra $L__BB0_2;

    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r1;

$L__BB0_2:
    ret;

}
"""  # inline asm reading %tid.w, %ntid.w, %ctaid.w, %nctaid.w

# cg_one up to the first of hexp's four special-case scopes (the fp8 code after it dropped; ptxas accepts the excerpt)
CG_PTX = header("sm_90") + """
.visible .entry _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi(
    .param .u64 _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_0,
    .param .u64 _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_1,
    .param .u64 _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_2,
    .param .u64 _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_3,
    .param .u32 _Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_4
)
{
    .reg .pred %p<3>;
    .reg .b16 %rs<7>;
    .reg .f32 %f<6>;
    .reg .b32 %r<13>;
    .reg .b64 %rd<15>;

    ld.param.u64 %rd1, [_Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_0];
    ld.param.u64 %rd2, [_Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_1];
    ld.param.u64 %rd3, [_Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_2];
    ld.param.u64 %rd4, [_Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_3];
    ld.param.u32 %r2, [_Z6cg_onePiP6__halfP13__nv_fp8_e4m3Pfi_param_4];
    mov.u32 %r5, -1;
    mov.u32 %r3, 0;
    mov.u32 %r4, %r3;
    // begin inline asm
    {
     .reg .pred p;
      elect.sync %r3|p, %r5;
     @p mov.s32 %r4, 1;
    }
    // end inline asm
    setp.eq.s32 %p1, %r4, 0;
    @%p1 bra $L__BB0_2;

    cvta.to.global.u64 %rd5, %rd1;
    atom.global.add.u32 %r8, [%rd5], 1;

$L__BB0_2:
    mov.u32 %r9, %ctaid.x;
    mov.u32 %r10, %ntid.x;
    mov.u32 %r11, %tid.x;
    mad.lo.s32 %r1, %r9, %r10, %r11;
    setp.ge.s32 %p2, %r1, %r2;
    @%p2 bra $L__BB0_4;

    cvt.s64.s32 %rd6, %r1;
    cvta.to.global.u64 %rd7, %rd2;
    mul.wide.s32 %rd8, %r1, 2;
    add.s64 %rd9, %rd7, %rd8;
    ld.global.u16 %rs2, [%rd9];
    // begin inline asm
    {.reg.b32         f, C, nZ;
 .reg.b16         h,r;
  mov.b16         h,%rs2;
  cvt.f32.f16     f,h;
  mov.b32         C, 0x3fb8aa3bU;
  mov.b32         nZ, 0x80000000U;
  fma.rn.f32      f,f,C,nZ;
  ex2.approx.ftz.f32  f,f;
  cvt.rn.f16.f32      r,f;
{.reg.b16 spc, ulp, p;
  mov.b16 spc,0X1F79U;
  mov.b16 ulp,0x9400U;
  set.eq.f16.f16 p,h, spc;
  fma.rn.f16 r,p,ulp,r;
}
  mov.b16         %rs1,r;
}
    // end inline asm
$L__BB0_4:
    ret;

}
"""


def same_counts(fast, ref) -> None:
    assert (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == \
        (ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
    for key in ("by_class", "bytes_by_space"):
        assert {k: v for k, v in getattr(fast, key).items() if v} == {k: v for k, v in getattr(ref, key).items() if v}


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_reg_and_type_written_together(fast):
    assert [t.text for t in tokenize(".reg.b32 h,r;", [], "x")] == [".reg", ".b32", "h", ",", "r", ";"]
    m = parse_ptx(BF16_PTX, "bf16.ptx", fast=fast)
    k = m.kernels["_Z8bf16_expP14__nv_bfloat162i"]
    assert k.regs["hl"] == ".b16" and k.regs["fu"] == ".b32"
    r = count_launch(m, k.name, (2,), (128,), {"_Z8bf16_expP14__nv_bfloat162i_param_1": 200})
    assert not r.estimate and r.by_class["special"] == 2 * 200 and r.by_class["fp32"] == 2 * 200  # ex2, mul


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_sink_operand_is_a_sink_on_both_paths(fast):
    m = parse_ptx(MBARRIER_PTX, "mbar.ptx", fast=fast)
    drop = next(i for i in m.kernels["_Z4dropPi"].instructions if i.opcode.startswith("mbarrier.arrive_drop"))
    assert drop.operands[0] == Sink()
    r = count_launch(m, "_Z4dropPi", (1,), (64,), {})
    # every thread: 4 before the branch, 8 after it; thread 0 also 3 (mov, mov, mbarrier.init)
    assert (r.thread_instructions, r.by_class["barrier"]) == (64 * 12 + 3, 64 * 2 + 1)
    # `_` is not a symbol: a destination that is neither a register nor `_` is still rejected
    text, line = edit(MBARRIER_PTX, "mbarrier.arrive_drop.shared.b64 _,", "mbarrier.arrive_drop.shared.b64 bar_,")
    with pytest.raises(PtxSyntaxError, match="the destination of mbarrier.arrive_drop must be a register"):
        parse_ptx(text, fast=fast)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_elect_with_a_sink_value(fast):
    m = parse_ptx(ELECT_PTX, "elect.ptx", fast=fast)
    ins = next(i for i in m.kernels["_Z9elect_onePj"].instructions if i.base == "elect")
    assert ins.operands == (Pair(Sink(), Reg("P_OUT")), Reg("%r2"))
    r = count_launch(m, "_Z9elect_onePj", (2,), (64,), {}, policy="bounds")
    assert r.by_class["warp"] == 128 and r.estimate  # which lane is elected is not modelled by the analyzer


def test_elect_in_the_interpreter():
    # the same kernel with the asm's register written with % (the interpreter reads `P_OUT` as a symbol)
    text = ELECT_PTX.replace("P_OUT", "%p_out")
    m = parse_ptx(text)
    mem = Memory()
    Interpreter(m, "_Z9elect_onePj").run(2, 64, [0x1000_0000], memory=mem)
    assert mem.read(0x1000_0000, 4) == 2 * 2  # one leader per warp, two warps per block
    assert interpret(m, "_Z9elect_onePj", (2,), (64,), {"_Z9elect_onePj_param_0": 0x2000_0000}).by_class[
        "atomic"] == 4


ELECT = "elect.sync _|P_OUT, %r2;"
BAD_PAIRS = [  # ptxas 13.0: "syntax error", "Predicate output expected for instruction 'elect'", "Result discard
    # mode is not allowed for instruction 'shfl'"
    (ELECT, "elect.sync _|_, %r2;", "expected a predicate after '|'"),
    (ELECT, "elect.sync %r3, %r2;", "elect needs a predicate destination"),
    (ELECT, "elect.sync %r3|_, %r2;", "elect needs a predicate destination"),
    (ELECT, "shfl.sync.idx.b32 _|P_OUT, %r2, 0, 31, -1;", "the value of shfl cannot be discarded"),
]


@pytest.mark.parametrize(("old", "new", "fragment"), BAD_PAIRS, ids=[c[1] for c in BAD_PAIRS])
def test_malformed_pairs_are_rejected(old, new, fragment):
    rejected_at(ELECT_PTX, old, new, fragment)


def test_setp_pairs_with_a_sink_half():
    # ptxas 13.0 accepts `setp... _|%p` and `setp... %p|_`: the analyzer and the interpreter agree on them
    base = "setp.ge.s32 \t%p1, %r1, %r2;"
    for new in ("setp.ge.s32 \t%p1|_, %r1, %r2;", "setp.lt.s32 \t_|%p1, %r1, %r2;"):
        text, _ = edit(vector_add_ptx(), base, new)
        m = parse_ptx(text)
        params = {"vector_add_param_3": 300}
        same_counts(count_launch(m, "vector_add", (2,), (256,), params), interpret(m, "vector_add", (2,), (256,),
                                                                                    params))


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_a_name_declared_pred_in_one_scope_and_b16_in_another(fast):
    m = parse_ptx(CG_PTX, "cg.ptx", fast=fast)  # was: "the predicate destination of elect p is not a predicate"
    k = next(iter(m.kernels))
    r = count_launch(m, k, (2,), (64,), {f"{k}_param_4": 100}, policy="bounds")
    assert r.by_class["warp"] == 128 and r.estimate


ISTYPEP = header("sm_90") + """
.visible .entry k(.param .u64 k_param_0)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [k_param_0];
    istypep.texref %p1, %rd1;
    ret;
}
"""


def test_istypep_is_an_opcode():
    m = parse_ptx(ISTYPEP)  # ptxas 13.0 accepts it (also .samplerref, .surfref)
    assert count_launch(m, "k", (1,), (32,), {}).by_class["other"] == 32
    for old, new, fragment in [("istypep.texref %p1", "istypep.texref %rd1", "not a predicate register"),
                               ("istypep", "istypeof", "unknown or unsupported opcode 'istypeof.texref'")]:
        with pytest.raises(PtxSyntaxError, match=fragment):  # ptxas: "Arguments mismatch", "Unknown instruction"
            parse_ptx(ISTYPEP.replace(old, new))


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokens"])
def test_fourth_component_of_thread_and_block_registers_reads_zero(fast):
    m = parse_ptx(TIDW_PTX, "tidw.ptx", fast=fast)
    params = {"_Z5tid_wPii_param_1": 50}
    fast_r = count_launch(m, "_Z5tid_wPii", (2,), (64,), params)
    same_counts(fast_r, interpret(m, "_Z5tid_wPii", (2,), (64,), params))
    assert not fast_r.estimate and fast_r.by_class["store.global"] == 2 * 50  # i = threadIdx.x: .w adds 0
