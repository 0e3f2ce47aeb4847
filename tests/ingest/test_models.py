import pytest

from src.ingest.models import is_cnn, model_family, model_key


@pytest.mark.parametrize(
    ("name", "key", "family"),
    [
        ("resnet50.a1_in1k", "resnet50", "resnet"),
        ("wide_resnet50_2", "wide_resnet50_2", "wide_resnet"),
        ("tf_efficientnet_b0", "tf_efficientnet_b0", "efficientnet"),
        ("inception-v3", "inception_v3", "inception"),
        ("inception_resnet_v2", "inception_resnet_v2", "inception_resnet"),
        ("vgg16_bn", "vgg16_bn", "vgg"),
        ("seresnext50_32x4d", "seresnext50_32x4d", "resnext"),
        ("vit_base_patch16_224.augreg_in21k", "vit_base_patch16_224", "vit"),
    ],
)
def test_key_and_family(name, key, family):
    assert model_key(name) == key
    assert model_family(name) == family


def test_cnn_flag():
    assert is_cnn("resnet") and is_cnn("densenet")
    assert not is_cnn("vit") and not is_cnn("swin")
