"""How each aten operator counts in a per-layer table: its kind, MACs, FLOPs and, for a convolution, its geometry.

`classify` is the one place these rules live, so the meta-device recorder (src/zoo/layers.py) and the tables
built from it agree on what a "conv" or a FLOP is; ONNX tables (src/zoo/onnx_layers.py) follow the same kinds and
`FLOP_RULES`. Only the MAC kinds are exact; the FLOPs of the other kinds are documented approximations. A change
here that alters a row's kind, MACs or FLOPs must bump `src.zoo.layers.LAYERS_VERSION`, so that committed rows are
rebuilt.
"""

from __future__ import annotations

import math
from typing import Any

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

# Conv geometry columns of a row (the keys `_conv_geometry` returns; null for every other op).
CONV_FIELDS = ("c_in", "c_out", "kernel_r", "kernel_s", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h",
               "dilation_w", "groups", "in_h", "in_w")

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


def numel(t: Any) -> int:
    """Elements of a tensor's shape (meta tensors have shapes, not data)."""
    return int(math.prod(int(s) for s in t.shape))


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    """An aten int-or-list argument (stride, padding, kernel size) as n ints, the last repeated."""
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
        macs = numel(x) * int(w.shape[1]) * k
    else:
        out_numel = numel(y) if y is not None else None
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
        return numel(a), False
    if base in ("mv", "addmv"):
        return numel(a), bias
    if base == "linear":
        return numel(a) * int(b.shape[0]), bias
    return numel(a) * int(b.shape[-1]), bias


def _attention_macs(args: tuple) -> int:
    q, k, v = args[0], args[1], args[2]
    lead = math.prod(int(s) for s in q.shape[:-2])
    return lead * int(q.shape[-2]) * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))


def classify(func: Any, args: tuple, kwargs: dict, outs: list[Any], in_tensors: list[Any],
             mode: str) -> tuple[str, int, float, dict[str, int] | None]:
    """(kind, MACs, FLOPs, conv geometry or None) of one aten op; `mode` is the pass."""
    base = op_base(func)
    out_n = sum(numel(o) for o in outs[:1]) if outs else 0
    if base in _CONV:
        if base == "convolution_backward":
            geo, macs_fwd, _ = _conv_geometry(base, args, kwargs)
            mask = list(args[10]) if len(args) > 10 else [True, True, True]
            n_grads = int(bool(mask[0])) + int(bool(mask[1]))
            bias_flops = numel(args[0]) if len(mask) > 2 and mask[2] else 0
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
    in_n = sum(numel(t) for t in in_tensors[:1])
    if base in _NORM:
        per = 8 if "backward" in base else (7 if mode == "train_forward" else 2)
        return "norm", 0, float(per * (in_n or out_n)), None
    if base in _POOL:
        if "adaptive" in base:
            return "pool", 0, float(in_n), None
        if "backward" in base:
            return "pool", 0, float(numel(args[0]) * math.prod(_pair(args[2]))), None
        return "pool", 0, float(out_n * math.prod(_pair(args[1]))), None
    if base in _SOFTMAX:
        return "activation", 0, 5.0 * out_n, None
    if base in _ACT:
        return "activation", 0, float(out_n), None
    if base in ("add", "add_") and len(in_tensors) >= 2 and all(numel(t) == out_n for t in in_tensors[:2]):
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
    """Whether an aten overload returns a view of its input (no kernel); an op without the flag is not one."""
    try:
        return bool(func.is_view)
    except AttributeError:
        return False
