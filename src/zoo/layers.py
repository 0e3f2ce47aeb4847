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
Quantities are element counts, not bytes, so any precision can be priced later (src/zoo/layer_pricing.py):
`in_elems` (distinct elements of the activation inputs read), `weight_elems` (elements of parameters, buffers
and tensors computed only from them, e.g. a standardized or transposed weight), `out_elems` (elements
written), `other_bytes` (non-floating tensors: indices, masks, counters, at their own element size), `macs`
(conv / matmul / attention multiply-accumulates) and `flops` (kinds, MACs and FLOPs follow src/zoo/op_rules.py
and its `FLOP_RULES`). Each op is run at two batch sizes; a batch-dependent quantity q is stored as
`q_fixed + q_per_sample * batch` (the intercept holds the batch-independent part: weight gradients, BN
statistics, weight copies), so the table can be priced at any batch. Ops that launch no kernel (views, reshapes
that are views, `empty*` allocations) have zero traffic. `param_elems_new` counts the trainable parameters an op
reads for the first time in its pass (their sum over the forward pass is the trainable parameter count the model
uses). The bytes rule that prices the element counts is src/zoo/layer_pricing.py's.
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from src.zoo.op_rules import CONV_FIELDS, classify, numel, op_base
from src.zoo.resolve import Built, MissingFrameworkError, UnsupportedModelError

# Bump when a change alters rows (op classification and FLOP rules of src/zoo/op_rules.py, batch sizes): committed
# rows of another version are rebuilt by the `layers` stage.
LAYERS_VERSION = "2"
PASSES = ("forward", "train_forward", "backward")
# Batch pairs of the two runs each quantity is fitted from (intercept + slope). Batch 1 first for inference
# (batch-1 shapes are special: size-1 dims make more reshapes views); training needs batch >= 2 (BatchNorm
# refuses one value per channel in train mode).
INFER_BATCHES = (1, 8)
INFER_BATCHES_FALLBACK = (2, 8)
TRAIN_BATCHES = (2, 8)


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


def _distinct(t: Any) -> int:
    """Distinct elements a kernel reads from `t`: broadcast (stride-0) dimensions hold one element."""
    try:
        stride = t.stride()
    except (RuntimeError, NotImplementedError):  # sparse or other layouts: all elements
        return numel(t)
    return int(math.prod(int(s) for s, st in zip(t.shape, stride, strict=True) if st != 0))


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
                new_params += numel(t)
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
                    out_e += numel(o)
                else:
                    other += numel(o) * o.element_size()
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


@dataclass
class LayerResult:
    """What a worker returns for one target: rows (a DataFrame) or a failure, with timing."""

    rows: Any = None
    failure: dict[str, Any] | None = None
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
