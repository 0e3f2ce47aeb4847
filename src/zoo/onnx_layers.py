"""Per-layer tables of an ONNX file: one row per graph node of one inference, in the layer table's schema.

Why a graph walk and not the meta-device recorder of `src/zoo/layers.py`: an ONNX file has no torch or Keras
definition to run, but its graph already lists the operators a runtime executes, and ONNX's own shape inference
gives every tensor's shape at any batch size without a framework. So a user's CNN that no zoo source defines is
decomposed from the file alone (the `onnx` package; no torch, no weights read beyond their shapes).

What a row holds is what `layers.layer_rows` writes for the `forward` pass (quantities as element counts,
q = q_fixed + q_per_sample x batch from shape inference at batch 1 and 8), with the same kinds and FLOP rules
(`op_rules.FLOP_RULES`). Differences that follow from the graph, not from a choice:
- Only the forward (inference) pass: an ONNX file is an inference graph (batch norm often folded into the
  convolutions by the exporter, no autograd), so a training step cannot be read from it. Asking for training
  passes raises `UnsupportedModelError`.
- Nodes that compute only from initializers, constants or shapes (shape arithmetic, weight transposes) are
  folded by every ONNX runtime before the first inference: they are rows of kind `view` that launch nothing.
  Where ONNX's data propagation cannot follow such shape arithmetic (a Div of a channel count), it is folded
  here too, with ONNX's reference evaluator, so that shape inference knows every size (src/zoo/onnx_shapes.py).
- Node groups that an exporter writes for one eager kernel (Linear as MatMul + Add, exact GELU as five nodes,
  SiLU as Sigmoid + Mul, GroupNorm as InstanceNormalization + affine) are priced as that kernel
  (`exporter_patterns`), since the learner's correction was learnt on eager PyTorch's kernels.
- Reshape, Flatten, Squeeze, Unsqueeze, Identity and inference Dropout are views (no kernel), as in eager
  PyTorch; Transpose, Slice, Split, Cast, Expand and Tile write a new tensor (`copy`).
- An operator type outside the tables below is kept as a row of kind `other` (its bytes priced, no FLOPs) and
  named in the table's `attrs["unclassified_ops"]`; control flow (If, Loop, Scan) has no static per-inference
  cost and is refused with the node's name.
"""

from __future__ import annotations

import time
from typing import Any

from src.zoo.onnx_shapes import OnnxGraphError, infer_shapes_at
from src.zoo.onnx_shapes import attr as _attr
from src.zoo.onnx_shapes import numel as _numel
from src.zoo.resolve import Built, UnsupportedModelError

BATCHES = (1, 8)  # the two batch sizes each quantity is fitted from (as the recorder's inference pair)
EXPORTER_GROUPS = ("MatMul+Add", "Gelu", "Silu", "GroupNorm")  # `op` of a row that prices an exporter's node group

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


def _consumers(model: Any) -> dict[str, list[int]]:
    """Tensor name -> indices of the nodes that read it (graph outputs count as a reader, index -1)."""
    out: dict[str, list[int]] = {}
    for i, node in enumerate(model.graph.node):
        for name in dict.fromkeys(n for n in node.input if n):
            out.setdefault(name, []).append(i)
    for o in model.graph.output:
        out.setdefault(o.name, []).append(-1)
    return out


def _only_reader(consumers: dict[str, list[int]], tensor: str) -> int | None:
    readers = consumers.get(tensor, [])
    return readers[0] if len(readers) == 1 and readers[0] >= 0 else None


def _static_operand(node: Any, current: str, static: set[str], also: str = "") -> bool:
    """Whether every input of `node` other than `current` is static (or the tensor `also`)."""
    others = [i for i in node.input if i and i != current]
    return len(others) <= 1 and all(o in static or o == also for o in others)


def exporter_patterns(model: Any, static: set[str]) -> dict[int, tuple[str, str, list[int]]]:
    """Node groups an exporter wrote for what the framework runs as one kernel: head index -> (op, kind, absorbed
    node indices). Why: the learner's correction was learnt on eager PyTorch's kernels, and an exported graph
    spells some of them as several nodes:
    - `Linear` -> MatMul + Add of a static bias (torch: one addmm);
    - exact GELU -> Div (or Mul) by a constant, Erf, Add 1, Mul by x, Mul 0.5, any order of the last two
      (torch: one gelu kernel); SiLU / Swish -> Sigmoid then Mul by its input (torch: one silu kernel);
    - GroupNorm -> InstanceNormalization (unit scale) then its affine as Mul + Add of static tensors, through a
      Reshape (torch: one group_norm kernel).
    Every intermediate tensor must have one reader, so no value another node reads is dropped."""
    nodes, consumers = model.graph.node, _consumers(model)
    groups: dict[int, tuple[str, str, list[int]]] = {}
    taken: set[int] = set()

    def chain(start: int, steps: tuple[set[str], ...], x: str = "") -> list[int] | None:
        """Indices of the nodes after `start` along single readers whose op types follow `steps` (each step's
        other operand static, or `x`)."""
        got, cur = [], nodes[start].output[0]
        for ops in steps:
            nxt = _only_reader(consumers, cur)
            if nxt is None or nxt in taken or nodes[nxt].op_type not in ops:
                return None
            if nodes[nxt].op_type not in _VIEW and not _static_operand(nodes[nxt], cur, static, x):
                return None
            got.append(nxt)
            cur = nodes[nxt].output[0]
        return got

    for i, node in enumerate(nodes):
        if i in taken or not node.output or node.output[0] in static:
            continue
        found: tuple[str, str, list[int]] | None = None
        if node.op_type == "MatMul" and node.input[1] in static:
            rest = chain(i, ({"Add"},))
            if rest:
                found = ("MatMul+Add", "matmul", rest)
        elif node.op_type in ("Div", "Mul") and _static_operand(node, node.input[0], static):
            x = node.input[0]
            rest = chain(i, ({"Erf"}, {"Add"}, {"Mul"}, {"Mul"}), x)
            gate = rest and sum(x in nodes[j].input for j in rest) == 1
            if rest and gate and nodes[rest[0]].op_type == "Erf":
                found = ("Gelu", "activation", rest)
        elif node.op_type == "Sigmoid":
            rest = chain(i, ({"Mul"},), node.input[0])
            if rest:
                found = ("Silu", "activation", rest)
        elif node.op_type == "InstanceNormalization":
            rest = chain(i, (_VIEW, {"Mul"}, {"Add"}))
            if rest:
                found = ("GroupNorm", "norm", rest)
        if found:
            groups[i] = found
            taken.update([i, *found[2]])
    return groups


def _merge_groups(quantities: list[dict[str, Any]], groups: dict[int, tuple[str, str, list[int]]]) -> None:
    """Price each group as one kernel on its head row (reads the head's input, writes the group's output, reads
    the weights of all; FLOPs by the recorder's rule for its kind), its other rows as launching nothing."""
    for head, (_, kind, rest) in groups.items():
        h, members = quantities[head], [quantities[j] for j in rest]
        last = members[-1]
        h["kind"], h["out_elems"], h["out_shape"] = kind, last["out_elems"], last["out_shape"]
        h["weight_elems"] += sum(m["weight_elems"] for m in members)
        if kind == "activation":  # the recorder's rules: 1 per output element; a norm's 2 include its affine
            h["flops"] = last["out_elems"]
        elif kind == "matmul":  # + the bias add
            h["flops"] += sum(m["flops"] for m in members)
        for m in members:
            m.update(launches_kernel=False, macs=0.0, flops=0.0, in_elems=0.0, weight_elems=0.0, out_elems=0.0,
                     other_bytes=0.0)


def _trainable_initializers(model: Any) -> dict[str, int]:
    """Elements of each floating initializer that is a parameter (batch norm's running mean and variance are
    state), the rule of `src.zoo.static.onnx_static_features`."""
    frozen = {n for node in model.graph.node if node.op_type == "BatchNormalization" for n in node.input[3:5]}
    return {t.name: _numel(tuple(int(d) for d in t.dims)) for t in model.graph.initializer
            if t.data_type in _FLOAT_TYPES and t.name not in frozen}


def onnx_layer_rows(model: Any, img_size: int, where: str = "ONNX graph") -> list[dict[str, Any]]:
    """Rows of the forward pass (the layer table's columns, `op` = ONNX op type) of an ONNX model at `img_size`."""
    from src.zoo.layers import LINEAR_FIELDS
    from src.zoo.op_rules import CONV_FIELDS

    for node in model.graph.node:
        if node.op_type in _CONTROL_FLOW:
            raise UnsupportedModelError(f"{where}: {node.op_type} node {node.name or '(unnamed)'!r}: control flow "
                                        "has no static per-inference cost; a per-layer table needs a graph "
                                        "without If/Loop/Scan")
    image_input(model)
    static = _static_tensors(model)
    trainable = _trainable_initializers(model)
    groups = exporter_patterns(model, static)
    b_lo, b_hi = BATCHES
    per_batch = []
    for b in BATCHES:
        shapes = infer_shapes_at(model, b, img_size, where)
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
        quantities = [_node_quantities(n, shapes, static, f"{where}: {_node_label(n, i)}")
                      for i, n in enumerate(model.graph.node)]
        _merge_groups(quantities, groups)
        per_batch.append(quantities)
    rows: list[dict[str, Any]] = []
    seen_params: set[str] = set()
    d = float(b_hi - b_lo)
    for i, (node, lo, hi) in enumerate(zip(model.graph.node, *per_batch, strict=True)):
        new_params = 0.0
        for name in node.input:
            if name in trainable and name not in seen_params:
                seen_params.add(name)
                new_params += trainable[name]
        op = groups[i][0] if i in groups else node.op_type
        row: dict[str, Any] = {"op_index": i, "op": op, "kind": lo["kind"], "launches_kernel": lo["launches_kernel"]}
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
    merged = df.loc[df["op"].isin(EXPORTER_GROUPS), "op"].value_counts().sort_index()
    df.attrs.update({"source": "onnx", "model": built.spec.name, "img_size": int(built.input_size),
                     "framework": "onnx", "build": "graph", "batches": {"forward": BATCHES},
                     "unclassified_ops": unclassified, "exporter_groups": {k: int(v) for k, v in merged.items()},
                     "seconds": time.perf_counter() - t0})
    return df
