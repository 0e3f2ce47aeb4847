"""Architectures that no installed zoo names any more, written down from their published definitions.

Why: 42 measured CNNs had no definition (`build: UnknownModelError` in `ptx_failures.csv` / `layers_failures.csv`):
PaddleClas variants that timm never had (ResNeXt-152, SE-ResNet-vd, MobileNet width multipliers, ...) and timm
names removed since the measurements were taken (`convnext_nano_hnf`, `*_iabn`, `nfnet_f0s`, ...). Their GPU rows
(339 PaddleClas rows, most of them TensorRT) were dropped for want of static features, or priced from
whole-network numbers. Each is the same family's timm (or torchvision) constructor with the hyperparameters its
source documents: depth, cardinality and width, PaddleClas' `_vd` stem and shortcut (timm's `d`: a 3-conv deep
stem of width 32 and an average-pool shortcut), width multipliers, activation.

Every entry names the numbers it must reproduce (`params_m`, `gmacs`: PaddleClas' `model_list.md` FLOPs(G) and
Params(M), computed by `paddle.flops()`, which counts multiply-accumulates; timm's own benchmark columns for its
removed names). `tests/zoo/test_definitions.py` checks the static features the stage computed from each against
them, so a wrong depth or width cannot pass silently. Approximations are marked `approximation` and say why
(in-place activated batch norm is built as batch norm + activation: same parameters and MACs, one more kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# PaddleClas "_vd": ResNet-D (deep 3-conv stem of width 32, average-pool shortcut), as timm's "d" variants.
VD = {"stem_width": 32, "stem_type": "deep", "avg_down": True}
# ResNet-152's stage depths (ResNeXt-152, PaddleClas).
DEPTH_152 = (3, 8, 36, 3)
PADDLE_LIST = "PaddleClas docs/zh_CN/models/ImageNet1k/model_list.md"


@dataclass(frozen=True)
class Definition:
    """How to build one architecture (random weights) and the published numbers it must match."""

    name: str
    reference: str
    build: Callable[[], Any]
    params_m: float | None = None  # trainable parameters, millions, as published
    gmacs: float | None = None  # multiply-accumulates of one image at `img_size`, as published
    img_size: int = 224
    approximation: str = ""
    gmacs_unchecked: str = ""  # why the published MACs cannot be checked (then only the parameters are)

    @property
    def paddle_name(self) -> str:
        """The name PaddleClas' model_list.md lists it under ('' for other sources): the reference's first word."""
        prefix = PADDLE_LIST + " "
        return self.reference[len(prefix):].split()[0] if self.reference.startswith(prefix) else ""


def _timm(arch: str, **kwargs: Any) -> Callable[[], Any]:
    """A registered timm constructor with some of its model arguments replaced."""

    def build() -> Any:
        import timm

        return timm.create_model(arch, pretrained=False, **kwargs)

    return build


def _mobilenet(version: int, multiplier: float, variant: str = "", head: int | None = None) -> Callable[[], Any]:
    """timm's MobileNet V1/V2/V3 generator at a width multiplier no registered name has; `head`: the width of the
    last 1x1 convolution where the source's differs from timm's (PaddleClas' MobileNetV3-small: 1280, timm 1024)."""

    def build() -> Any:
        if version == 3:
            from timm.models.mobilenetv3 import _gen_mobilenet_v3

            model = _gen_mobilenet_v3(variant, multiplier, pretrained=False)
            if head is not None:
                from torch import nn

                model.conv_head = nn.Conv2d(model.conv_head.in_channels, head, 1, bias=model.conv_head.bias is not None)
                model.classifier = nn.Linear(head, model.classifier.out_features)
                model.num_features = model.head_hidden_size = head
            return model
        from timm.models import efficientnet

        gen = efficientnet._gen_mobilenet_v1 if version == 1 else efficientnet._gen_mobilenet_v2
        return gen(f"mobilenetv{version}_100", multiplier, pretrained=False)

    return build


def _shufflenet_v2(channels: list[int], activation: str = "relu") -> Callable[[], Any]:
    """torchvision's ShuffleNetV2 with PaddleClas' stage widths (and its swish variant)."""

    def build() -> Any:
        from torch import nn
        from torchvision.models.shufflenetv2 import ShuffleNetV2

        model = ShuffleNetV2([4, 8, 4], channels)
        if activation == "swish":
            for parent in model.modules():
                for child_name, child in parent.named_children():
                    if isinstance(child, nn.ReLU):
                        setattr(parent, child_name, nn.SiLU(inplace=True))
        return model

    return build


def _nfnet_silu(variant: str) -> Callable[[], Any]:
    """timm's NFNet-F with SiLU instead of GELU (the removed `nfnet_f*s` names)."""

    def build() -> Any:
        from dataclasses import replace

        from timm.models.nfnet import NormFreeNet, model_cfgs

        return NormFreeNet(replace(model_cfgs[variant], act_layer="silu"))

    return build


def _evonorm_b0(arch: str) -> Callable[[], Any]:
    def build() -> Any:
        from timm.layers import EvoNorm2dB0

        return _timm(arch, norm_layer=EvoNorm2dB0)()

    return build


def _without_se(arch: str) -> Callable[[], Any]:
    """A timm MobileNet/EfficientNet with every squeeze-excite module removed (PaddleClas' `use_se=False`)."""

    def build() -> Any:
        from torch import nn

        model = _timm(arch)()
        for block in model.modules():
            if isinstance(getattr(block, "se", None), nn.Module) and not isinstance(block.se, nn.Identity):
                block.se = nn.Identity()
        return model

    return build


def _hrnet_se(arch: str) -> Callable[[], Any]:
    """timm's HRNet-C with PaddleClas' `has_se`: a squeeze-excite module (reduction 16, channels // 16) in every
    basic and bottleneck block, before the residual add, as PaddleClas' hrnet.py has it."""

    def build() -> Any:
        from timm.layers import SEModule
        from timm.models.resnet import BasicBlock, Bottleneck

        model = _timm(arch)()
        for block in model.modules():
            if isinstance(block, (BasicBlock, Bottleneck)):
                channels = (block.bn2 if isinstance(block, BasicBlock) else block.bn3).num_features
                block.se = SEModule(channels, rd_channels=channels // 16)
        return model

    return build


def _retinanet(backbone: str, num_classes: int) -> Callable[[], Any]:
    """RetinaNet (Lin et al. 2017) as torchvision and MLPerf's reference build it: a ResNet-family backbone with an
    FPN on C3-C5 plus P6/P7 (`LastLevelP6P7(256, 256)`), 9 anchors per location, four 3x3 convolutions of 256
    channels before each head. Only the network: the module takes the 800x800 tensor and returns the two heads'
    outputs; input normalisation, anchor decoding and NMS (pre/post-processing and a TensorRT plugin in NVIDIA's
    harness) are not built."""

    def build() -> Any:
        import torchvision
        from torch import nn
        from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
        from torchvision.models.detection.retinanet import RetinaNetHead
        from torchvision.ops.feature_pyramid_network import LastLevelP6P7

        class DenseDetector(nn.Module):
            """Backbone + FPN + heads: what runs on the GPU for every image."""

            def __init__(self) -> None:
                super().__init__()
                body = torchvision.models.get_model(backbone, weights=None)
                self.backbone = _resnet_fpn_extractor(body, 5, returned_layers=[2, 3, 4],
                                                      extra_blocks=LastLevelP6P7(256, 256))
                self.head = RetinaNetHead(self.backbone.out_channels, 9, num_classes)

            def forward(self, x: Any) -> Any:
                out = self.head(list(self.backbone(x).values()))
                return out["cls_logits"], out["bbox_regression"]

        return DenseDetector()

    return build


# RetinaNet's parameters from torchvision's published figures (the model cards' num_params): retinanet_resnet50_fpn
# 34,014,999 with frozen batch norms, + 53,120 batch-norm scales and shifts of ResNet-50 (trainable here), - resnet50
# 25,557,032 + resnext50_32x4d 25,028,904 (the backbone swap), + 173 more classes x 9 anchors x (256 x 9 + 1) in the
# classification head's last convolution (264 OpenImages classes instead of 91).
RETINANET_MLPERF_PARAMS = (34_014_999 + 53_120 - 25_557_032 + 25_028_904 + 173 * 9 * (256 * 9 + 1)) / 1e6

IABN = ("in-place activated batch norm (inplace_abn, not installable here) built as batch norm + activation: "
        "same parameters and MACs, the activation as a kernel of its own")

_ENTRIES = [
    # ---- PaddleClas (model_key from src.ingest.sources.paddleclas.PADDLE_TO_TIMM) ----
    Definition("resnext50_64x4d", PADDLE_LIST + " ResNeXt50_64x4d",
               _timm("resnext50_32x4d", cardinality=64), 45.29, 8.02),
    Definition("resnext50d_64x4d", PADDLE_LIST + " ResNeXt50_vd_64x4d",
               _timm("resnext50_32x4d", cardinality=64, **VD), 45.31, 8.26),
    Definition("resnext101d_32x4d", PADDLE_LIST + " ResNeXt101_vd_32x4d",
               _timm("resnext101_32x4d", **VD), 44.33, 8.25),
    Definition("resnext101d_64x4d", PADDLE_LIST + " ResNeXt101_vd_64x4d",
               _timm("resnext101_64x4d", **VD), 83.68, 15.76),
    Definition("resnext152_32x4d", PADDLE_LIST + " ResNeXt152_32x4d",
               _timm("resnext101_32x4d", layers=DEPTH_152), 60.15, 11.76),
    Definition("resnext152_64x4d", PADDLE_LIST + " ResNeXt152_64x4d",
               _timm("resnext101_64x4d", layers=DEPTH_152), 115.27, 23.03),
    Definition("resnext152d_32x4d", PADDLE_LIST + " ResNeXt152_vd_32x4d",
               _timm("resnext101_32x4d", layers=DEPTH_152, **VD), 60.17, 12.01),
    Definition("resnext152d_64x4d", PADDLE_LIST + " ResNeXt152_vd_64x4d",
               _timm("resnext101_64x4d", layers=DEPTH_152, **VD), 115.29, 23.27),
    Definition("resnext101_32x48d", PADDLE_LIST + " ResNeXt101_32x48d_wsl (Mahajan et al. 2018)",
               _timm("resnext101_32x16d", base_width=48), 829.26, 153.57),
    Definition("fix_resnext101_32x48d", PADDLE_LIST + " Fix_ResNeXt101_32x48d_wsl (FixRes: the same network "
               "tested at 320 px)", _timm("resnext101_32x16d", base_width=48), 829.26, 313.41, img_size=320),
    Definition("fix_resnet50_vd", "PaddleClas Fix_ResNet50_vd_ssld: ResNet50_vd (timm resnet50d) tested at 320 px",
               _timm("resnet50d"), 25.58, 4.35 * (320 / 224) ** 2, img_size=320),
    Definition("seresnet18d", PADDLE_LIST + " SE_ResNet18_vd", _timm("seresnet18", **VD), 11.81, 2.07),
    Definition("seresnet34d", PADDLE_LIST + " SE_ResNet34_vd", _timm("seresnet34", **VD), 22.00, 3.93),
    Definition("seresnet50d", PADDLE_LIST + " SE_ResNet50_vd", _timm("seresnet50", **VD), 28.16, 4.36),
    Definition("seresnext50d_32x4d", PADDLE_LIST + " SE_ResNeXt50_vd_32x4d",
               _timm("seresnext50_32x4d", **VD), 27.76, 5.64,
               gmacs_unchecked="the published 5.64 GFLOPs disagree with the same list's SE_ResNeXt50_32x4d (4.27) "
                               "plus what the vd stem adds to a ResNeXt-50 (ResNeXt50_vd_32x4d: +0.24)"),
    Definition("senet154_vd", PADDLE_LIST + " SENet154_vd (se_resnext_vd.py: ResNeXt-152 64x4d, bottleneck width "
               "= output width, a 64-64-128 deep stem, average-pool shortcut, SE reduction 16)",
               _timm("seresnext101_32x4d", layers=DEPTH_152, cardinality=64, base_width=4, stem_width=64,
                     stem_type="deep", avg_down=True), 122.03, 24.45),
    Definition("se_hrnet_w64_c", PADDLE_LIST + " SE_HRNet_W64_C_ssld (hrnet.py, has_se: timm hrnet_w64 with SE "
               "in every block)", _hrnet_se("hrnet_w64"), 129.12, 29.00),
    Definition("efficientnetb0_small", PADDLE_LIST + " EfficientNetB0_small (efficientnet.py: B0 with "
               "use_se=False)", _without_se("efficientnet_b0"), 4.69, 0.40),
    Definition("res2net200d", PADDLE_LIST + " Res2Net200_vd_26w_4s",
               _timm("res2net101d", layers=(3, 12, 48, 3)), 76.44, 15.77),
    Definition("resnest50_fast_1s1x64d", PADDLE_LIST + " ResNeSt50_fast_1s1x64d (radix 1, cardinality 1, "
               "width 64, avd first)", _timm("resnest50d_1s4x24d", cardinality=1, base_width=64), 26.27, 4.36),
    Definition("mobilenetv1_025", PADDLE_LIST + " MobileNetV1_x0_25", _mobilenet(1, 0.25), 0.48, 0.04356),
    Definition("mobilenetv1_050", PADDLE_LIST + " MobileNetV1_x0_5", _mobilenet(1, 0.5), 1.34, 0.15457),
    Definition("mobilenetv1_075", PADDLE_LIST + " MobileNetV1_x0_75", _mobilenet(1, 0.75), 2.60, 0.333),
    Definition("mobilenetv2_025", PADDLE_LIST + " MobileNetV2_x0_25", _mobilenet(2, 0.25), 1.53, 0.03418,
               approximation="timm rounds channels to multiples of 8 where Paddle truncates (8 -> 4 at x0.25): "
                             "about 9 % more MACs than Paddle's"),
    Definition("mobilenetv2_150", PADDLE_LIST + " MobileNetV2_x1_5", _mobilenet(2, 1.5), 6.90, 0.70235),
    Definition("mobilenetv2_200", PADDLE_LIST + " MobileNetV2_x2_0", _mobilenet(2, 2.0), 11.33, 1.21725),
    Definition("mobilenetv3_large_035", PADDLE_LIST + " MobileNetV3_large_x0_35",
               _mobilenet(3, 0.35, "mobilenetv3_large_100"), 2.11, 0.0409),
    Definition("mobilenetv3_large_050", PADDLE_LIST + " MobileNetV3_large_x0_5",
               _mobilenet(3, 0.5, "mobilenetv3_large_100"), 2.69, 0.07183),
    Definition("mobilenetv3_large_125", PADDLE_LIST + " MobileNetV3_large_x1_25",
               _mobilenet(3, 1.25, "mobilenetv3_large_100"), 7.47, 0.3627),
    Definition("mobilenetv3_small_035", PADDLE_LIST + " MobileNetV3_small_x0_35",
               _mobilenet(3, 0.35, "mobilenetv3_small_100", head=1280), 1.67, 0.01456),
    Definition("mobilenetv3_small_125", PADDLE_LIST + " MobileNetV3_small_x1_25",
               _mobilenet(3, 1.25, "mobilenetv3_small_100", head=1280), 3.64, 0.10007),
    Definition("shufflenetv2_x0_25", PADDLE_LIST + " ShuffleNetV2_x0_25 (stage widths 24, 48, 96, head 512)",
               _shufflenet_v2([24, 24, 48, 96, 512]), 0.61, 0.01895),
    Definition("shufflenetv2_x0_33", PADDLE_LIST + " ShuffleNetV2_x0_33 (stage widths 32, 64, 128, head 512)",
               _shufflenet_v2([24, 32, 64, 128, 512]), 0.65, 0.02404),
    Definition("shufflenetv2_swish", PADDLE_LIST + " ShuffleNetV2_swish (x1.0 with swish)",
               _shufflenet_v2([24, 116, 232, 464, 1024], "swish"), 2.29, 0.14886),
    Definition("xception41_deeplab", PADDLE_LIST + " Xception41_deeplab (aligned Xception, timm xception41)",
               _timm("xception41"), 27.08, 9.28, img_size=299),
    Definition("xception65_deeplab", PADDLE_LIST + " Xception65_deeplab (aligned Xception, timm xception65)",
               _timm("xception65"), 40.10, 13.96, img_size=299),
    Definition("densenet264_k32", PADDLE_LIST + " DenseNet264 (the DenseNet paper's DenseNet-264, growth rate "
               "k = 32; not timm's densenet264, k = 48)", _timm("densenet121", block_config=(6, 12, 64, 48)),
               33.74, 5.82),
    # ---- timm names removed since the measurements (numbers: timm's benchmark columns) ----
    Definition("densenet264", "timm <= 0.6 densenet264: growth rate 48, plain stem (timm's densenet264d has a "
               "deep one)", _timm("densenet264d", stem_type=""), 72.69, 12.95),
    Definition("convnext_nano_hnf", "timm <= 0.9 convnext_nano_hnf: ConvNeXt-nano, head norm first",
               _timm("convnext_nano", head_norm_first=True), 15.59, 2.455),
    Definition("densenet121d", "timm <= 0.9 densenet121d: DenseNet-121 with a deep stem",
               _timm("densenet121", stem_type="deep"), 8.00, 3.11),
    Definition("densenet264d_iabn", "timm <= 0.6 densenet264d_iabn", _timm("densenet264d"), 72.74, 13.47,
               approximation=IABN),
    Definition("cspdarknet53_iabn", "timm <= 0.6 cspdarknet53_iabn", _timm("cspdarknet53"), 27.64, 6.53,
               img_size=256, approximation=IABN),
    Definition("cspresnext50_iabn", "timm <= 0.6 cspresnext50_iabn", _timm("cspresnext50"), 20.57, 4.02,
               img_size=256, approximation=IABN),
    Definition("ese_vovnet99b_iabn", "timm <= 0.6 ese_vovnet99b_iabn", _timm("ese_vovnet99b"), 63.20, 16.49,
               approximation=IABN),
    Definition("gluon_xception65", "timm <= 0.6 gluon_xception65 (aligned Xception-65)", _timm("xception65"),
               39.92, 13.96, img_size=299),
    Definition("nfnet_f0s", "timm <= 0.6 nfnet_f0s: NFNet-F0 with SiLU", _nfnet_silu("nfnet_f0"), 71.49, 12.62,
               img_size=256),
    *[Definition(f"nfnet_f{i}s", f"timm <= 0.6 nfnet_f{i}s: NFNet-F{i} with SiLU", _nfnet_silu(f"nfnet_f{i}"),
                 params, gmacs, img_size=size)
      for i, params, gmacs, size in [(1, 132.63, 35.97, 320), (2, 193.78, 63.22, 352), (3, 254.92, 115.58, 416),
                                     (4, 316.07, 216.26, 512), (5, 377.21, 290.97, 544), (6, 438.36, 378.69, 576),
                                     (7, 499.50, 480.39, 608)]],
    Definition("regnetz_d8_evob", "timm <= 0.6 regnetz_d8_evob: RegNetZ-D8 with EvoNorm-B0 (regnetz_d8's "
               "layout; regnetz_d8_evos differs: 7.03 GMACs at 320 px)",
               _evonorm_b0("regnetz_d8"), 23.41, 6.12, img_size=320),
    Definition("regnety_040s_gn", "timm <= 0.6 regnety_040s_gn, renamed regnety_040_sgn",
               _timm("regnety_040_sgn"), 20.65, 4.03),
    Definition("resnetv2_50d_evob", "timm <= 0.6 resnetv2_50d_evob: ResNetV2-50d with EvoNorm-B0",
               _evonorm_b0("resnetv2_50d_evos"), 25.59, 4.33),
]

_ENTRIES.append(Definition(
    "retinanet_resnext50_32x4d_fpn",
    "MLPerf Inference RetinaNet (mlcommons/training single_stage_detector retinanet_resnext50_32x4d_fpn: "
    "ResNeXt50-32x4d FPN, 264 OpenImages classes, 800x800)",
    _retinanet("resnext50_32x4d", 264), RETINANET_MLPERF_PARAMS, None, img_size=800,
    approximation="network only (pre/post-processing and NMS not built); the reference's frozen batch norms built "
                  "as batch norms in eval mode: the same per-channel affine map",
    gmacs_unchecked="no published MAC count for this network at 800 px"))

DEFINITIONS: dict[str, Definition] = {d.name: d for d in _ENTRIES}
