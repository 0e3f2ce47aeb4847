"""Tensor shapes of an ONNX graph at a given batch and image size: ONNX shape inference, plus folding of the
shape arithmetic that inference alone does not follow (src/zoo/onnx_layers.py prices the nodes from these shapes).

Why folding: exporters write a view's sizes as arithmetic on `Shape` nodes (a channel shuffle's Div of the channel
count), ONNX's data propagation does not cover every op, and the sizes downstream stay unknown. Every ONNX runtime
folds such subgraphs before the first inference; here ONNX's reference evaluator does the same, on tensors of at
most `FOLD_LIMIT` elements (shapes, not weights).
"""

from __future__ import annotations

import math
from typing import Any

FOLD_LIMIT = 4096  # elements: shape arithmetic is folded, weight-sized tensors are left to the runtime
_FOLD_ROUNDS = 64  # fold -> infer rounds; each resolves at least one more run-time size, or folding stops
# never folded: a random draw differs per run, control flow has subgraphs of its own
_NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial",
               "If", "Loop", "Scan", "SequenceMap", "Constant"}


class OnnxGraphError(ValueError):
    """The graph cannot be decomposed at these shapes (message names the node, its op type and the tensor)."""


def attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def numel(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


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
            val = attr(node, "value")
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

    if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED:
        return None
    if node.op_type in ("Shape", "Size"):
        dims = shapes.get(node.input[0], (0, None))[1]
        if dims is None or -1 in dims:
            return None
        if node.op_type == "Size":
            return [np.array(numel(dims), dtype=np.int64)]
        rank = len(dims)
        start, end = int(attr(node, "start", 0)), attr(node, "end")
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
    return outs if all(o.size <= FOLD_LIMIT for o in outs) else None


def _fold_shape_arithmetic(model: Any, shapes: dict[str, tuple[int, tuple[int, ...]]]) -> tuple[Any, dict]:
    """Shape inference stops at a Reshape, Slice or Pad whose sizes the graph computes at run time from Shape nodes
    with arithmetic that ONNX's data propagation lacks (e.g. Div of a channel count: a channel shuffle). Replace
    each node that only shapes and small constants feed by a Constant of its value (ONNX's reference evaluator),
    and infer again, until every size is known or nothing more folds. Returns the folded model and its shapes."""
    import onnx
    from onnx import numpy_helper, shape_inference

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    small = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if numel(tuple(t.dims)) <= FOLD_LIMIT}
    for _ in range(_FOLD_ROUNDS):
        values = dict(small)
        nodes, folded = [], 0
        for node in model.graph.node:
            if node.op_type == "Constant" and attr(node, "value") is not None:
                values[node.output[0]] = numpy_helper.to_array(attr(node, "value"))
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


def infer_shapes_at(model: Any, batch: int, img_size: int, where: str) -> dict[str, tuple[int, tuple[int, ...]]]:
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
