"""TVM's constant folding without computing the constants: the kernels it leaves are all we compile.

Relax `FoldConstant` (in TVM's "zero" pipeline) replaces every `call_tir` whose inputs are all constants by a
constant: it builds the PrimFunc for the CPU with LLVM (`tirx.build`) and runs it on the weights. For a CNN that
standardises or transposes its weights in the forward pass (NFNets, ConvNeXt's linear layers) that is hundreds
of LLVM builds and a pass over every weight: 26 s of eca_nfnet_l1's 29 s in the zero pipeline. Which calls get
folded does not depend on the values, and the values of weights never reach the generated CUDA or the counts.
So while `shape_only_folding()` is active, `tirx.build` returns a do-nothing CPU function with the same number of
arguments (one LLVM build per argument count), FoldConstant keeps every decision it makes, and the folded
constants are left uninitialised. Modules that read constant values into shapes (`relax.tensor_to_shape`) must
fold for real: `needs_values` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

BUILD_FUNC = "tirx.build"
# Do-nothing CPU functions by argument count, built once per process.
_NOOPS: dict[int, Any] = {}


def needs_values(mod: Any) -> bool:
    """True when a Relax function of `mod` turns tensor values into shapes, so folded values matter."""
    from tvm import relax

    found = False

    def visit(expr: Any) -> None:
        nonlocal found
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.tensor_to_shape":
            found = True

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return found


@contextmanager
def shape_only_folding() -> Iterator[None]:
    """Within the block, FoldConstant's CPU builds are do-nothing functions (see the module docstring)."""
    import tvm
    import tvm.tirx.build  # noqa: F401  (registers tirx.build)
    import tvm_ffi

    real_build = tvm_ffi.get_global_func(BUILD_FUNC)

    def noop_build(func: Any, target: Any) -> Any:
        n = len(func.params)
        if n not in _NOOPS:
            params = [tvm.tirx.Var(f"arg{i}", "handle") for i in range(n)]
            noop = tvm.tirx.PrimFunc(params, tvm.tirx.Evaluate(0)).with_attr("global_symbol", "tir_function")
            _NOOPS[n] = real_build(noop, target)
        return _NOOPS[n]

    tvm_ffi.register_global_func(BUILD_FUNC, noop_build, override=True)
    try:
        yield
    finally:
        tvm_ffi.register_global_func(BUILD_FUNC, real_build, override=True)
