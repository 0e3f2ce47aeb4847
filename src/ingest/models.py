"""Model naming: a join key across sources, a family label for grouped splits, and a CNN flag."""

from __future__ import annotations

import re

from .legacy_names import TIMM_LEGACY_NAMES

# Prefixes that name a weight port or training recipe, not an architecture.
# `jx_` (JAX ports: jx_nest_*), `ens_adv_` / `adv_` (adversarially trained Inception weights) too.
_RECIPE_PREFIXES = ("tf_", "tv_", "gluon_", "legacy_", "ig_", "ssl_", "swsl_", "timm_", "jx_", "ens_adv_", "adv_")

# Families whose leading letters alone would be misleading or split one family in two.
_FAMILY_ALIASES: dict[str, str] = {
    "wide": "wide_resnet",
    "inceptionv": "inception",
    "inception": "inception",
    "inceptionresnetv": "inception_resnet",
    "inception_resnet": "inception_resnet",
    "mobilenetv": "mobilenet",
    "semnasnet": "mnasnet",  # MnasNet-A1 (timm's legacy name mnasnet_a1 is semnasnet_100)
    "mobilenet": "mobilenet",
    "efficientnetv": "efficientnet",
    "efficientnet": "efficientnet",
    "seresnext": "resnext",
    "resnext": "resnext",
    "resnetv": "resnet",
    "resnetaa": "resnet",
    "resnetblur": "resnet",
    "resnetrs": "resnet",
    "seresnet": "resnet",
    "ecaresnet": "resnet",
    "skresnet": "resnet",
    "resnet": "resnet",
    "regnetx": "regnet",
    "regnety": "regnet",
    "regnetz": "regnet",
    "convnextv": "convnext",
    "nf": "nfnet",
    "dm": "nfnet",
    "eca": "nfnet",
    "densenetblur": "densenet",
    "shufflenet": "shufflenet",
    "ghostnetv": "ghostnet",
    "efficientformerv": "efficientformer",
    "hgnetv": "hgnet",  # PP-HGNetV2 (hgnetv2_b0..b6) shares timm's hgnet.py with PP-HGNet (hgnet_tiny..base)
    "poolformerv": "poolformer",
    "maxxvitv": "maxxvit",
    "botnext": "botnet",  # eca_botnext26ts_256 once its `eca_` is stripped
    "halonext": "halonet",  # eca_halonext26ts
}

# Families that are not convolutional networks, each with the reason. Everything else counts as a CNN.
# Rule: a family is a CNN when its token/spatial mixing is convolution or pooling only (plain, depthwise, grouped,
# re-parameterised or partial convs, gating/elementwise products of conv outputs, SE/ECA/GC-style channel
# reweighting, an attention-pool head aside). Families with any self-attention-like token mixer (MHSA, window/halo/
# bottleneck/linear/additive/transposed attention, lambda layers, non-local blocks), MLP token mixers, or RNN/SSM
# mixers are not. Reasons start with a category: "transformer", "hybrid" (conv stages or blocks plus attention),
# "mlp-mixer" or "rnn". Checked against timm's model definitions (timm/models/*.py).
# Deliberately NOT here (they are CNNs): tresnet, hgnet (+ hgnetv2), repvit, fasternet, starnet, rdnet, mambaout
# (gated CNN blocks, no SSM), inception_next, convformer (separable-conv MetaFormer), poolformer (+ v2: avg-pool token
# mixer, 1x1 MLP, no attention), focalnet (focal modulation = depthwise convs + pooling + gating, no attention).
NON_CNN_FAMILIES: dict[str, str] = {
    # pure transformers
    "vit": "transformer: ViT self-attention",
    "deit": "transformer: ViT self-attention (DeiT/DeiT-III)",
    "swin": "transformer: shifted-window self-attention",
    "swinv": "transformer: shifted-window self-attention (Swin V2)",
    "beit": "transformer: ViT self-attention (BEiT)",
    "beitv": "transformer: ViT self-attention (BEiT v2)",
    "cait": "transformer: class-attention ViT",
    "xcit": "transformer: cross-covariance attention",
    "eva": "transformer: ViT self-attention (EVA/EVA-02)",
    "crossvit": "transformer: dual-branch ViT with cross-attention",
    "pit": "transformer: pooling-based ViT, self-attention",
    "tnt": "transformer: nested inner/outer self-attention",
    "twins": "transformer: locally-grouped + global sub-sampled attention",
    "convit": "transformer: gated positional self-attention",
    "coat": "transformer: factorized conv-attention (CoaT)",
    "davit": "transformer: dual spatial/channel attention",
    "flexivit": "transformer: ViT self-attention",
    "gcvit": "transformer: global-context window attention",
    "hiera": "transformer: hierarchical ViT self-attention",
    "hieradet": "transformer: Hiera self-attention (SAM2 backbone; sam2_hiera_* map here)",
    "mvitv": "transformer: multiscale pooling attention (MViTv2)",
    "nest": "transformer: nested local self-attention (nest_*, jx_nest_*)",
    "pvt": "transformer: spatial-reduction attention (PVT v2)",
    "volo": "transformer: outlook attention + self-attention",
    "samvit": "transformer: ViT self-attention (SAM encoder)",
    "aimv": "transformer: ViT self-attention (AIMv2)",
    "naflexvit": "transformer: ViT self-attention (NaFlex)",
    # hybrids: convolutional stems/stages/blocks plus attention
    "levit": "hybrid: conv stem + attention stages",
    "coatnet": "hybrid: conv stages + attention stages",
    "coatnext": "hybrid: conv stages + attention stages",
    "maxvit": "hybrid: MBConv + block/grid attention",
    "maxxvit": "hybrid: ConvNeXt blocks + block/grid attention (maxxvit, maxxvitv2)",
    "mobilevit": "hybrid: MobileNet blocks + transformer blocks",
    "mobilevitv": "hybrid: MobileNet blocks + separable self-attention",
    "semobilevit": "hybrid: MobileNet blocks + transformer blocks",
    "efficientformer": "hybrid: pooling blocks + attention stages (v1 and v2)",
    "edgenext": "hybrid: conv encoders + transposed (channel) attention",
    "fastvit": "hybrid: RepMixer conv stages + attention stage (sa/ma/mci; t8/t12/s12 are conv-only)",
    "tiny_vit": "hybrid: MBConv stage + window attention stages",
    "visformer": "hybrid: conv stages + attention stages",
    "vitamin": "hybrid: MBConv stages + transformer stage",
    "caformer": "hybrid: separable-conv stages + attention stages",
    "efficientvit": "hybrid: MBConv + linear attention (MIT) / cascaded group attention (MSRA)",
    "shvit": "hybrid: conv stages + single-head attention",
    "swiftformer": "hybrid: conv encoders + efficient additive attention",
    "nextvit": "hybrid: conv blocks + efficient multi-head self-attention",
    "csatv": "hybrid: ConvNeXt-style blocks + transformer blocks (CSATv2)",
    "mobilenetv4_hybrid": "hybrid: MobileNetV4 UIB blocks + multi-query attention",
    "mobilenetv5": "hybrid: MobileNet blocks + multi-query attention",
    "botnet": "hybrid: ResNet with bottleneck self-attention blocks",
    "sebotnet": "hybrid: ResNet with bottleneck self-attention blocks",
    "halonet": "hybrid: ResNet with halo attention blocks",
    "sehalonet": "hybrid: ResNet with halo attention blocks",
    "halo": "hybrid: ResNet with halo + bottleneck attention blocks (halo2botnet)",
    "haloregnetz": "hybrid: RegNetZ with halo attention blocks",
    "lamhalobotnet": "hybrid: ResNet with lambda + halo + bottleneck attention blocks",
    "lambda": "hybrid: ResNet with lambda layers",
    "bat": "hybrid: ResNeXt with non-local bilinear attention transform blocks",
    # MLP token mixers
    "mixer": "mlp-mixer: token-mixing MLP",
    "gmixer": "mlp-mixer: gated token-mixing MLP",
    "resmlp": "mlp-mixer: token-mixing MLP (ResMLP)",
    "gmlp": "mlp-mixer: spatial gating unit MLP",
    # recurrent token mixers
    "sequencer": "rnn: BiLSTM token mixer",
}


# timm architectures that `timm.utils.reparameterize_model` (timm's `benchmark.py --reparam`) turns into another
# network: parallel branches folded into one convolution (MobileOne, RepVGG, RepGhost, RepViT, GhostNetV3, FastViT)
# or batch norms folded into the convolutions before them (LeViT, SHViT, TinyViT, EfficientViT-MSRA, Next-ViT).
# Checked with timm 1.0.31 on every model of timm's PyTorch 2.9.1 result files: these, and nothing else there,
# change parameters or module counts (mobileone_s0: 5.29 -> 2.08 M parameters, 1,289 -> 186 modules).
REPARAMETERIZABLE = re.compile(r"^(?:(?:mobileone|repvgg|repghostnet|repvit|ghostnetv3|fastvit|levit|shvit|"
                               r"tiny_vit|nextvit)_|efficientvit_m\d)")
# Appended to the model key of a row measured on the re-parameterised form: it is another network (fewer kernels,
# other MACs) than the definition the bare key builds, so it gets its own features, its own twins, and the zoo
# builds it re-parameterised (src/zoo/resolve.py). leave_model_out still holds both forms out together.
REPARAM_SUFFIX = "+reparam"


def is_reparameterizable(key: str) -> bool:
    """True for the timm architectures whose inference form differs from their training form (REPARAMETERIZABLE)."""
    return bool(REPARAMETERIZABLE.match(base_model_key(key)))


def base_model_key(key: str) -> str:
    """The architecture's key without REPARAM_SUFFIX ('repvgg_a2+reparam' -> 'repvgg_a2')."""
    return key[: -len(REPARAM_SUFFIX)] if key.endswith(REPARAM_SUFFIX) else key


# Names under which the sources measured another architecture's network: the key of the network they ran.
# ecaresnext50t_32x4d: every timm result file (PyTorch 1.10 to 2.9.1) and our own profiler report 15.41 M
# parameters and 2.7 GMACs, ecaresnext26t_32x4d's figures, and time it within 0.3 % of ecaresnext26t_32x4d in all
# 32 shared settings; timm then registered that name with ResNet-26 depths ([2, 2, 2, 2]). timm 1.0.31 builds it
# with ResNet-50 depths (25.05 M parameters), which is not what was measured.
SAME_NETWORK = {"ecaresnext50t_32x4d": "ecaresnext26t_32x4d"}


def plain_model_key(name: str) -> str:
    """The name normalised: lower case, pretrained tag ('.a1_in1k') dropped, '-' folded into '_'."""
    base = name.strip().lower().split(".", 1)[0]
    return re.sub(r"[-\s]+", "_", base)


def model_key(name: str) -> str:
    """Join key: the network a name ran (plain_model_key, then TIMM_LEGACY_NAMES and SAME_NETWORK)."""
    key = plain_model_key(name)
    return SAME_NETWORK.get(key, TIMM_LEGACY_NAMES.get(key, key))


def is_alias(name: str) -> bool:
    """True when the name is a legacy or misnamed spelling of another architecture's network."""
    key = plain_model_key(name)
    return key in SAME_NETWORK or key in TIMM_LEGACY_NAMES


def model_family(name: str) -> str:
    """Family label for grouped splits: the architecture's leading word (resnet50 -> resnet, vgg16_bn -> vgg)."""
    key = model_key(name)
    for prefix in _RECIPE_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    if key.startswith("test_"):  # timm's tiny test nets (test_vit, test_convnext...): label by the architecture
        key = key[len("test_"):]
    if key.startswith("eca_") and not key.startswith("eca_nfnet"):  # byobnet ECA variants (eca_resnet33ts...)
        key = key[len("eca_"):]
    if key.startswith("inception_resnet") or key.startswith("inceptionresnet"):
        return "inception_resnet"
    if key.startswith("inception_next"):
        return "inception_next"
    if key.startswith("tiny_vit"):
        return "tiny_vit"
    if key.startswith("sam2_hiera"):
        return "hieradet"
    if key.startswith("mobilenetv4_hybrid"):
        return "mobilenetv4_hybrid"
    if key.startswith("mobilenetv5"):
        return "mobilenetv5"
    if key.startswith("wide_resnet"):
        return "wide_resnet"
    match = re.match(r"[a-z]+", key)
    word = match.group(0) if match else key
    return _FAMILY_ALIASES.get(word, word)


def is_cnn(family: str) -> bool:
    """True unless the family is a transformer, conv/attention hybrid, MLP-mixer or RNN (see NON_CNN_FAMILIES)."""
    return family not in NON_CNN_FAMILIES
