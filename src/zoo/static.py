"""Static CNN features: parameters, MACs, activations, layer counts by type, depth.

Definitions (docs/zoo.md):
- trainable_params: weights a training step updates (Keras `trainable_weights`; torch parameters with
  requires_grad). This is the paper's Table I column.
- total_params: trainable plus non-trainable state (Keras `count_params()`; torch parameters plus floating
  buffers such as BatchNorm running statistics).
- macs: multiply-accumulates of one image's forward pass in convolutions and matrix products (bias, norm and
  elementwise work excluded), as timm/fvcore count them.
- activations: elements written by convolutions and matrix products (fvcore's activation count, timm's macts).
- depth: the largest number of convolution/dense layers on one input-to-output path.
"""

from __future__ import annotations

import math
import re
import weakref
from typing import Any

from src.zoo.resolve import Built

LAYER_KINDS = ("conv", "grouped_conv", "depthwise_conv", "dense", "norm", "pool", "activation", "attention")

_NORM = re.compile(r"(batchnorm|layernorm|groupnorm|instancenorm|normalization|frozenbatchnorm|rmsnorm)", re.I)
_POOL = re.compile(r"pool", re.I)
_ACT = re.compile(
    r"^(relu|relu6|leakyrelu|prelu|elu|selu|celu|gelu|silu|swish|mish|hardswish|hardsigmoid|sigmoid|tanh|"
    r"softplus|softmax|hardtanh|activation|quickgelu|gelutanh|hardmish|relu\d*|reLU)$",
    re.I,
)
_ATTN = re.compile(r"(attention|attn)", re.I)


def _empty_counts() -> dict[str, int]:
    return {k: 0 for k in LAYER_KINDS}


def torch_layer_counts(module: Any) -> dict[str, int]:
    """Count leaf layers of a torch module by type (attention: modules whose class name says so)."""
    import torch

    counts = _empty_counts()
    for m in module.modules():
        cls = type(m).__name__
        if isinstance(m, torch.nn.modules.conv._ConvNd):
            if m.groups == 1:
                counts["conv"] += 1
            elif m.groups == m.in_channels:
                counts["depthwise_conv"] += 1
            else:
                counts["grouped_conv"] += 1
        elif isinstance(m, torch.nn.Linear):
            counts["dense"] += 1
        elif isinstance(m, torch.nn.MultiheadAttention) or (_ATTN.search(cls) and not _POOL.search(cls)):
            counts["attention"] += 1
        elif _NORM.search(cls):
            counts["norm"] += 1
        elif _POOL.search(cls) and not list(m.children()):
            counts["pool"] += 1
        elif _ACT.match(cls) or type(m).__module__ == "torch.nn.modules.activation":
            counts["activation"] += 1
    return counts


def keras_layer_counts(model: Any) -> dict[str, int]:
    """Count Keras layers by type; SeparableConv2D counts as one depthwise plus one pointwise conv."""
    counts = _empty_counts()
    for layer in _keras_layers(model):
        cls = type(layer).__name__
        if cls == "DepthwiseConv2D":
            counts["depthwise_conv"] += 1
        elif cls == "SeparableConv2D":
            counts["depthwise_conv"] += 1
            counts["conv"] += 1
        elif cls.startswith("Conv") and cls[4:6] in ("1D", "2D", "3D"):
            groups = int(getattr(layer, "groups", 1) or 1)
            counts["conv" if groups == 1 else "grouped_conv"] += 1
        elif cls in ("Dense", "EinsumDense"):
            counts["dense"] += 1
        elif _ATTN.search(cls):
            counts["attention"] += 1
        elif _NORM.search(cls) and cls != "Normalization":
            counts["norm"] += 1
        elif _POOL.search(cls):
            counts["pool"] += 1
        elif cls in ("Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax"):
            counts["activation"] += 1
    return counts


def _keras_layers(model: Any) -> list[Any]:
    out = []
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            out.extend(_keras_layers(layer))
        else:
            out.append(layer)
    return out


class _OpCounter:
    """Counts MACs/activations of conv and matmul ops and tracks the longest conv/dense path (depth)."""

    def __init__(self) -> None:
        self.macs = 0
        self.activations = 0
        self.depth: dict[int, tuple[Any, int]] = {}
        self.max_depth = 0

    def _get_depth(self, t: Any) -> int:
        entry = self.depth.get(id(t))
        if entry is None:
            return 0
        ref, d = entry
        return d if ref() is t else 0

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        name = getattr(func, "__name__", str(func))
        base = name.split(".")[0]
        flat_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        flat_out = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        weighted = 0
        if base in ("convolution", "_convolution", "conv2d", "conv1d", "conv3d"):
            w = args[1]
            self.macs += flat_out[0].numel() * int(w.shape[1]) * math.prod(int(s) for s in w.shape[2:])
            self.activations += flat_out[0].numel()
            weighted = 1
        elif base in ("mm", "addmm", "bmm", "baddbmm"):
            a, b = (args[1], args[2]) if base in ("addmm", "baddbmm") else (args[0], args[1])
            self.macs += math.prod(int(s) for s in a.shape) * int(b.shape[-1])
            self.activations += flat_out[0].numel()
            weighted = 1
        elif base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention":
            q, k, v = args[0], args[1], args[2]
            lead = math.prod(int(s) for s in q.shape[:-2])
            self.macs += lead * int(q.shape[-2]) * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))
            self.activations += flat_out[0].numel()
            weighted = 1
        d = max((self._get_depth(t) for t in flat_in), default=0) + weighted
        self.max_depth = max(self.max_depth, d)
        for o in flat_out:
            self.depth[id(o)] = (weakref.ref(o), d)


def count_ops(module: Any, input_shape: tuple[int, ...]) -> dict[str, int]:
    """Run one forward pass (random input, batch 1) and count MACs, activations and depth."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    counter = _OpCounter()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            counter.record(func, args, kwargs, out)
            return out

    x = torch.randn(*input_shape)
    with torch.no_grad(), Mode():
        module(x)
    return {"macs": int(counter.macs), "activations": int(counter.activations), "depth": int(counter.max_depth)}


def keras_count_ops(model: Any) -> dict[str, int]:
    """MACs/activations/depth from a functional Keras model's layer graph (any backend, no forward pass)."""
    macs = 0
    acts = 0
    depth: dict[int, int] = {}
    max_depth = 0
    for layer in model.operations if hasattr(model, "operations") else model.layers:
        cls = type(layer).__name__
        out_shape = tuple(int(s) for s in layer.output.shape[1:]) if hasattr(layer, "output") else ()
        out_n = math.prod(out_shape) if out_shape else 0
        weighted = 1
        if cls == "DepthwiseConv2D":
            k = math.prod(layer.kernel_size)
            macs += out_n * k
        elif cls == "SeparableConv2D":
            cin = int(layer.input.shape[-1])
            k = math.prod(layer.kernel_size)
            hw = out_n // out_shape[-1]
            macs += hw * cin * int(layer.depth_multiplier) * k + out_n * cin * int(layer.depth_multiplier)
        elif cls.startswith("Conv") and cls[4:6] in ("1D", "2D", "3D"):
            cin = int(layer.input.shape[-1]) // int(getattr(layer, "groups", 1) or 1)
            macs += out_n * cin * math.prod(layer.kernel_size)
        elif cls == "Dense":
            macs += out_n * int(layer.input.shape[-1])
        else:
            weighted = 0
        if weighted:
            acts += out_n
        inputs = layer.input if isinstance(layer.input, (list, tuple)) else [layer.input]
        d = max((depth.get(id(t._keras_history.operation), 0) for t in inputs if hasattr(t, "_keras_history")),
                default=0) + weighted
        depth[id(layer)] = d
        max_depth = max(max_depth, d)
    return {"macs": int(macs), "activations": int(acts), "depth": int(max_depth)}


def keras_param_counts(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters of a Keras model, as Keras' model.summary() reports them."""
    trainable = int(sum(math.prod(int(s) for s in w.shape) for w in model.trainable_weights))
    return trainable, int(model.count_params())


def static_features(built: Built) -> dict[str, Any]:
    """All static features of one built model (batch 1, its input size)."""
    if built.framework.startswith("keras"):
        model = built.keras_model
        trainable, total = keras_param_counts(model)
        counts = keras_layer_counts(model)
        ops = count_ops(built.module, built.input_shape) if built.module is not None else keras_count_ops(model)
    elif built.framework == "torch":
        import torch

        mod = built.module
        trainable = int(sum(p.numel() for p in mod.parameters() if p.requires_grad))
        frozen = int(sum(p.numel() for p in mod.parameters() if not p.requires_grad))
        buffers = int(sum(b.numel() for b in mod.buffers() if torch.is_floating_point(b)))
        total = trainable + frozen + buffers
        counts = torch_layer_counts(mod)
        ops = count_ops(mod, built.input_shape)
    elif built.framework == "onnx":
        return onnx_static_features(built)
    else:  # pragma: no cover
        raise ValueError(f"unknown framework {built.framework!r}")
    return _assemble(built, trainable, total, counts, ops)


def _assemble(built: Built, trainable: int, total: int, counts: dict[str, int], ops: dict[str, int]) -> dict:
    return {
        "source": built.spec.source,
        "model": built.spec.name,
        "img_size": built.input_size,
        "framework": built.framework,
        "trainable_params": trainable,
        "total_params": total,
        "param_count_m": trainable / 1e6,
        "macs": ops["macs"],
        "gmacs": ops["macs"] / 1e9,
        "activations": ops["activations"],
        "activations_m": ops["activations"] / 1e6,
        "depth": ops["depth"],
        **{f"n_{k}": v for k, v in counts.items()},
        "n_layers": int(sum(counts.values())),
    }


def onnx_static_features(built: Built) -> dict[str, Any]:
    """Parameters (initializers), conv/Gemm MACs and layer counts of an ONNX graph (after shape inference)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper, shape_inference

    model = built.onnx_model
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    total = int(sum(a.size for a in inits.values()))
    # BatchNormalization running mean/var are inputs 3 and 4: non-trainable state.
    frozen = {n for node in graph.node if node.op_type == "BatchNormalization" for n in node.input[3:5]}
    trainable = int(sum(a.size for k, a in inits.items() if k not in frozen))
    inferred = shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    counts = _empty_counts()
    macs = acts = 0
    depth: dict[str, int] = {}
    max_depth = 0
    for node in graph.node:
        weighted = 0
        out = shapes.get(node.output[0], [])
        out_n = int(np.prod([d or 1 for d in out])) if out else 0
        if node.op_type == "Conv":
            w = inits.get(node.input[1])
            groups = next((a.i for a in node.attribute if a.name == "group"), 1)
            if w is not None:
                macs += out_n * int(np.prod(w.shape[1:]))
            kind = "conv" if groups == 1 else ("depthwise_conv" if w is not None and w.shape[1] == 1
                                                else "grouped_conv")
            counts[kind] += 1
            weighted = 1
        elif node.op_type in ("Gemm", "MatMul"):
            w = inits.get(node.input[1])
            if w is not None:
                macs += out_n * int(w.shape[0] if node.op_type == "MatMul" else w.shape[-1])
            counts["dense"] += 1
            weighted = 1
        elif node.op_type in ("BatchNormalization", "LayerNormalization", "InstanceNormalization",
                              "GroupNormalization"):
            counts["norm"] += 1
        elif "Pool" in node.op_type:
            counts["pool"] += 1
        elif node.op_type in ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
                              "HardSwish", "Gelu", "Softmax", "Clip", "PRelu", "Mish"):
            counts["activation"] += 1
        if weighted:
            acts += out_n
        d = max((depth.get(i, 0) for i in node.input), default=0) + weighted
        for o in node.output:
            depth[o] = d
        max_depth = max(max_depth, d)
    del onnx
    return _assemble(built, trainable, total, counts,
                     {"macs": int(macs), "activations": int(acts), "depth": int(max_depth)})
