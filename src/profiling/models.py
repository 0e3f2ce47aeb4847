"""Which CNNs the profiler builds, and how a model name becomes a torch.nn.Module.

Resolution order for a name: the project's model zoo (`src.zoo`, when importable and it knows the name), then
torchvision, then timm. A prefix pins the source: `torchvision:resnet50`, `timm:resnet50.a1_in1k`,
`keras:ResNet50V2` (Keras applications exist only through the zoo), `py:package.module:factory` (any function
returning a torch.nn.Module; its `img_size` attribute, default 224, sets the input size). Weights are never
downloaded: timing and instruction counts do not depend on the weight values.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from src.ingest.models import model_family, model_key

# CNNs of the public sources we ingest, as torchvision names: ryujaehun/pytorch-gpu-benchmark's 32-model set
# plus nicklhy/DLInfBench's torchvision networks (alexnet, vgg16/19, inception_v3, resnet50/101/152).
TORCHVISION_PUBLIC_MODELS: list[str] = [
    "alexnet", "inception_v3",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2",
    "densenet121", "densenet169", "densenet201", "densenet161",
    "squeezenet1_0", "squeezenet1_1",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "mobilenet_v2", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
]

# Keras applications CNNs used as the paper's Keras CNN set unless the zoo publishes its own list
# (`src.zoo.PAPER_MODELS`). They resolve only through the zoo (Keras 3, torch backend, NHWC input, inference
# only). NASNetMobile/NASNetLarge are left out: Keras builds them only on the JAX backend, not in PyTorch.
KERAS_FALLBACK_MODELS: list[str] = [
    "keras:" + n for n in (
        "VGG16", "VGG19", "ResNet50", "ResNet101", "ResNet152", "ResNet50V2", "ResNet101V2", "ResNet152V2",
        "InceptionV3", "InceptionResNetV2", "Xception", "MobileNet", "MobileNetV2", "DenseNet121",
        "DenseNet169", "DenseNet201", "EfficientNetB0",
    )
]

# Input resolutions that differ from 224 for names we may have to resolve without the zoo.
_IMG_SIZE = {"inception_v3": 299}


class ModelResolutionError(LookupError):
    """A model name that no available source can build; the message says what was tried."""


@dataclass
class ResolvedModel:
    """A buildable model: `build()` returns a fresh torch.nn.Module on the CPU in fp32."""

    name: str
    model_source: str
    family: str
    img_size: int
    build: Callable[[], Any]
    channels_last_input: bool = False  # Keras models take (N, H, W, C) inputs
    supports_training: bool = True  # the zoo's Keras wrapper always calls the model with training=False

    @property
    def key(self) -> str:
        return model_key(self.name)


def custom_model(name: str, factory: Callable[[], Any], img_size: int, family: str | None = None) -> ResolvedModel:
    """Wrap a module factory (tests, notebooks) so the harness can time it like a zoo model."""
    return ResolvedModel(name=name, model_source="custom", family=family or model_family(name),
                         img_size=img_size, build=factory)


def _zoo() -> Any | None:
    try:
        return importlib.import_module("src.zoo")
    except ModuleNotFoundError as exc:
        if exc.name in ("src.zoo", "src"):
            return None
        raise


def default_models() -> list[str]:
    """The default list: the paper's Keras CNNs (from the zoo when it publishes them) + torchvision public set."""
    zoo = _zoo()
    paper = list(getattr(zoo, "PAPER_MODELS", [])) if zoo is not None else []
    return (paper or KERAS_FALLBACK_MODELS) + ["torchvision:" + n for n in TORCHVISION_PUBLIC_MODELS]


def _from_zoo(source: str | None, name: str, tried: list[str]) -> ResolvedModel | None:
    """Keras applications and torchvision models through src.zoo (names checked without building)."""
    zoo = _zoo()
    if zoo is None:
        tried.append("src.zoo (not importable)")
        return None
    names = importlib.import_module("src.zoo.names")
    resolve = importlib.import_module("src.zoo.resolve")
    if source == "keras":
        try:
            canon = names.keras_name(name)
        except names.UnknownModelError as exc:
            raise ModelResolutionError(str(exc)) from None
        if canon in names.KERAS_JAX_ONLY:
            raise ModelResolutionError(f"keras:{canon} builds only on Keras' JAX backend, not as a torch module")

        def build_keras() -> Any:
            try:
                return resolve.build("keras", canon).module
            except resolve.MissingFrameworkError as exc:
                raise ModelResolutionError(f"keras:{canon}: {exc}") from None

        return ResolvedModel(name=canon, model_source="keras", family=model_family(canon),
                             img_size=int(names.KERAS_APPLICATIONS[canon]), build=build_keras,
                             channels_last_input=True, supports_training=False)
    if source in (None, "torchvision"):
        try:
            canon = names.torchvision_name(name)
        except names.UnknownModelError:
            tried.append("src.zoo torchvision (no such model)")
            return None
        try:
            importlib.import_module("torchvision")
        except Exception as exc:  # noqa: BLE001 - with CPU torch, torchvision fails with RuntimeError too
            tried.append(f"src.zoo torchvision (torchvision not importable: {type(exc).__name__}: "
                         f"{str(exc)[:120]})")
            return None
        return ResolvedModel(name=canon, model_source="torchvision", family=model_family(canon),
                             img_size=_IMG_SIZE.get(canon, 224),
                             build=lambda: resolve.build("torchvision", canon).module)
    return None


def _from_torchvision(name: str, tried: list[str]) -> ResolvedModel | None:
    try:
        models = importlib.import_module("torchvision.models")
    except Exception as exc:  # noqa: BLE001 - with CPU torch, torchvision fails with RuntimeError, not ImportError
        tried.append(f"torchvision (not importable: {type(exc).__name__}: {str(exc)[:120]})")
        return None
    if name not in models.list_models():
        tried.append("torchvision (no such model)")
        return None
    kwargs: dict[str, Any] = {"weights": None}
    if name == "inception_v3":
        kwargs["init_weights"] = False  # scipy truncnorm init is slow and irrelevant for timing
    return ResolvedModel(name=name, model_source="torchvision", family=model_family(name),
                         img_size=_IMG_SIZE.get(name, 224), build=lambda: models.get_model(name, **kwargs))


def _from_timm(name: str, tried: list[str]) -> ResolvedModel | None:
    try:
        timm = importlib.import_module("timm")
    except Exception as exc:  # noqa: BLE001
        tried.append(f"timm (not importable: {type(exc).__name__}: {str(exc)[:120]})")
        return None
    if not timm.is_model(name.split(".", 1)[0]):
        tried.append("timm (no such model)")
        return None
    cfg = timm.get_pretrained_cfg(name.split(".", 1)[0])
    img = int(cfg.input_size[-1]) if cfg is not None else 224
    return ResolvedModel(name=name, model_source="timm", family=model_family(name), img_size=img,
                         build=lambda: timm.create_model(name, pretrained=False))


def _from_python(spec: str) -> ResolvedModel:
    target = spec.partition(":")[2]
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ModelResolutionError(f"{spec!r}: expected py:package.module:factory")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ModelResolutionError(f"{spec!r}: cannot import {module_name}.{attr} ({exc})") from None
    if not callable(factory):
        raise ModelResolutionError(f"{spec!r}: {module_name}.{attr} is not callable")
    return custom_model(attr, factory, int(getattr(factory, "img_size", 224)))


def resolve_model(spec: str) -> ResolvedModel:
    """Resolve `[source:]name` (see module docstring); raise ModelResolutionError saying what was tried."""
    if spec.startswith("py:"):
        return _from_python(spec)
    source, _, name = spec.partition(":") if ":" in spec else (None, "", spec)
    if not name:
        raise ModelResolutionError(f"empty model name in {spec!r}")
    if source not in (None, "torchvision", "timm", "keras"):
        raise ModelResolutionError(f"unknown model source {source!r} in {spec!r}: use torchvision:, timm:, keras:, "
                                   "py:")
    tried: list[str] = []
    found = _from_zoo(source, name, tried)
    if found is None and source == "keras":
        raise ModelResolutionError(f"cannot build model {spec!r}: Keras models need src.zoo; tried {tried}")
    if found is None and source in (None, "torchvision") and _zoo() is None:
        found = _from_torchvision(name, tried)
    if found is None and source in (None, "timm"):
        found = _from_timm(name, tried)
    if found is not None:
        return found
    hint = ""
    if source in (None, "torchvision", "timm"):
        hint = (" torchvision/timm need the CUDA build of torch (torch>=2.14 from PyPI); the CPU build "
                "installed in .venv cannot import them.")
    raise ModelResolutionError(f"cannot build model {spec!r}: tried {'; '.join(tried)}.{hint}")
