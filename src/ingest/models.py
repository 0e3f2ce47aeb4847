"""Model naming: a join key across sources, a family label for grouped splits, and a CNN flag."""

from __future__ import annotations

import re

# Prefixes that name a weight port or training recipe, not an architecture.
_RECIPE_PREFIXES = ("tf_", "tv_", "gluon_", "legacy_", "ig_", "ssl_", "swsl_", "timm_")

# Families whose leading letters alone would be misleading or split one family in two.
_FAMILY_ALIASES: dict[str, str] = {
    "wide": "wide_resnet",
    "inceptionv": "inception",
    "inception": "inception",
    "inceptionresnetv": "inception_resnet",
    "inception_resnet": "inception_resnet",
    "mobilenetv": "mobilenet",
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
}

# Families that are not convolutional networks (attention or MLP based). Everything else counts as a CNN;
# hybrids with convolutional stems and attention stages (coatnet, maxvit, levit...) are flagged non-CNN too.
NON_CNN_FAMILIES = frozenset(
    {
        "vit", "deit", "swin", "swinv", "beit", "beitv", "cait", "xcit", "eva", "mixer", "gmlp", "resmlp",
        "crossvit", "pit", "tnt", "twins", "levit", "convit", "coat", "coatnet", "coatnext", "maxvit",
        "maxxvit", "mvitv", "mobilevit", "mobilevitv", "poolformer", "poolformerv", "efficientformer",
        "edgenext", "davit", "fastvit", "flexivit", "gcvit", "hiera", "nest", "pvt", "pvtv", "sequencer",
        "tiny", "volo", "visformer", "samvit", "vitamin", "caformer", "convformer", "focalnet", "repvit",
        "efficientvit", "next", "test", "hgnet", "hgnetv", "aimv", "naflexvit", "mambaout", "rdnet",
        "gmixer", "starnet", "shvit", "fasternet", "swiftformer", "tresnet", "inception_next", "csatv",
        "eva02", "halonet", "botnet", "lambda", "sebotnet", "lamhalobotnet", "halo", "haloregnetz",
    }
)


def model_key(name: str) -> str:
    """Join key: lower case, pretrained tag ('.a1_in1k') dropped, '-' folded into '_'."""
    base = name.strip().lower().split(".", 1)[0]
    return re.sub(r"[-\s]+", "_", base)


def model_family(name: str) -> str:
    """Family label for grouped splits: the architecture's leading word (resnet50 -> resnet, vgg16_bn -> vgg)."""
    key = model_key(name)
    for prefix in _RECIPE_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    if key.startswith("inception_resnet") or key.startswith("inceptionresnet"):
        return "inception_resnet"
    if key.startswith("inception_next"):
        return "inception_next"
    if key.startswith("wide_resnet"):
        return "wide_resnet"
    match = re.match(r"[a-z]+", key)
    word = match.group(0) if match else key
    return _FAMILY_ALIASES.get(word, word)


def is_cnn(family: str) -> bool:
    """True unless the family is attention/MLP based (see NON_CNN_FAMILIES)."""
    return family not in NON_CNN_FAMILIES
