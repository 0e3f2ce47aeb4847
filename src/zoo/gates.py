"""Materialise channel-gate broadcasts so that TVM does not recompute a gate's convolution per pixel.

Why (docs/zoo.md "Why the dm_nfnet schedules recomputed"): a squeeze-excite gate multiplies the full feature map
x (N, C, H, W) by a per-channel gate g (N, C, 1, 1) = sigmoid(conv(...)). After legalisation TVM's
`AnnotateTIROpPattern` marks that broadcasting multiply elementwise, so `FuseOps` folds the gate's 1x1
convolution (and the bias and sigmoid between) into the full-size multiply and whatever follows it, and the
fused kernel computes the convolution again for every output pixel: dm_nfnet executes 47-246 FMAs per
multiply-accumulate of the network. Writing the multiply as x * broadcast_to(g, x.shape) stops the fusion where
the gate ends (a broadcast is not elementwise, and a convolution only fuses into elementwise consumers); the
broadcast then fuses into the multiply. That is the kernel split a GPU library runs (gate kernel, then a scale
kernel), and the count then is of the network.

Only multiplies whose both operands depend on the model input are rewritten: a constant per-channel scale (an
inference batch norm, a layer scale) stays a broadcast of a constant and fuses as before.
"""

from __future__ import annotations

from typing import Any


def _input_dependent(func: Any) -> set[str]:
    """Names of the variables of `func` whose value depends on one of its parameters (the model input)."""
    from tvm import relax

    dependent = {p.name for p in func.params}
    for block in func.body.blocks:
        for binding in block.bindings:
            if any(v.name in dependent for v in relax.analysis.free_vars(binding.value)):
                dependent.add(binding.var.name)
    return dependent


def _static_4d(ty: Any) -> list[int] | None:
    """The static NCHW shape of a tensor type, else None."""
    shape = getattr(ty, "shape", None)
    if shape is None or getattr(ty, "ndim", -1) != 4:
        return None
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):  # symbolic dimensions
        return None


def gate_side(full: list[int] | None, gate: list[int] | None) -> bool:
    """True when `gate` is a per-channel (spatially 1 x 1) operand broadcast over a larger map `full`."""
    return (full is not None and gate is not None and gate[2:] == [1, 1] and full[2] * full[3] > 1
            and gate[1] in (1, full[1]))


def materialise_gate_broadcasts(mod: Any) -> tuple[Any, int]:
    """`mod` with every input-dependent per-channel gate multiply in `main` written as x * broadcast_to(g, x.shape);
    returns (module, number of multiplies rewritten)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    func = mod["main"]
    dependent = _input_dependent(func)

    @mutator
    class _Materialise(PyExprMutator):
        rewritten = 0

        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.multiply" or len(call.args) != 2:
                return new
            a, g = call.args
            if not all(isinstance(x, relax.Var) and x.name in dependent for x in (a, g)):
                return new
            sa, sg = _static_4d(a.ty), _static_4d(g.ty)
            na, ng = new.args
            if gate_side(sa, sg):
                ng = self.builder_.emit(relax.op.broadcast_to(ng, a.ty.shape))
            elif gate_side(sg, sa):
                na = self.builder_.emit(relax.op.broadcast_to(na, g.ty.shape))
            else:
                return new
            self.rewritten += 1
            return relax.op.multiply(na, ng)

    mutator_ = _Materialise(mod)
    new_main = mutator_.visit_expr(func)
    if mutator_.rewritten:
        mod["main"] = new_main
    return mod, mutator_.rewritten
