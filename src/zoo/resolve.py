"""Model zoo resolver: (source, name, input size) -> a model definition with random weights.

Weights are never downloaded (pretrained=False / weights=None): the features we extract depend on the
architecture only. Heavy frameworks are imported lazily, so `src.zoo.names` and the CLI's error paths work
without them; a missing framework raises MissingFrameworkError naming the package to install.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from src.ingest.models import REPARAM_SUFFIX, REPARAMETERIZABLE, base_model_key, is_reparameterizable
from src.zoo.definitions import DEFINITIONS
from src.zoo.names import (
    KERAS_APPLICATIONS,
    KERAS_JAX_ONLY,
    TIMM_FIXED_ALIASES,
    ModelSpec,
    UnknownModelError,
    check_source,
    keras_name,
    suggest,
    torchvision_name,
)

# Keras picks its backend once per process, at import time; torch is the one TVM's exporter can read.
os.environ.setdefault("KERAS_BACKEND", "torch")


class MissingFrameworkError(RuntimeError):
    """A heavy framework needed for this source is not installed (install the `zoo` extra)."""


class UnsupportedModelError(RuntimeError):
    """The model exists but this route cannot handle it (the message says why)."""


@dataclass
class Built:
    """A model ready for analysis: a torch module (or Keras/ONNX model) plus its batch-1 input shape."""

    spec: ModelSpec
    input_size: int
    framework: str  # "torch", "keras-torch", "keras-jax", "onnx"
    input_shape: tuple[int, ...]  # batch 1; NCHW for torch/ONNX, NHWC for Keras
    module: Any = None  # torch.nn.Module taking one input tensor (torch and keras-torch)
    keras_model: Any = None
    onnx_model: Any = None
    notes: list[str] = field(default_factory=list)


def _require(pkg: str) -> Any:
    try:
        return __import__(pkg)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingFrameworkError(
            f"{pkg} is not installed: install the zoo extra (pip install -e '.[zoo]') to build models"
        ) from exc


def keras_backend() -> str:
    """The Keras backend this process uses (after import)."""
    keras = _require("keras")
    return keras.backend.backend()


class _KerasAsTorch:
    """Factory for a torch.nn.Module that calls a Keras (torch-backend) model in inference mode."""

    @staticmethod
    def wrap(model: Any) -> Any:
        import torch

        class KerasModule(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, x: Any) -> Any:
                return self.m(x, training=False)

        return KerasModule(model).eval()


def build_keras(name: str, input_size: int | None) -> Built:
    """Build a Keras application with weights=None at the given input size (None = Keras' default)."""
    canon = keras_name(name)
    keras = _require("keras")
    backend = keras.backend.backend()
    if canon in KERAS_JAX_ONLY and backend != "jax":
        raise UnsupportedModelError(
            f"{canon} builds only on Keras' JAX backend (this process uses {backend!r}); "
            "run with KERAS_BACKEND=jax (static features only: TVM reads torch.export or ONNX, not JAX)"
        )
    size = int(input_size or KERAS_APPLICATIONS[canon])
    ctor = getattr(keras.applications, canon)
    kwargs: dict[str, Any] = {"weights": None}
    # The image layout Keras is configured with (per-layer tables build channels_first, as TensorFlow GPUs run).
    shape = (3, size, size) if keras.config.image_data_format() == "channels_first" else (size, size, 3)
    if size != KERAS_APPLICATIONS[canon]:
        kwargs["input_shape"] = shape
    model = ctor(**kwargs)
    module = _KerasAsTorch.wrap(model) if backend == "torch" else None
    return Built(ModelSpec("keras", canon, size), size, f"keras-{backend}", (1, *shape),
                 module=module, keras_model=model)


def _torchvision_default_size(name: str) -> int:
    return 299 if name == "inception_v3" else 224


def build_torchvision(name: str, input_size: int | None) -> Built:
    """Build a torchvision classification model with weights=None."""
    canon = torchvision_name(name)
    tv = _require("torchvision")
    kwargs: dict[str, Any] = {"weights": None}
    if canon in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=False)
    model = tv.models.get_model(canon, **kwargs).eval()
    size = int(input_size or _torchvision_default_size(canon))
    return Built(ModelSpec("torchvision", canon, size), size, "torch", (1, 3, size, size), module=model)


def build_timm(name: str, input_size: int | None) -> Built:
    """Build a timm model with pretrained=False; the pretrained tag after '.' is ignored.

    A name ending in REPARAM_SUFFIX ('repvgg_a2+reparam') builds the re-parameterised inference form
    (timm.utils.reparameterize_model: branches and batch norms folded into convolutions), as timm's
    `benchmark.py --reparam` runs it. It needs real weights, so under torch's meta device it raises and
    layers.build_meta builds it on the CPU.
    """
    timm = _require("timm")
    arch = name.strip().split(".", 1)[0]
    if arch.endswith(REPARAM_SUFFIX):
        base = base_model_key(arch)
        if not is_reparameterizable(base):
            raise UnknownModelError(f"timm model {base!r} has no re-parameterised form (known: "
                                    f"{REPARAMETERIZABLE.pattern}); drop {REPARAM_SUFFIX!r} from {name!r}")
        built = build_timm(base, input_size)
        from timm.utils.model import reparameterize_model

        module = reparameterize_model(built.module, inplace=True).eval()
        return Built(ModelSpec("timm", arch, built.input_size), built.input_size, "torch", built.input_shape,
                     module=module, notes=[*built.notes, "re-parameterised: timm.utils.reparameterize_model"])
    ctor, kwargs = TIMM_FIXED_ALIASES.get(arch, (arch, {}))
    if not timm.is_model(ctor) and arch in DEFINITIONS:
        # an architecture no zoo names any more, written down from its source (src/zoo/definitions.py)
        definition = DEFINITIONS[arch]
        model = definition.build().eval()
        size = int(input_size or definition.img_size)
        notes = [f"definition: {definition.reference}"] + ([definition.approximation] if definition.approximation
                                                           else [])
        return Built(ModelSpec("timm", arch, size), size, "torch", (1, 3, size, size), module=model, notes=notes)
    if not timm.is_model(ctor):
        close = suggest(arch, timm.list_models())
        raise UnknownModelError(
            f"unknown timm model {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
        )
    model = timm.create_model(ctor, pretrained=False, **kwargs).eval()
    default = int(model.pretrained_cfg.get("input_size", (3, 224, 224))[-1])
    size = int(input_size or default)
    return Built(ModelSpec("timm", arch, size), size, "torch", (1, 3, size, size), module=model)


def build_onnx(path: str, input_size: int | None) -> Built:
    """Load an ONNX file (its graph and initializers; the weights in it are whatever the file holds)."""
    onnx = _require("onnx")
    if not os.path.exists(path):
        raise UnknownModelError(f"ONNX file {path!r} not found")
    model = onnx.load(path)
    inp = model.graph.input[0]
    dims = [d.dim_value if d.dim_value > 0 else None for d in inp.type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise UnsupportedModelError(f"{path}: input {inp.name!r} has rank {len(dims)}; expected NCHW (rank 4)")
    size = int(input_size or dims[-1] or 224)
    shape = (1, int(dims[1] or 3), size, size)
    return Built(ModelSpec("onnx", path, size), size, "onnx", shape, onnx_model=model)


def build(source: str, name: str, input_size: int | None = None) -> Built:
    """Resolve and build one model definition with random weights."""
    src = check_source(source)
    if input_size is not None and int(input_size) < 32:
        raise ValueError(f"input size {input_size} too small (expected >= 32 pixels)")
    return {"keras": build_keras, "torchvision": build_torchvision, "timm": build_timm,
            "onnx": build_onnx}[src](name, input_size)
