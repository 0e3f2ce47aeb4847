"""src/zoo/definitions.py: architectures written down from their sources, checked against what the sources publish."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from src.ingest.sources.paddleclas import MODEL_LIST, published_complexity, timm_name
from src.zoo.definitions import DEFINITIONS
from src.zoo.names import ModelSpec, spec_for_measured

REPO = Path(__file__).resolve().parents[2]
MIRROR = (REPO / ".." / "shared" / "data" / "raw").resolve()
STATIC = REPO / "data" / "processed" / "static_features.parquet"
PADDLE = {d.name: d for d in DEFINITIONS.values() if d.paddle_name}


def _published() -> dict[str, tuple[float, float]]:
    path = MIRROR / MODEL_LIST
    if not path.is_file():
        pytest.fail(f"the raw data mirror file {path} is missing: clone the project with ../shared beside it")
    return published_complexity(path.read_text(encoding="utf-8"))


def test_model_list_complexity_is_read_with_its_units():
    published = _published()
    assert published["ResNet50"] == (4.11, 25.61)  # FLOPs(G) table
    assert published["MobileNetV2_x0_25"] == pytest.approx((0.03418, 1.53))  # FLOPs(M) table, in G
    assert len(published) > 200


def test_paddle_definitions_carry_the_numbers_paddleclas_published():
    published = _published()
    assert len(PADDLE) >= 30
    for name, d in PADDLE.items():
        assert d.paddle_name in published, f"{name}: {d.paddle_name} is not in {MODEL_LIST}"
        assert (d.gmacs, d.params_m) == pytest.approx(published[d.paddle_name]), name


def test_the_ingest_gives_each_paddle_name_the_key_of_its_definition():
    for name, d in PADDLE.items():
        assert timm_name(d.paddle_name) == name


def test_a_measured_name_with_a_definition_resolves_to_it():
    assert spec_for_measured("ResNeXt152_vd_32x4d", "resnext152d_32x4d", "timm", 224) == ModelSpec(
        "timm", "resnext152d_32x4d", 224)
    assert spec_for_measured("convnext_nano_hnf", "convnext_nano_hnf", "timm", 224) == ModelSpec(
        "timm", "convnext_nano_hnf", 224)
    # MLPerf's RetinaNet (model_source mlperf) is a definition too
    assert spec_for_measured("retinanet_resnext50_32x4d_fpn", "retinanet_resnext50_32x4d_fpn", "mlperf", 800) == (
        ModelSpec("timm", "retinanet_resnext50_32x4d_fpn", 800))
    assert spec_for_measured("ssd_whatever", "ssd_whatever", "mlperf", 1200) is None
    # a name timm still has is built by timm as before
    assert spec_for_measured("resnet50.a1_in1k", "resnet50", "timm", 224) == ModelSpec("timm", "resnet50", 224)


def test_the_stage_built_every_definition_to_its_published_size():
    """Parameters within 2 % (or 0.01 M, the published rounding), MACs within 10 % (or 0.003 G): paddle.flops()
    also counts some non-MAC work of small mobile nets. A wrong depth, width or cardinality is far outside."""
    static = pd.read_parquet(STATIC, columns=["model_key", "static_img_size", "param_count_m", "gmacs"])
    rows = static.set_index(["model_key", "static_img_size"])
    for name, d in DEFINITIONS.items():
        assert (name, d.img_size) in rows.index, f"{name} at {d.img_size} px has no static features"
        got = rows.loc[(name, d.img_size)]
        assert abs(got["param_count_m"] - d.params_m) <= max(0.02 * d.params_m, 0.01), (name, got["param_count_m"])
        if not d.gmacs_unchecked:
            assert abs(got["gmacs"] - d.gmacs) <= max(0.10 * d.gmacs, 0.003), (name, got["gmacs"])


def test_build_uses_the_definition_where_timm_has_no_such_name():
    pytest.importorskip("timm", reason="building timm definitions needs timm (zoo extra)")
    from src.zoo.names import UnknownModelError
    from src.zoo.resolve import build

    built = build("timm", "seresnet50d")
    params = sum(p.numel() for p in built.module.parameters()) / 1e6
    assert params == pytest.approx(28.16, rel=0.02)
    assert built.input_size == 224 and any("SE_ResNet50_vd" in n for n in built.notes)
    with pytest.raises(UnknownModelError, match="did you mean"):
        build("timm", "seresnet50dd")


def test_the_retinanet_builder_reproduces_torchvisions_published_retinanet():
    """The builder's parts are torchvision's RetinaNet: with a ResNet-50 and COCO's 91 classes it has the parameters
    of torchvision's retinanet_resnet50_fpn (34,014,999 published, frozen batch norms, + ResNet-50's 53,120 batch-norm
    scales and shifts, trainable here) and the same head outputs; the MLPerf network has the number derived from the
    published figures (RETINANET_MLPERF_PARAMS)."""
    pytest.importorskip("torchvision", reason="building RetinaNet needs torchvision (zoo extra)")
    import torch

    from src.zoo.definitions import RETINANET_MLPERF_PARAMS, _retinanet

    coco = _retinanet("resnet50", 91)().eval()
    assert sum(p.numel() for p in coco.parameters()) == 34_014_999 + 53_120
    mlperf = DEFINITIONS["retinanet_resnext50_32x4d_fpn"]
    built = mlperf.build().eval()
    assert sum(p.numel() for p in built.parameters()) / 1e6 == pytest.approx(RETINANET_MLPERF_PARAMS, abs=1e-6)
    with torch.no_grad():
        logits, boxes = built(torch.zeros(1, 3, 256, 256))
    # anchors: 9 per location of P3-P7 (strides 8 to 128)
    anchors = 9 * sum((256 // s) ** 2 for s in (8, 16, 32, 64, 128))
    assert logits.shape == (1, anchors, 264) and boxes.shape == (1, anchors, 4)
