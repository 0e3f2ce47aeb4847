"""Model names: which sources exist, which Keras applications we know, and how benchmark names map to definitions.

Pure Python (no heavy imports) so the CLI can reject a bad name before loading torch, Keras or TVM.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from src.ingest.models import REPARAM_SUFFIX, base_model_key, is_alias
from src.zoo.definitions import DEFINITIONS

SOURCES = ("keras", "torchvision", "timm", "onnx")

# Keras applications: constructor name -> default (square) input size. Sizes are Keras' own defaults.
KERAS_APPLICATIONS: dict[str, int] = {
    "Xception": 299,
    "VGG16": 224,
    "VGG19": 224,
    "ResNet50": 224,
    "ResNet101": 224,
    "ResNet152": 224,
    "ResNet50V2": 224,
    "ResNet101V2": 224,
    "ResNet152V2": 224,
    "InceptionV3": 299,
    "InceptionResNetV2": 299,
    "MobileNet": 224,
    "MobileNetV2": 224,
    "MobileNetV3Small": 224,
    "MobileNetV3Large": 224,
    "DenseNet121": 224,
    "DenseNet169": 224,
    "DenseNet201": 224,
    "NASNetMobile": 224,
    "NASNetLarge": 331,
    "EfficientNetB0": 224,
    "EfficientNetB1": 240,
    "EfficientNetB2": 260,
    "EfficientNetB3": 300,
    "EfficientNetB4": 380,
    "EfficientNetB5": 456,
    "EfficientNetB6": 528,
    "EfficientNetB7": 600,
    "EfficientNetV2B0": 224,
    "EfficientNetV2B1": 240,
    "EfficientNetV2B2": 260,
    "EfficientNetV2B3": 300,
    "EfficientNetV2S": 384,
    "EfficientNetV2M": 480,
    "EfficientNetV2L": 480,
    "ConvNeXtTiny": 224,
    "ConvNeXtSmall": 224,
    "ConvNeXtBase": 224,
    "ConvNeXtLarge": 224,
    "ConvNeXtXLarge": 224,
}

# Keras applications that refuse the torch backend (their reduction cells use padding Keras' torch backend
# does not implement); they are built on the JAX backend, in a subprocess (Keras' backend is process-global).
KERAS_JAX_ONLY = frozenset({"NASNetMobile", "NASNetLarge"})

# torchvision classification models (torchvision.models.list_models(module=torchvision.models), 0.29).
TORCHVISION_MODELS = frozenset({
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny", "densenet121",
    "densenet161", "densenet169", "densenet201", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
    "efficientnet_b3", "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "mobilenet_v3_large",
    "mobilenet_v3_small", "regnet_x_16gf", "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf",
    "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf", "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf",
    "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf", "resnet101",
    "resnet152", "resnet18", "resnet34", "resnet50", "resnext101_32x8d", "resnext101_64x4d",
    "resnext50_32x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t", "swin_v2_b", "swin_v2_s", "swin_v2_t",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "vit_b_16",
    "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2",
})

# Benchmark-suite names (tf_cnn_benchmarks via Lambda; DLInfBench) -> a buildable definition.
# tf_cnn_benchmarks models are TensorFlow ones, so Keras applications are used where Keras has them.
TF_CNN_BENCHMARKS: dict[str, tuple[str, str]] = {
    "resnet50": ("keras", "ResNet50"),
    "resnet101": ("keras", "ResNet101"),
    "resnet152": ("keras", "ResNet152"),
    "vgg16": ("keras", "VGG16"),
    "vgg19": ("keras", "VGG19"),
    "inception3": ("keras", "InceptionV3"),
    "inception4": ("timm", "inception_v4"),
    "alexnet": ("torchvision", "alexnet"),
    "googlenet": ("torchvision", "googlenet"),
    "mobilenet": ("keras", "MobileNet"),
    "densenet121": ("keras", "DenseNet121"),
    "nasnet": ("keras", "NASNetMobile"),
    "nasnetlarge": ("keras", "NASNetLarge"),
}
# DLInfBench measured caffe/mxnet/pytorch/tensorflow ports of the classic nets; torchvision has them all but
# BN-Inception, which is approximated by torchvision's GoogLeNet (Inception v1 with batch norm): an
# approximation, documented in docs/zoo.md.
DLINFBENCH: dict[str, tuple[str, str]] = {
    "alexnet": ("torchvision", "alexnet"),
    "inception_bn": ("torchvision", "googlenet"),
    "inception_v3": ("torchvision", "inception_v3"),
    "resnet50": ("torchvision", "resnet50"),
    "resnet101": ("torchvision", "resnet101"),
    "resnet152": ("torchvision", "resnet152"),
    "vgg16": ("torchvision", "vgg16"),
    "vgg19": ("torchvision", "vgg19"),
}

# timm names whose deprecation alias builds another network: timm 1.0.31 maps ig_resnext101_32x16d/32x32d/32x48d
# all to resnext101_32x8d (88.8 M parameters instead of 194 / 469 / 828 M). Name -> (timm arch, constructor
# arguments); 32x48d has no timm arch of its own, so it is 32x16d's constructor with base_width 48.
TIMM_FIXED_ALIASES: dict[str, tuple[str, dict]] = {
    "ig_resnext101_32x16d": ("resnext101_32x16d", {}),
    "ig_resnext101_32x32d": ("resnext101_32x32d", {}),
    "ig_resnext101_32x48d": ("resnext101_32x16d", {"base_width": 48}),
}


class UnknownModelError(ValueError):
    """A model or source name the zoo cannot resolve; the message names it and the closest known names."""


@dataclass(frozen=True)
class ModelSpec:
    """What to build: a definition in one source, at one square input size (None = the model's default)."""

    source: str
    name: str
    input_size: int | None = None


def suggest(name: str, known: list[str] | set[str] | frozenset[str], n: int = 5) -> list[str]:
    """Closest known names (case-insensitive), best first."""
    by_lower = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    return [by_lower[h] for h in hits]


def check_source(source: str) -> str:
    """Return the canonical source name or raise naming the valid ones."""
    s = source.strip().lower()
    aliases = {"keras_applications": "keras", "tf.keras": "keras", "tv": "torchvision"}
    s = aliases.get(s, s)
    if s not in SOURCES:
        raise UnknownModelError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    return s


def keras_name(name: str) -> str:
    """Canonical Keras application name (case-insensitive), or UnknownModelError with close matches."""
    by_lower = {k.lower(): k for k in KERAS_APPLICATIONS}
    key = name.strip().lower().replace("_", "").replace("-", "")
    if key in by_lower:
        return by_lower[key]
    close = suggest(name, set(KERAS_APPLICATIONS))
    raise UnknownModelError(
        f"unknown Keras application {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
    )


def torchvision_name(name: str) -> str:
    """Canonical torchvision classification model name, or UnknownModelError with close matches."""
    key = name.strip().lower().replace("-", "_")
    if key in TORCHVISION_MODELS:
        return key
    close = suggest(key, TORCHVISION_MODELS)
    raise UnknownModelError(
        f"unknown torchvision model {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
    )


def benchmark_alias(model_key: str, model_source: str) -> tuple[str, str] | None:
    """Definition for a tf_cnn_benchmarks / dlinfbench model key, or None when the suite has no mapping."""
    key = model_key.strip().lower().replace("-", "_")
    if model_source == "tf_cnn_benchmarks":
        return TF_CNN_BENCHMARKS.get(key)
    if model_source == "dlinfbench":
        return DLINFBENCH.get(key)
    return None


def spec_for_measured(model: str, model_key: str, model_source: str, img_size: int) -> ModelSpec | None:
    """The definition to build for one measured model (None when no source can build it)."""
    if model_source == "timm":
        if model_key in DEFINITIONS:  # written down from its source: PaddleClas spellings, removed timm names
            return ModelSpec("timm", model_key, img_size)
        # the re-parameterised inference form the row measured (src.ingest.models.REPARAM_SUFFIX)
        form = REPARAM_SUFFIX if model_key.endswith(REPARAM_SUFFIX) else ""
        name = model.split(".", 1)[0]
        if is_alias(name):
            name = base_model_key(model_key)  # a legacy or misnamed spelling: build the network the row ran
        return ModelSpec("timm", name + form, img_size)
    if model_source == "mlperf" and model_key in DEFINITIONS:  # MLPerf's RetinaNet, written down from its reference
        return ModelSpec("timm", model_key, img_size)
    if model_source == "torchvision":
        key = model_key.replace("-", "_")
        return ModelSpec("torchvision", key, img_size) if key in TORCHVISION_MODELS else None
    alias = benchmark_alias(model_key, model_source)
    return ModelSpec(alias[0], alias[1], img_size) if alias else None
