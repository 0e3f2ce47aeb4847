"""Per-layer (per-operator) tables: one row per executed aten operator of one forward pass (and a training step).

A CNN's latency on a GPU is a sum over its kernels, so every measured CNN is decomposed into the operators it
executes: `layer_table(source, name, img_size)` builds the model with `src.zoo.resolve.build` (the same
(source, name) -> definition rules as `static`; no weights are downloaded) **on torch's `meta` device** and runs
it under a `TorchDispatchMode` that records every aten operator: its name, kind, whether it launches a kernel,
MACs, FLOPs, the elements it reads (activations and weights separately) and writes, its output shape and, for
convolutions, the layer geometry. No tensor holds data and no arithmetic is done, so a 600 px EfficientNet-B7
training step takes about as long as a ResNet-18 inference (seconds, on a CPU).

Why this method (and not torch.fx / torch.export or module hooks):
- The dispatch level is where the kernels are: after autograd and the composite decompositions, every aten
  op that reaches the backend is one (or zero, for views) kernel of eager PyTorch, including what no module
  owns (residual adds, `torch.cat`, reshapes that need a copy, functional activations, in-place updates of BN
  running statistics) and the **backward** ops autograd runs (`convolution_backward`, `threshold_backward`,
  ...), which neither hooks nor an exported forward graph show.
- Module hooks see modules, not ops: one `nn.MultiheadAttention` or Keras layer is many kernels, and
  functional calls are invisible. torch.fx symbolic tracing fails on data-dependent Python control flow
  (many timm models) and yields pre-dispatch graphs (no backward); torch.export traces the forward only,
  is far slower (seconds to minutes per model) and rewrites ops (functionalization) so that in-place and
  view ops no longer match what eager mode launches.
- The meta device gives shapes and strides without memory or arithmetic, so any CNN of our data at any input
  size and batch fits in memory, and Keras 3 applications on the torch backend run the same torch ops.

Rows and columns (docs/zoo.md "Per-layer tables"): `pass` is `forward` (inference: eval mode, no autograd),
`train_forward` (train mode: batch-statistics BN, dropout) or `backward` (autograd of that forward, seeded
with a ones gradient for every output; no optimizer step); a training step is train_forward + backward.
Quantities are element counts, not bytes, so any precision can be priced later (`price`):
`in_elems` (distinct elements of the activation inputs read), `weight_elems` (elements of parameters, buffers
and tensors computed only from them, e.g. a standardized or transposed weight), `out_elems` (elements
written), `other_bytes` (non-floating tensors: indices, masks, counters, at their own element size), `macs`
(conv / matmul / attention multiply-accumulates) and `flops` (see `FLOP_RULES`). Each op is run at two batch
sizes; a batch-dependent quantity q is stored as `q_fixed + q_per_sample * batch` (the intercept holds the
batch-independent part: weight gradients, BN statistics, weight copies), so the table can be priced at any
batch. Ops that launch no kernel (views, reshapes that are views, `empty*` allocations) have zero traffic.
`param_elems_new` counts the trainable parameters an op reads for the first time in its pass (their sum over
the forward pass is the trainable parameter count the model uses).

Bytes rule: bytes(op, batch, precision) = (in_elems + weight_elems + out_elems) * bytes_per_element(precision)
+ other_bytes, with in/out_elems = fixed + per_sample * batch (`BYTES_PER_ELEMENT`; AMP prices every
floating tensor at 2 bytes, an approximation: master weights stay fp32 and casts are extra kernels).
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from src.zoo.resolve import Built, MissingFrameworkError, UnsupportedModelError

# Bump when a change alters rows (op classification, FLOP rules, batch sizes): committed rows of another
# version are rebuilt by the `layers` stage.
LAYERS_VERSION = "2"
PASSES = ("forward", "train_forward", "backward")
# Batch pairs of the two runs each quantity is fitted from (intercept + slope). Batch 1 first for inference
# (batch-1 shapes are special: size-1 dims make more reshapes views); training needs batch >= 2 (BatchNorm
# refuses one value per channel in train mode).
INFER_BATCHES = (1, 8)
INFER_BATCHES_FALLBACK = (2, 8)
TRAIN_BATCHES = (2, 8)

BYTES_PER_ELEMENT = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "amp_fp16": 2, "amp_bf16": 2,
                     "int8": 1, "fp8": 1}

KINDS = ("conv", "grouped_conv", "depthwise_conv", "matmul", "attention", "norm", "pool", "activation",
         "elementwise", "add", "concat", "reduction", "copy", "pad", "resample", "index", "random", "fill",
         "view", "alloc", "other")
# Kinds whose MACs/outputs make up the static features' `macs` / `activations` (fvcore's definition).
MAC_KINDS = ("conv", "grouped_conv", "depthwise_conv", "matmul", "attention")

# FLOPs per op (documented approximations outside the MAC kinds, which are exact):
FLOP_RULES = {
    "conv": "2 * MACs, bias excluded (= src/ingest/layers.py conv_cost, so whole-CNN and single-layer rows "
            "agree); convolution_backward: 2 * forward MACs per gradient computed (input, weight; groups "
            "respected) + grad_output elements for the bias gradient",
    "matmul / attention": "2 * MACs (+ one add per output element for addmm/baddbmm/linear's bias); attention "
                          "backward: 2 * forward MACs",
    "norm": "eval: 2 per element (folded scale and shift); train forward: 7 per element (mean, variance, "
            "normalize, affine); backward: 8 per element",
    "pool": "per output element: the window's elements (adaptive/global: input elements); backward the same",
    "activation / elementwise / add": "1 per output element (transcendentals counted as 1); softmax: 5",
    "reduction": "1 per input element",
    "copy / concat / pad / view / alloc / fill / index / random / resample / other": "0",
}

_NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_unsafe_view",
              "lift_fresh", "detach", "alias", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
              "_local_scalar_dense", "resize_", "set_", "_reshape_alias", "as_strided", "as_strided_",
              "record_stream"}
_ALLOC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_"}
_CONV = {"convolution", "_convolution", "conv2d", "conv1d", "conv3d", "convolution_backward",
         "convolution_overrideable", "_slow_conv2d_forward", "slow_conv_transpose2d"}
_MM = {"mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addbmm", "matmul", "linear", "dot", "mv", "addmv"}
_NORM = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
         "_native_batch_norm_legit_functional", "_batch_norm_with_update", "_batch_norm_no_update",
         "batch_norm", "native_layer_norm", "native_group_norm", "layer_norm", "group_norm", "rms_norm",
         "_fused_rms_norm", "instance_norm", "native_batch_norm_backward", "batch_norm_backward",
         "native_layer_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward",
         "batch_norm_stats", "batch_norm_elemt", "batch_norm_gather_stats"}
_ACT = {"relu", "relu_", "relu6", "threshold", "threshold_backward", "gelu", "gelu_backward", "silu", "silu_",
        "silu_backward", "sigmoid", "sigmoid_", "sigmoid_backward", "tanh", "tanh_", "tanh_backward",
        "hardswish", "hardswish_", "hardswish_backward", "hardsigmoid", "hardsigmoid_", "hardsigmoid_backward",
        "hardtanh", "hardtanh_", "hardtanh_backward", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max",
        "clamp_max_", "leaky_relu", "leaky_relu_", "leaky_relu_backward", "elu", "elu_", "elu_backward", "selu",
        "celu", "mish", "mish_", "mish_backward", "softplus", "softplus_backward", "_softmax", "_log_softmax",
        "_softmax_backward_data", "_log_softmax_backward_data", "_prelu_kernel", "_prelu_kernel_backward",
        "prelu", "glu", "glu_backward", "log_sigmoid_forward", "log_sigmoid_backward", "erf", "gelu_",
        "_safe_softmax"}
_SOFTMAX = {"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "_safe_softmax"}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std", "std_mean", "prod", "norm",
           "linalg_vector_norm", "logsumexp", "argmax", "argmin", "all", "any", "cumsum"}
_COPY = {"clone", "copy_", "_to_copy", "contiguous", "_copy_from", "_copy_from_and_resize", "lift", "to"}
_CONCAT = {"cat", "stack", "_cat"}
_PAD = {"constant_pad_nd", "reflection_pad2d", "replication_pad2d", "reflection_pad1d", "replication_pad1d",
        "pad", "_pad_circular", "reflection_pad2d_backward", "replication_pad2d_backward"}
_RESAMPLE = {"upsample_nearest2d", "upsample_bilinear2d", "_upsample_nearest_exact2d", "upsample_bicubic2d",
             "upsample_nearest2d_backward", "upsample_bilinear2d_backward", "grid_sampler_2d", "im2col", "col2im",
             "_upsample_bilinear2d_aa", "pixel_shuffle", "pixel_unshuffle", "roll", "flip"}
_INDEX = {"index", "index_select", "gather", "scatter", "scatter_add", "index_put", "index_put_", "_index_put_impl_",
          "index_add", "index_add_", "embedding", "embedding_dense_backward", "masked_fill", "masked_fill_",
          "masked_scatter", "where", "take", "index_copy", "select_backward", "slice_backward", "narrow_copy",
          "slice_scatter", "select_scatter", "diagonal_backward", "as_strided_scatter", "tril",
          "triu", "sort", "topk", "nonzero"}
_RANDOM = {"bernoulli", "bernoulli_", "native_dropout", "native_dropout_backward", "rand", "rand_like", "randn",
           "randn_like", "uniform_", "normal_", "randint", "randperm", "exponential_"}
_FILL = {"fill", "fill_", "zero_", "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "full", "full_like",
         "new_ones", "new_full", "arange", "linspace", "scalar_tensor", "eye"}
_POOL = {"max_pool2d", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
         "avg_pool2d_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
         "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "max_pool1d", "avg_pool1d", "max_pool3d",
         "avg_pool3d", "max_pool3d_with_indices", "adaptive_avg_pool3d", "_adaptive_avg_pool3d",
         "adaptive_avg_pool1d", "max_pool1d_with_indices", "max_unpool2d", "lp_pool2d"}
_ELEMENTWISE = {"add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "neg_", "pow", "pow_",
                "sqrt", "sqrt_", "rsqrt", "rsqrt_", "exp", "exp_", "log", "log_", "abs", "abs_", "reciprocal",
                "reciprocal_", "sign", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_", "maximum",
                "minimum", "eq", "ne", "gt", "ge", "lt", "le", "logical_not", "logical_and", "logical_or",
                "bitwise_not", "floor", "ceil", "round", "trunc", "frac", "sin", "cos", "square", "exp2", "log2",
                "log1p", "expm1", "fmod", "remainder", "floor_divide", "erfinv", "sgn", "clamp_tensor", "isnan",
                "nan_to_num", "atan2", "hypot", "heaviside", "xlogy", "logit", "sigmoid_tensor", "_foreach_add"}


def op_base(func: Any) -> str:
    """`aten.convolution_backward.default` -> `convolution_backward`."""
    name = getattr(func, "__name__", str(func))
    return name.split(".")[0]


def _numel(t: Any) -> int:
    return int(math.prod(int(s) for s in t.shape))


def _distinct(t: Any) -> int:
    """Distinct elements a kernel reads from `t`: broadcast (stride-0) dimensions hold one element."""
    try:
        stride = t.stride()
    except (RuntimeError, NotImplementedError):  # sparse or other layouts: all elements
        return _numel(t)
    return int(math.prod(int(s) for s, st in zip(t.shape, stride, strict=True) if st != 0))


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    vals = [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    vals = (vals + [vals[-1]] * n)[:n] if vals else [0] * n
    return tuple(vals)


def _conv_geometry(base: str, args: tuple, kwargs: dict) -> tuple[dict[str, int], int, bool]:
    """Conv geometry, forward MACs (groups respected) and whether it is transposed, from the aten args."""
    if base == "convolution_backward":
        # grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups
        grad_out, x, w = args[0], args[1], args[2]
        stride, padding, dilation, transposed, groups = args[4], args[5], args[6], bool(args[7]), int(args[9])
        y = grad_out
    else:
        x, w = args[0], args[1]
        rest = list(args[3:]) + [None] * 6
        stride, padding, dilation = rest[0] or [1], rest[1] or [0], rest[2] or [1]
        transposed = bool(rest[3]) if rest[3] is not None else False
        groups = int(rest[5]) if rest[5] is not None else 1
        if base in ("conv1d", "conv2d", "conv3d"):
            stride, padding, dilation, transposed = args[3], args[4], args[5], False
            groups = int(args[6]) if len(args) > 6 else 1
        y = None
    ksize = [int(s) for s in w.shape[2:]]
    k = math.prod(ksize) if ksize else 1
    c_in = int(x.shape[1])
    c_out = int(w.shape[1]) * groups if transposed else int(w.shape[0])
    spatial = [int(s) for s in x.shape[2:]] or [1]
    geo = {
        "c_in": c_in, "c_out": c_out,
        "kernel_r": ksize[0] if ksize else 1, "kernel_s": ksize[1] if len(ksize) > 1 else 1,
        "stride_h": _pair(stride)[0], "stride_w": _pair(stride)[1],
        "pad_h": _pair(padding)[0], "pad_w": _pair(padding)[1],
        "dilation_h": _pair(dilation)[0], "dilation_w": _pair(dilation)[1],
        "groups": groups, "in_h": spatial[0], "in_w": spatial[1] if len(spatial) > 1 else 1,
    }
    if transposed:  # each input element meets C_out/groups * k weights
        macs = _numel(x) * int(w.shape[1]) * k
    else:
        out_numel = _numel(y) if y is not None else None
        macs = -1 if out_numel is None else out_numel * int(w.shape[1]) * k
    return geo, macs, transposed


def _conv_kind(geo: dict[str, int]) -> str:
    if geo["groups"] == 1:
        return "conv"
    return "depthwise_conv" if geo["groups"] == geo["c_in"] else "grouped_conv"


def _mm_macs(base: str, args: tuple) -> tuple[int, bool]:
    """MACs of a matrix product and whether a bias/accumulator is added."""
    if base in ("addmm", "baddbmm", "_addmm_activation", "addbmm", "addmv"):
        a, b = args[1], args[2]
        bias = True
    else:
        a, b = args[0], args[1]
        bias = base == "linear" and len(args) > 2 and args[2] is not None
    if base in ("dot",):
        return _numel(a), False
    if base in ("mv", "addmv"):
        return _numel(a), bias
    if base == "linear":
        return _numel(a) * int(b.shape[0]), bias
    return _numel(a) * int(b.shape[-1]), bias


def _attention_macs(args: tuple) -> int:
    q, k, v = args[0], args[1], args[2]
    lead = math.prod(int(s) for s in q.shape[:-2])
    return lead * int(q.shape[-2]) * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))


def classify(func: Any, args: tuple, kwargs: dict, outs: list[Any], in_tensors: list[Any],
             mode: str) -> tuple[str, int, float, dict[str, int] | None]:
    """(kind, MACs, FLOPs, conv geometry or None) of one aten op; `mode` is the pass."""
    base = op_base(func)
    out_n = sum(_numel(o) for o in outs[:1]) if outs else 0
    if base in _CONV:
        if base == "convolution_backward":
            geo, macs_fwd, _ = _conv_geometry(base, args, kwargs)
            mask = list(args[10]) if len(args) > 10 else [True, True, True]
            n_grads = int(bool(mask[0])) + int(bool(mask[1]))
            bias_flops = _numel(args[0]) if len(mask) > 2 and mask[2] else 0
            return _conv_kind(geo), n_grads * macs_fwd, 2.0 * n_grads * macs_fwd + bias_flops, geo
        geo, macs, transposed = _conv_geometry(base, args, kwargs)
        if macs < 0:
            macs = out_n * int(args[1].shape[1]) * math.prod(int(s) for s in args[1].shape[2:])
        # 2 * MACs, bias excluded: the same formula as the single-layer table (src/ingest/layers.py conv_cost)
        return _conv_kind(geo), macs, 2.0 * macs, geo
    if base in _MM:
        macs, bias = _mm_macs(base, args)
        return "matmul", macs, 2.0 * macs + (out_n if bias else 0), None
    if "scaled_dot_product" in base or "flash_attention" in base or "efficient_attention" in base:
        macs = _attention_macs(args[1:] if base.endswith("_backward") else args)
        if base.endswith("_backward"):
            macs *= 2
        return "attention", macs, 2.0 * macs, None
    if func_is_view(func) or base in _NO_KERNEL:
        return ("alloc" if base in _ALLOC else "view"), 0, 0.0, None
    in_n = sum(_numel(t) for t in in_tensors[:1])
    if base in _NORM:
        per = 8 if "backward" in base else (7 if mode == "train_forward" else 2)
        return "norm", 0, float(per * (in_n or out_n)), None
    if base in _POOL:
        if "adaptive" in base:
            return "pool", 0, float(in_n), None
        if "backward" in base:
            return "pool", 0, float(_numel(args[0]) * math.prod(_pair(args[2]))), None
        return "pool", 0, float(out_n * math.prod(_pair(args[1]))), None
    if base in _SOFTMAX:
        return "activation", 0, 5.0 * out_n, None
    if base in _ACT:
        return "activation", 0, float(out_n), None
    if base in ("add", "add_") and len(in_tensors) >= 2 and all(_numel(t) == out_n for t in in_tensors[:2]):
        return "add", 0, float(out_n), None
    if base in _ELEMENTWISE:
        return "elementwise", 0, float(out_n), None
    if base in _CONCAT:
        return "concat", 0, 0.0, None
    if base in _REDUCE:
        return "reduction", 0, float(in_n), None
    if base in _COPY:
        return "copy", 0, 0.0, None
    if base in _PAD:
        return "pad", 0, 0.0, None
    if base in _RESAMPLE or base.startswith("upsample"):
        return "resample", 0, 0.0, None
    if base in _INDEX:
        return "index", 0, 0.0, None
    if base in _RANDOM:
        return "random", 0, 0.0, None
    if base in _FILL:
        return "fill", 0, 0.0, None
    return "other", 0, 0.0, None


def func_is_view(func: Any) -> bool:
    try:
        return bool(func.is_view)
    except AttributeError:
        return False


# ---- recording -------------------------------------------------------------------------------------------------
@dataclass
class OpRecord:
    """One executed aten op of one pass at one batch size."""

    op: str
    kind: str
    launches_kernel: bool
    macs: float
    flops: float
    in_elems: float
    weight_elems: float
    out_elems: float
    other_bytes: float
    param_elems_new: float
    out_shape: str
    conv: dict[str, int] | None = None


_WRITE_ONLY_SELF = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "exponential_"}


def _is_float(t: Any) -> bool:
    return bool(t.is_floating_point() or t.is_complex())


class Recorder:
    """TorchDispatchMode body: records every op; knows which tensors are weights (or computed from weights)."""

    def __init__(self, weights: dict[int, tuple[Any, bool]]) -> None:
        # id -> (tensor, trainable) for parameters and floating buffers (kept alive by the model)
        self.weights = weights
        self.derived: dict[int, weakref.ref] = {}
        self.seen_params: set[int] = set()
        self.records: list[OpRecord] = []
        self.mode = "forward"

    def start(self, mode: str) -> None:
        self.mode = mode
        self.records = []
        self.seen_params = set()

    def _is_weight(self, t: Any) -> bool:
        w = self.weights.get(id(t))
        if w is not None and w[0] is t:
            return True
        ref = self.derived.get(id(t))
        return ref is not None and ref() is t

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        base = op_base(func)
        ins, seen = [], set()
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, torch.Tensor) and id(a) not in seen:
                seen.add(id(a))
                ins.append(a)
        outs, seen_o = [], set()
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor) and id(o) not in seen_o:
                seen_o.add(id(o))
                outs.append(o)
        kind, macs, flops, geo = classify(func, args, kwargs, outs, ins, self.mode)
        launches = kind not in ("view", "alloc")
        in_e = w_e = out_e = other = 0
        new_params = 0
        all_weight = bool(ins)
        skip_self = base in _WRITE_ONLY_SELF and ins
        for i, t in enumerate(ins):
            is_w = self._is_weight(t)
            all_weight = all_weight and is_w
            entry = self.weights.get(id(t))
            if entry is not None and entry[0] is t and entry[1] and id(t) not in self.seen_params:
                self.seen_params.add(id(t))
                new_params += _numel(t)
            if not launches or (skip_self and i == 0):
                continue
            n = _distinct(t)
            if not _is_float(t):
                other += n * t.element_size()
            elif is_w:
                w_e += n
            else:
                in_e += n
        if launches:
            for o in outs:
                if _is_float(o):
                    out_e += _numel(o)
                else:
                    other += _numel(o) * o.element_size()
        if all_weight:  # outputs computed from weights alone (transposed / standardized weights, views of them)
            for o in outs:
                self.derived[id(o)] = weakref.ref(o)
        shape = "x".join(str(int(s)) for s in outs[0].shape) if outs else ""
        self.records.append(OpRecord(str(func).removeprefix("aten."), kind, launches, float(macs), float(flops),
                                     float(in_e), float(w_e), float(out_e), float(other), float(new_params),
                                     shape, geo))


def _mode_class(recorder: Recorder) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            recorder.record(func, args, kwargs, out)
            return out

    return Mode


# ---- building on meta ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _keras_meta() -> Iterator[None]:
    """Run Keras (torch backend) on the meta device with a torch.device object as Keras' device.

    keras.device("meta") sets the string "meta", which Keras compares with `tensor.device` (a torch.device):
    never equal, so every variable is replaced by an `empty_like` copy, which detaches it from autograd. A
    torch.device object compares equal and keeps the parameters (and their gradients) as they are.
    """
    import torch
    from keras.src.backend.common import global_state

    prev = global_state.get_global_attribute("torch_device", None)
    global_state.set_global_attribute("torch_device", torch.device("meta"))
    try:
        yield
    finally:
        global_state.set_global_attribute("torch_device", prev)


@contextlib.contextmanager
def _keras_channels_first() -> Iterator[None]:
    """Build Keras applications channels_first, the layout TensorFlow's GPU convolutions run in.

    tf_cnn_benchmarks runs NCHW on GPUs and cuDNN's convolutions take NCHW; Keras' default channels_last, on
    the torch backend, wraps every convolution in two layout copies of its activations that no TensorFlow GPU
    run executes."""
    import keras

    prev = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        yield
    finally:
        keras.config.set_image_data_format(prev)


def _fused_keras_batch_norm(original: Any) -> Any:
    """BatchNormalization.call as one native batch norm (TensorFlow's FusedBatchNormV3), not Keras' torch spelling.

    Keras' torch backend computes a batch norm as seven elementwise kernels (sub, add, rsqrt, mul, ...) and, in
    training, its moments as separate reductions; TensorFlow on a GPU runs one fused cuDNN batch-norm kernel in
    inference and training (tf.keras and tf_cnn_benchmarks use `fused=True` for 4-D inputs). So a Keras CNN's
    table has the same `norm` op as a torch CNN's. Masked, renormalised or non-4-D inputs keep Keras' own ops."""
    import torch

    def call(self: Any, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        if mask is not None or getattr(self, "renorm", False) or inputs.ndim != 4:
            return original(self, inputs, training=training, mask=mask)
        axis = self.axis if self.axis >= 0 else inputs.ndim + self.axis
        x = inputs if axis == 1 else torch.movedim(inputs, axis, 1)  # a view: no kernel
        y = torch.nn.functional.batch_norm(
            x, self.moving_mean.value, self.moving_variance.value,
            weight=self.gamma.value if self.scale else None, bias=self.beta.value if self.center else None,
            training=bool(training and self.trainable), momentum=1.0 - float(self.momentum), eps=float(self.epsilon))
        return y if axis == 1 else torch.movedim(y, 1, axis)

    return call


@contextlib.contextmanager
def _keras_fused_batch_norm() -> Iterator[None]:
    from keras.src.layers.normalization.batch_normalization import BatchNormalization

    original = BatchNormalization.call
    BatchNormalization.call = _fused_keras_batch_norm(original)
    try:
        yield
    finally:
        BatchNormalization.call = original


def build_meta(source: str, name: str, input_size: int | None) -> tuple[Built, str]:
    """Build a model with random-free meta weights; returns (built, how) with how = 'meta' or 'cpu_to_meta'
    ('graph' for an ONNX file, which is read as it is: src/zoo/onnx_layers.py).

    torch models are constructed under `torch.device("meta")`; a constructor that needs real values (`.item()`
    on an init tensor) is built on the CPU and moved to meta. Keras applications are built under
    `keras.device("meta")` on the torch backend (JAX-only ones raise UnsupportedModelError).
    """
    from src.zoo.names import check_source
    from src.zoo.resolve import build

    src = check_source(source)
    if src == "onnx":  # a graph, not a definition to run: src/zoo/onnx_layers.py reads it as it is
        return build(src, name, input_size), "graph"
    if src == "keras":
        try:
            import keras
        except ImportError as exc:
            raise MissingFrameworkError("keras is not installed: install the zoo extra") from exc
        if keras.backend.backend() != "torch":
            raise UnsupportedModelError(f"per-layer tables need Keras' torch backend (this process uses "
                                        f"{keras.backend.backend()!r})")
        with keras.device("meta"), _keras_channels_first():
            built = build(src, name, input_size)
        return built, "meta"
    try:
        import torch
    except ImportError as exc:
        raise MissingFrameworkError("torch is not installed: install the zoo extra") from exc
    from src.zoo.names import UnknownModelError

    try:
        with torch.device("meta"):
            built = build(src, name, input_size)
        return built, "meta"
    except (MissingFrameworkError, UnsupportedModelError, UnknownModelError):
        raise
    except Exception:  # noqa: BLE001 - a constructor that needs real values: build on the CPU instead
        pass
    built = build(src, name, input_size)
    built.module.to("meta")
    return built, "cpu_to_meta"


def _weights_of(built: Built) -> dict[int, tuple[Any, bool]]:
    found: dict[int, tuple[Any, bool]] = {}
    mod = built.module
    if mod is not None:
        for p in mod.parameters():
            found[id(p)] = (p, bool(p.requires_grad))
        for b in mod.buffers():  # running statistics; integer counters are priced as other_bytes
            found.setdefault(id(b), (b, False))
    if built.keras_model is not None:
        for w in built.keras_model.weights:
            v = w.value
            found[id(v)] = (v, bool(w.trainable))
    return found


def _zero_grads(weights: dict[int, tuple[Any, bool]]) -> None:
    for t, _ in weights.values():
        if getattr(t, "grad", None) is not None:
            t.grad = None


def _set_training(built: Built, training: bool) -> None:
    if built.module is not None and built.keras_model is None:
        built.module.train(training)


def _forward(built: Built, x: Any, training: bool) -> Any:
    if built.keras_model is not None:
        return built.keras_model(x, training=training)
    return built.module(x)


def _tensor_outputs(out: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    if hasattr(out, "_asdict"):
        out = tuple(out)
    return [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]


def record_passes(built: Built, batch: int, passes: tuple[str, ...] = PASSES) -> dict[str, list[OpRecord]]:
    """Run the requested passes at one batch size on the meta device; the ops of each pass."""
    import torch

    weights = _weights_of(built)
    rec = Recorder(weights)
    mode_cls = _mode_class(rec)
    shape = (batch, *built.input_shape[1:])
    keras = built.keras_model is not None
    result: dict[str, list[OpRecord]] = {}
    with _keras_meta() if keras else contextlib.nullcontext(), \
            _keras_fused_batch_norm() if keras else contextlib.nullcontext():
        if "forward" in passes:
            x = torch.empty(shape, device="meta")
            _set_training(built, False)
            rec.start("forward")
            with torch.no_grad(), mode_cls():
                _forward(built, x, training=False)
            result["forward"] = rec.records
        if "train_forward" in passes or "backward" in passes:
            x = torch.empty(shape, device="meta")
            _zero_grads(weights)
            _set_training(built, True)
            rec.start("train_forward")
            try:
                with torch.enable_grad(), mode_cls():
                    out = _forward(built, x, training=True)
            finally:
                _set_training(built, False)
            result["train_forward"] = rec.records
            if "backward" in passes:
                outs = _tensor_outputs(out)
                if not outs:
                    raise UnsupportedModelError("training forward returned no tensor that requires grad")
                seeds = [torch.ones_like(o) for o in outs]  # made outside the mode: not part of the step
                rec.start("backward")
                with mode_cls():
                    torch.autograd.backward(outs, seeds)
                result["backward"] = rec.records
                _zero_grads(weights)
            del out
    return result


# ---- fitting two batch sizes -----------------------------------------------------------------------------------
class BatchMismatchError(RuntimeError):
    """The op sequence of a pass differs between the two batch sizes (no per-op intercept + slope)."""


LINEAR_FIELDS = ("macs", "flops", "in_elems", "out_elems", "other_bytes")
CONV_FIELDS = ("c_in", "c_out", "kernel_r", "kernel_s", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h",
               "dilation_w", "groups", "in_h", "in_w")


def fit_pass(lo: list[OpRecord], hi: list[OpRecord], b_lo: int, b_hi: int) -> list[dict[str, Any]]:
    """Per-op rows with q_fixed + q_per_sample * batch from the records of two batch sizes."""
    if len(lo) != len(hi) or any(a.op != b.op for a, b in zip(lo, hi, strict=True)):
        n = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a.op != b.op), min(len(lo), len(hi)))
        raise BatchMismatchError(
            f"op sequence differs between batch {b_lo} ({len(lo)} ops) and {b_hi} ({len(hi)} ops) from op {n}: "
            f"{lo[n].op if n < len(lo) else '-'} vs {hi[n].op if n < len(hi) else '-'}")
    rows = []
    d = float(b_hi - b_lo)
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        row: dict[str, Any] = {"op_index": i, "op": a.op, "kind": a.kind, "launches_kernel": a.launches_kernel}
        for f in LINEAR_FIELDS:
            qa, qb = getattr(a, f), getattr(b, f)
            slope = (qb - qa) / d
            row[f"{f}_per_sample"] = slope
            row[f"{f}_fixed"] = qa - slope * b_lo
        row["weight_elems"] = a.weight_elems
        row["param_elems_new"] = a.param_elems_new
        row["out_shape"] = a.out_shape
        for f in CONV_FIELDS:
            row[f] = a.conv[f] if a.conv else None
        rows.append(row)
    return rows


def layer_rows(built: Built, passes: tuple[str, ...] = PASSES) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """All rows of one built model (every pass), plus notes (batch pairs used)."""
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    infer = tuple(p for p in passes if p == "forward")
    train = tuple(p for p in passes if p != "forward")
    plans = []
    if infer:
        plans.append((infer, [INFER_BATCHES, INFER_BATCHES_FALLBACK]))
    if train:
        plans.append((train, [TRAIN_BATCHES]))
    for which, pairs in plans:
        last: Exception | None = None
        for b_lo, b_hi in pairs:
            lo = record_passes(built, b_lo, which)
            hi = record_passes(built, b_hi, which)
            try:
                fitted = {p: fit_pass(lo[p], hi[p], b_lo, b_hi) for p in which}
            except BatchMismatchError as exc:
                last = exc
                continue
            for p in which:
                for r in fitted[p]:
                    rows.append({"pass": p, **r, "batch_lo": b_lo, "batch_hi": b_hi})
            notes[",".join(which)] = (b_lo, b_hi)
            last = None
            break
        if last is not None:
            raise last
    return rows, notes


def layer_table(source: str, name: str, input_size: int | None = None, passes: tuple[str, ...] | None = None,
                built: Built | None = None) -> Any:
    """The per-layer DataFrame of one model (default: all passes; an ONNX file: the forward pass, all it has);
    `attrs` hold source, model, img_size, seconds."""
    import pandas as pd

    t0 = time.perf_counter()
    how = "given"
    if built is None:
        built, how = build_meta(source, name, input_size)
    if built.framework == "onnx":
        from src.zoo.onnx_layers import onnx_layer_table

        return onnx_layer_table(built, passes or ("forward",))
    rows, notes = layer_rows(built, passes or PASSES)
    df = pd.DataFrame(rows)
    df.insert(0, "zoo_model", built.spec.name)
    df.insert(0, "zoo_source", built.spec.source)
    df.insert(0, "img_size", int(built.input_size))
    df.attrs.update({"source": built.spec.source, "model": built.spec.name, "img_size": int(built.input_size),
                     "framework": built.framework, "build": how, "batches": notes,
                     "seconds": time.perf_counter() - t0})
    return df


# ---- using a table ---------------------------------------------------------------------------------------------
def at_batch(df: Any, quantity: str, batch: int) -> Any:
    """quantity_fixed + quantity_per_sample * batch (weight_elems / param_elems_new do not scale)."""
    if quantity in ("weight_elems", "param_elems_new"):
        return df[quantity].astype("float64")
    return df[f"{quantity}_fixed"].astype("float64") + df[f"{quantity}_per_sample"].astype("float64") * batch


def bytes_per_element(precision: str) -> int:
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError as exc:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(BYTES_PER_ELEMENT)}") from exc


def price(df: Any, batch: int, precision: str = "fp32") -> Any:
    """Per-op MACs, FLOPs and bytes read/written at a batch size and precision (the documented bytes rule)."""
    e = bytes_per_element(precision)
    out = df.copy()
    out["macs"] = at_batch(df, "macs", batch)
    out["flops"] = at_batch(df, "flops", batch)
    other = at_batch(df, "other_bytes", batch)
    out["bytes_read_inputs"] = at_batch(df, "in_elems", batch) * e
    out["bytes_read_weights"] = df["weight_elems"].astype("float64") * e
    out["bytes_written"] = at_batch(df, "out_elems", batch) * e
    out["bytes_other"] = other
    out["bytes"] = out["bytes_read_inputs"] + out["bytes_read_weights"] + out["bytes_written"] + other
    return out


def sums(df: Any, batch: int = 1, precision: str = "fp32") -> dict[str, dict[str, float]]:
    """Per pass: MACs, FLOPs, bytes, kernel launches, ops, trainable params used, activations (static defs)."""
    priced = price(df, batch, precision)
    out: dict[str, dict[str, float]] = {}
    for p, g in priced.groupby("pass", sort=False, observed=True):
        mac = g["kind"].isin(MAC_KINDS)
        out[str(p)] = {
            "ops": int(len(g)),
            "kernels": int(g["launches_kernel"].sum()),
            "macs": float(g["macs"].sum()),
            "gmacs": float(g["macs"].sum()) / 1e9,
            "flops": float(g["flops"].sum()),
            "bytes": float(g["bytes"].sum()),
            "bytes_read_inputs": float(g["bytes_read_inputs"].sum()),
            "bytes_read_weights": float(g["bytes_read_weights"].sum()),
            "bytes_written": float(g["bytes_written"].sum()),
            "params_used": float(g["param_elems_new"].sum()),
            "activations": float(at_batch(g.loc[mac], "out_elems", batch).sum()),
        }
    return out


# Column types of the committed table (compact parquet: categoricals, float32 quantities, small ints).
CATEGORICAL = ("model_key", "zoo_source", "zoo_model", "pass", "op", "kind", "out_shape", "layers_version")


def _text_category(column: Any) -> Any:
    """`column.astype("string").astype("category")`, converting each distinct value once (the table's text columns
    hold a few thousand values over millions of rows)."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(column)  # -1 where missing
    text = pd.Series(pd.array(np.asarray(uniques, dtype=object), dtype="string"))
    categories = pd.Index(text.drop_duplicates().sort_values(), dtype="string")
    remap = categories.get_indexer(text) if len(text) else np.zeros(0, dtype=np.intp)
    new_codes = np.where(codes >= 0, remap[np.clip(codes, 0, None)] if len(remap) else -1, -1)
    return pd.Series(pd.Categorical.from_codes(new_codes, categories=categories), index=column.index,
                     name=column.name)


def compact(df: Any) -> Any:
    """Categorical strings, float32 quantities and nullable small ints for the committed parquet."""
    import pandas as pd

    out = df.copy()
    for c in CATEGORICAL:
        if c in out.columns:
            out[c] = _text_category(out[c])
    for c in out.columns:
        if c.endswith(("_per_sample", "_fixed")) or c in ("weight_elems", "param_elems_new", "seconds"):
            out[c] = out[c].astype("float32")
    for c in CONV_FIELDS:
        if c in out.columns:
            out[c] = pd.array(out[c], dtype="Int32")
    for c, t in (("img_size", "int16"), ("op_index", "int32"), ("batch_lo", "int16"), ("batch_hi", "int16")):
        if c in out.columns:
            out[c] = out[c].astype(t)
    if "launches_kernel" in out.columns:
        out["launches_kernel"] = out["launches_kernel"].astype(bool)
    return out


@dataclass
class LayerResult:
    """What a worker returns for one target: rows (a DataFrame) or a failure, with timing."""

    rows: Any = None
    failure: dict[str, Any] | None = None
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
