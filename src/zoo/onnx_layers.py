"""Per-layer tables of an ONNX file: one row per graph node of one inference, in the layer table's schema.

Why a graph walk and not the meta-device recorder of `src/zoo/layers.py`: an ONNX file has no torch or Keras
definition to run, but its graph already lists the operators a runtime executes, and ONNX's own shape inference
gives every tensor's shape at any batch size without a framework. So a user's CNN that no zoo source defines is
decomposed from the file alone (the `onnx` package; no torch, no weights read beyond their shapes).

What a row holds is what `layers.layer_rows` writes for the `forward` pass (quantities as element counts,
q = q_fixed + q_per_sample x batch from shape inference at batch 1 and 8), with the same kinds and FLOP rules
(`layers.FLOP_RULES`). Differences that follow from the graph, not from a choice:
- Only the forward (inference) pass: an ONNX file is an inference graph (batch norm often folded into the
  convolutions by the exporter, no autograd), so a training step cannot be read from it. Asking for training
  passes raises `UnsupportedModelError`.
- Nodes that compute only from initializers, constants or shapes (shape arithmetic, weight transposes) are
  folded by every ONNX runtime before the first inference: they are rows of kind `view` that launch nothing.
  Where ONNX's data propagation cannot follow such shape arithmetic (a Div of a channel count), it is folded
  here too, with ONNX's reference evaluator, so that shape inference knows every size (`_fold_shape_arithmetic`).
- Reshape, Flatten, Squeeze, Unsqueeze, Identity and inference Dropout are views (no kernel), as in eager
  PyTorch; Transpose, Slice, Split, Cast, Expand and Tile write a new tensor (`copy`).
- An operator type outside the tables below is kept as a row of kind `other` (its bytes priced, no FLOPs) and
  named in the table's `attrs["unclassified_ops"]`; control flow (If, Loop, Scan) has no static per-inference
  cost and is refused with the node's name.
"""

from __future__ import annotations

import math
import time
from typing import Any

from src.zoo.resolve import Built, UnsupportedModelError

BATCHES = (1, 8)  # the two batch sizes each quantity is fitted from (as the recorder's inference pair)
_FOLD_LIMIT = 4096  # elements: shape arithmetic is folded, weight-sized tensors are left to the runtime
_FOLD_ROUNDS = 64  # fold -> infer rounds; each resolves at least one more run-time size, or folding stops

_VIEW = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
_COPY = {"Transpose", "Slice", "Split", "Cast", "CastLike", "Expand", "Tile"}
_CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
_NORM = {"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
         "LpNormalization", "MeanVarianceNormalization", "RMSNormalization", "SimplifiedLayerNormalization"}
_WINDOW_POOL = {"MaxPool", "AveragePool", "LpPool"}
_GLOBAL_POOL = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
_SOFTMAX = {"Softmax", "LogSoftmax", "Hardmax"}
_ACTIVATION = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Gelu",
               "Clip", "PRelu", "Mish", "Softplus", "Softsign", "ThresholdedRelu", "Erf", "QuickGelu", "FastGelu"}
_ELEMENTWISE = {"Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Max", "Min", "Mean",
                "Sum", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Equal", "Greater", "Less", "GreaterOrEqual",
                "LessOrEqual", "Not", "And", "Or", "Xor", "Mod", "IsNaN", "IsInf", "BitShift"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK"}
_RESAMPLE = {"Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "GridSample", "RoiAlign", "MaxRoiPool"}
_INDEX = {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND", "Where", "OneHot",
          "NonZero", "Compress", "Trilu"}
_RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
# ONNX TensorProto element types that hold floating-point values (FLOAT, FLOAT16, DOUBLE, BFLOAT16, FLOAT8*,
# FLOAT4); every other type is priced at its own size as `other_bytes`.
_FLOAT_TYPES = {1, 10, 11, 16, 17, 18, 19, 20, 23}
_TYPE_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2, 17: 1, 18: 1,
               19: 1, 20: 1, 21: 1, 22: 1, 23: 1}


class OnnxGraphError(ValueError):
    """The graph cannot be decomposed at these shapes (message names the node, its op type and the tensor)."""


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _node_label(node: Any, i: int) -> str:
    return f"node {i} {node.name or '(unnamed)'!r} ({node.op_type})"


def image_input(model: Any) -> Any:
    """The graph's one activation input (graph inputs that are not initializers); refuses zero or several."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise UnsupportedModelError(f"the graph has {len(inputs)} activation inputs "
                                    f"({[i.name for i in inputs]}); a per-layer table needs exactly one (the image)")
    return inputs[0]


def _with_input_shape(model: Any, batch: int, img_size: int) -> Any:
    """A copy of the model whose image input is (batch, C, img_size, img_size), intermediate shapes cleared."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    inp = next(i for i in m.graph.input if i.name not in inits)
    dims = inp.type.tensor_type.shape.dim
    channels = dims[1].dim_value if len(dims) > 1 and dims[1].dim_value > 0 else 3
    del dims[:]
    for v in (batch, channels, img_size, img_size):
        dims.add().dim_value = v
    del m.graph.value_info[:]
    for out in m.graph.output:  # an exported output may fix the batch the file was exported at
        out.type.tensor_type.ClearField("shape")
    return m


def _tensor_shapes(inferred: Any) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Tensor name -> (element type, shape; -1 where unknown) of an inferred model."""
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for t in inferred.graph.initializer:
        out[t.name] = (int(t.data_type), tuple(int(d) for d in t.dims))
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        out[vi.name] = (int(tt.elem_type), dims)
    for node in inferred.graph.node:  # Constant nodes carry their tensor as an attribute
        if node.op_type == "Constant" and node.output[0] not in out:
            val = _attr(node, "value")
            if val is not None and hasattr(val, "dims"):
                out[node.output[0]] = (int(val.data_type), tuple(int(d) for d in val.dims))
    return out


def _unresolved(model: Any, shapes: dict[str, tuple[int, tuple[int, ...]]]) -> bool:
    """Whether some node output has no shape or an unknown dimension."""
    return any(o and (o not in shapes or -1 in shapes[o][1]) for n in model.graph.node for o in n.output)


def _fold_value(node: Any, values: dict[str, Any], shapes: dict, opset: int) -> list[Any] | None:
    """The outputs of a node that only shapes and small constants feed (None if it has others or is too big):
    what every ONNX runtime folds before the first inference."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    if node.domain not in ("", "ai.onnx") or node.op_type in _RANDOM | _CONTROL_FLOW | {"Constant"}:
        return None
    if node.op_type in ("Shape", "Size"):
        dims = shapes.get(node.input[0], (0, None))[1]
        if dims is None or -1 in dims:
            return None
        if node.op_type == "Size":
            return [np.array(_numel(dims), dtype=np.int64)]
        rank = len(dims)
        start, end = int(_attr(node, "start", 0)), _attr(node, "end")
        end = rank if end is None else int(end)
        return [np.array(dims[max(start + rank if start < 0 else start, 0):end + rank if end < 0 else end],
                         dtype=np.int64)]
    if not node.input or any(i and i not in values for i in node.input):
        return None
    try:
        outs = ReferenceEvaluator(node, opsets={"": opset}).run(None, {i: values[i] for i in node.input if i})
    except Exception:  # noqa: BLE001 - not foldable here: inference keeps the size unknown and says so later
        return None
    outs = [np.asarray(o) for o in outs]
    return outs if all(o.size <= _FOLD_LIMIT for o in outs) else None


def _fold_shape_arithmetic(model: Any, shapes: dict[str, tuple[int, tuple[int, ...]]]) -> tuple[Any, dict]:
    """Shape inference stops at a Reshape, Slice or Pad whose sizes the graph computes at run time from Shape nodes
    with arithmetic that ONNX's data propagation lacks (e.g. Div of a channel count: a channel shuffle). Replace
    each node that only shapes and small constants feed by a Constant of its value (ONNX's reference evaluator),
    and infer again, until every size is known or nothing more folds. Returns the folded model and its shapes."""
    import onnx
    from onnx import numpy_helper, shape_inference

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    small = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if _numel(tuple(t.dims)) <= _FOLD_LIMIT}
    for _ in range(_FOLD_ROUNDS):
        values = dict(small)
        nodes, folded = [], 0
        for node in model.graph.node:
            if node.op_type == "Constant" and _attr(node, "value") is not None:
                values[node.output[0]] = numpy_helper.to_array(_attr(node, "value"))
            outs = _fold_value(node, values, shapes, opset)
            if outs is None:
                nodes.append(node)
                continue
            folded += 1
            for name, val in zip(node.output, outs, strict=False):
                values[name] = val
                nodes.append(onnx.helper.make_node("Constant", [], [name], value=numpy_helper.from_array(val, name)))
        if not folded:
            break
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        shapes = _tensor_shapes(shape_inference.infer_shapes(model, check_type=False, strict_mode=True,
                                                             data_prop=True))
        if not _unresolved(model, shapes):
            break
    return model, shapes


def _infer(model: Any, batch: int, img_size: int, where: str) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Tensor name -> (element type, shape) at this batch and input size, from ONNX shape inference (after
    folding run-time shape arithmetic where inference alone leaves a size unknown)."""
    from onnx import shape_inference

    m = _with_input_shape(model, batch, img_size)
    try:
        shapes = _tensor_shapes(shape_inference.infer_shapes(m, check_type=False, strict_mode=True, data_prop=True))
        if _unresolved(m, shapes):
            _, folded = _fold_shape_arithmetic(m, shapes)
            shapes = {**folded, **{k: v for k, v in shapes.items() if k not in folded}}
    except Exception as exc:  # noqa: BLE001 - onnx raises its own InferenceError / ValidationError types
        raise OnnxGraphError(f"{where}: ONNX shape inference failed at batch {batch}, {img_size} px: {exc}") from exc
    return shapes


def _numel(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def _static_tensors(model: Any) -> set[str]:
    """Tensors known before the first inference: initializers, constants, shapes and what only they compute."""
    static = {t.name for t in model.graph.initializer} | {""}
    for node in model.graph.node:
        if node.op_type in _RANDOM:
            continue
        if node.op_type in ("Shape", "Size", "Constant") or all(i in static for i in node.input):
            static.update(node.output)
    return static


def _conv(node: Any, shapes: dict, label: str) -> tuple[str, int, dict[str, int]]:
    x, w = shapes[node.input[0]][1], shapes[node.input[1]][1]
    y = shapes[node.output[0]][1]
    groups = int(_attr(node, "group", 1))
    k = list(w[2:]) or [1]
    strides = list(_attr(node, "strides", [1] * len(k)))
    dil = list(_attr(node, "dilations", [1] * len(k)))
    pads = list(_attr(node, "pads", [0] * (2 * len(k))))
    transposed = node.op_type == "ConvTranspose"
    c_in = int(x[1])
    c_out = int(w[1]) * groups if transposed else int(w[0])
    if transposed:  # each input element meets C_out/groups * k weights
        macs = _numel(x) * int(w[1]) * _numel(tuple(k))
    else:
        macs = _numel(y) * _numel(tuple(w[1:]))
    geo = {"c_in": c_in, "c_out": c_out, "kernel_r": int(k[0]), "kernel_s": int(k[1]) if len(k) > 1 else 1,
           "stride_h": int(strides[0]), "stride_w": int(strides[1]) if len(strides) > 1 else 1,
           "pad_h": int(pads[0]) if pads else 0, "pad_w": int(pads[1]) if len(pads) > 1 else 0,
           "dilation_h": int(dil[0]), "dilation_w": int(dil[1]) if len(dil) > 1 else 1, "groups": groups,
           "in_h": int(x[2]) if len(x) > 2 else 1, "in_w": int(x[3]) if len(x) > 3 else 1}
    if groups == 1:
        kind = "conv"
    elif groups == c_in:
        kind = "depthwise_conv"
    else:
        kind = "grouped_conv"
    if macs <= 0:
        raise OnnxGraphError(f"{label}: convolution with no multiply-accumulates (weight {w}, output {y})")
    return kind, macs, geo


def _einsum_extents(term: str, dims: tuple[int, ...]) -> dict[str, int]:
    """Index letter -> extent for one Einsum operand (letters before '...' align left, after it right)."""
    head, _, tail = term.partition("...")
    extents = {c: int(d) for c, d in zip(head, dims, strict=False)}
    if tail:
        extents.update({c: int(d) for c, d in zip(tail, dims[len(dims) - len(tail):], strict=False)})
    return extents


def _einsum_macs(node: Any, shapes: dict, out_n: int) -> int:
    """Multiply-accumulates of an Einsum: each output element sums over the contracted indices (the letters of
    the operands that the output does not keep)."""
    eq = _attr(node, "equation", b"")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    extents: dict[str, int] = {}
    for term, name in zip(terms, node.input, strict=False):
        extents.update(_einsum_extents(term, shapes[name][1]))
    letters = [c for c in lhs if c.isalpha()]
    kept = set(rhs) if rhs else {c for c in letters if letters.count(c) == 1}
    return out_n * _numel(tuple(v for c, v in extents.items() if c not in kept))


def classify(node: Any, shapes: dict, static: set[str], label: str
             ) -> tuple[str, bool, int, float, dict[str, int] | None]:
    """(kind, launches a kernel, MACs, FLOPs, conv geometry or None) of one node at one batch size."""
    op = node.op_type
    outs = [o for o in node.output if o]
    out_n = _numel(shapes[outs[0]][1]) if outs else 0
    if op in _CONTROL_FLOW:
        raise UnsupportedModelError(f"{label}: control flow has no static per-inference cost; a per-layer table "
                                    "needs a graph without If/Loop/Scan")
    if all(o in static for o in outs):
        return "view", False, 0, 0.0, None
    if op in ("Conv", "ConvTranspose"):
        kind, macs, geo = _conv(node, shapes, label)
        return kind, True, macs, 2.0 * macs, geo
    if op == "Gemm":
        a = shapes[node.input[0]][1]
        k = int(a[0] if _attr(node, "transA", 0) else a[1])
        macs = out_n * k
        bias = len(node.input) > 2 and bool(node.input[2])
        return "matmul", True, macs, 2.0 * macs + (out_n if bias else 0), None
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = shapes[node.input[0]][1]
        macs = out_n * int(a[-1])
        return "matmul", True, macs, 2.0 * macs, None
    if op == "Einsum":
        macs = _einsum_macs(node, shapes, out_n)
        return "matmul", True, macs, 2.0 * macs, None
    in_n = _numel(shapes[node.input[0]][1]) if node.input and node.input[0] in shapes else 0
    if op in _VIEW:
        return "view", False, 0, 0.0, None
    if op in _NORM:
        return "norm", True, 0, 2.0 * (in_n or out_n), None
    if op in _GLOBAL_POOL:
        return "pool", True, 0, float(in_n), None
    if op in _WINDOW_POOL:
        return "pool", True, 0, float(out_n * _numel(tuple(_attr(node, "kernel_shape", [1])))), None
    if op in _SOFTMAX:
        return "activation", True, 0, 5.0 * out_n, None
    if op in _ACTIVATION:
        return "activation", True, 0, float(out_n), None
    if op == "Add":
        ins = [shapes[i][1] for i in node.input if i in shapes]
        same = len(ins) >= 2 and all(_numel(s) == out_n for s in ins[:2])
        return ("add" if same else "elementwise"), True, 0, float(out_n), None
    if op in _ELEMENTWISE:
        return "elementwise", True, 0, float(out_n), None
    if op == "Concat":
        return "concat", True, 0, 0.0, None
    if op in _REDUCE:
        return "reduction", True, 0, float(in_n), None
    if op in _COPY:
        return "copy", True, 0, 0.0, None
    if op == "Pad":
        return "pad", True, 0, 0.0, None
    if op in _RESAMPLE:
        return "resample", True, 0, 0.0, None
    if op in _INDEX:
        return "index", True, 0, 0.0, None
    if op in _RANDOM:
        return "random", True, 0, 0.0, None
    return "other", True, 0, 0.0, None


def _node_quantities(node: Any, shapes: dict, static: set[str], label: str) -> dict[str, Any]:
    """One node's kind, MACs, FLOPs and element traffic at one batch size (the recorder's bytes rule)."""
    for name in [*node.input, *node.output]:
        if name and name not in shapes:
            raise OnnxGraphError(f"{label}: shape inference gave no shape for tensor {name!r}")
        if name and any(d < 0 for d in shapes[name][1]):
            raise OnnxGraphError(f"{label}: tensor {name!r} has an unknown dimension {shapes[name][1]} after "
                                 "shape inference (a size the graph computes at run time)")
    kind, launches, macs, flops, geo = classify(node, shapes, static, label)
    in_e = w_e = out_e = other = 0.0
    if launches:
        for name in dict.fromkeys(i for i in node.input if i):
            etype, shape = shapes[name]
            n = _numel(shape)
            if etype not in _FLOAT_TYPES:
                other += n * _TYPE_BYTES.get(etype, 4)
            elif name in static:
                w_e += n
            else:
                in_e += n
        for name in (o for o in node.output if o):
            etype, shape = shapes[name]
            if etype in _FLOAT_TYPES:
                out_e += _numel(shape)
            else:
                other += _numel(shape) * _TYPE_BYTES.get(etype, 4)
    first = next((o for o in node.output if o), None)
    out_shape = "x".join(str(d) for d in shapes[first][1]) if first else ""
    return {"kind": kind, "launches_kernel": launches, "macs": float(macs), "flops": float(flops),
            "in_elems": in_e, "weight_elems": w_e, "out_elems": out_e, "other_bytes": other,
            "out_shape": out_shape, "conv": geo}


def _trainable_initializers(model: Any) -> dict[str, int]:
    """Elements of each floating initializer that is a parameter (batch norm's running mean and variance are
    state), the rule of `src.zoo.static.onnx_static_features`."""
    frozen = {n for node in model.graph.node if node.op_type == "BatchNormalization" for n in node.input[3:5]}
    return {t.name: _numel(tuple(int(d) for d in t.dims)) for t in model.graph.initializer
            if t.data_type in _FLOAT_TYPES and t.name not in frozen}


def onnx_layer_rows(model: Any, img_size: int, where: str = "ONNX graph") -> list[dict[str, Any]]:
    """Rows of the forward pass (the layer table's columns, `op` = ONNX op type) of an ONNX model at `img_size`."""
    from src.zoo.layers import CONV_FIELDS, LINEAR_FIELDS

    for node in model.graph.node:
        if node.op_type in _CONTROL_FLOW:
            raise UnsupportedModelError(f"{where}: {node.op_type} node {node.name or '(unnamed)'!r}: control flow "
                                        "has no static per-inference cost; a per-layer table needs a graph "
                                        "without If/Loop/Scan")
    image_input(model)
    static = _static_tensors(model)
    trainable = _trainable_initializers(model)
    b_lo, b_hi = BATCHES
    per_batch = []
    for b in BATCHES:
        shapes = _infer(model, b, img_size, where)
        outs = [shapes.get(o.name) for o in model.graph.output]
        if any(s is None or not s[1] or s[1][0] < 0 for s in outs):
            raise OnnxGraphError(f"{where}: ONNX shape inference could not resolve the outputs' shapes "
                                 f"{[s[1] if s else None for s in outs]} at batch {b}: the graph computes a shape at "
                                 "run time that inference does not propagate (a Reshape fed by Shape arithmetic); "
                                 "simplify the graph (e.g. onnxsim) or export it with constant shapes")
        if any(s[1][0] != b for s in outs):
            raise OnnxGraphError(f"{where}: at batch {b} the graph outputs have shapes "
                                 f"{[s[1] if s else None for s in outs]}: the graph fixes its batch size (a Reshape "
                                 "to a constant shape?), so per-sample costs cannot be told from fixed ones; export "
                                 "it with a dynamic batch axis")
        per_batch.append([_node_quantities(n, shapes, static, f"{where}: {_node_label(n, i)}")
                          for i, n in enumerate(model.graph.node)])
    rows: list[dict[str, Any]] = []
    seen_params: set[str] = set()
    d = float(b_hi - b_lo)
    for i, (node, lo, hi) in enumerate(zip(model.graph.node, *per_batch, strict=True)):
        new_params = 0.0
        for name in node.input:
            if name in trainable and name not in seen_params:
                seen_params.add(name)
                new_params += trainable[name]
        row: dict[str, Any] = {"op_index": i, "op": node.op_type, "kind": lo["kind"],
                               "launches_kernel": lo["launches_kernel"]}
        for f in LINEAR_FIELDS:
            slope = (hi[f] - lo[f]) / d
            row[f"{f}_per_sample"] = slope
            row[f"{f}_fixed"] = lo[f] - slope * b_lo
        row["weight_elems"] = lo["weight_elems"]
        row["param_elems_new"] = new_params
        row["out_shape"] = lo["out_shape"]
        for f in CONV_FIELDS:
            row[f] = lo["conv"][f] if lo["conv"] else None
        rows.append({"pass": "forward", **row, "batch_lo": b_lo, "batch_hi": b_hi})
    return rows


def onnx_layer_table(built: Built, passes: tuple[str, ...] = ("forward",)) -> Any:
    """The per-layer DataFrame of an ONNX model built by `src.zoo.resolve.build_onnx` (forward pass only)."""
    import pandas as pd

    if tuple(passes) != ("forward",):
        raise UnsupportedModelError(
            f"{built.spec.name}: an ONNX file is an inference graph, so its per-layer table has the forward pass "
            f"only (asked for {list(passes)}); a training step needs the CNN's torch or Keras definition")
    t0 = time.perf_counter()
    rows = onnx_layer_rows(built.onnx_model, int(built.input_size), built.spec.name)
    df = pd.DataFrame(rows)
    df.insert(0, "zoo_model", built.spec.name)
    df.insert(0, "zoo_source", "onnx")
    df.insert(0, "img_size", int(built.input_size))
    unclassified = sorted({r["op"] for r in rows if r["kind"] == "other"})
    df.attrs.update({"source": "onnx", "model": built.spec.name, "img_size": int(built.input_size),
                     "framework": "onnx", "build": "graph", "batches": {"forward": BATCHES},
                     "unclassified_ops": unclassified, "seconds": time.perf_counter() - t0})
    return df
