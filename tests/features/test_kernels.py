"""Kernel profiles from the committed per-operator table: what is kept, merged and refused."""

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT
from src.features.kernels import LAYER_COLUMNS, ProfileError, kernel_profiles

LAYERS = REPO_ROOT / "data" / "processed" / "layers.parquet"


@pytest.fixture(scope="module")
def resnet18() -> pd.DataFrame:
    layers = pd.read_parquet(LAYERS, columns=LAYER_COLUMNS, filters=[("model_key", "==", "resnet18")])
    return layers.loc[layers["img_size"] == 224]


def test_every_launched_kernel_is_counted_once(resnet18):
    prof = kernel_profiles(resnet18, fusions=("none",))
    launched = resnet18.loc[resnet18["launches_kernel"]].groupby("pass", observed=True).size()
    counted = prof.groupby("pass")["count"].sum()
    assert counted.to_dict() == {k: int(v) for k, v in launched.items()}
    # identical kernels merged: fewer rows than launches (ResNet repeats its blocks)
    assert len(prof) < int(launched.sum())
    # the FLOPs of a pass survive the merge exactly
    fwd = resnet18.loc[(resnet18["pass"] == "forward") & resnet18["launches_kernel"]]
    p = prof.loc[prof["pass"] == "forward"]
    assert (p["flops_per_sample"] * p["count"]).sum() == pytest.approx(fwd["flops_per_sample"].astype(float).sum())


def test_classes_and_gemm_columns(resnet18):
    prof = kernel_profiles(resnet18)
    fwd = prof.loc[prof["pass"] == "forward"]
    # resnet18 inference: 20 convolutions and one linear layer are tensor-core ("mac") kernels
    assert int(fwd.loc[fwd["kernel_class"] == "mac", "count"].sum()) == 21
    fc = fwd.loc[(fwd["kernel_class"] == "mac") & (fwd["c_out"] == 1000)]
    assert len(fc) == 1 and fc["out_pixels"].iloc[0] == 1.0  # the classifier: 1 x 1000 per sample
    assert (fwd.loc[fwd["kernel_class"] == "other", "c_out"] == 0).all()
    # the trainable parameters of resnet18 (11.69 M) ride along for the optimizer step
    assert prof["param_elems"].iloc[0] == pytest.approx(11.69e6, rel=0.01)


def test_missing_column_and_bad_values_are_named(resnet18):
    with pytest.raises(ProfileError, match=r"missing column\(s\) \['weight_elems'\]"):
        kernel_profiles(resnet18.drop(columns=["weight_elems"]), "my.parquet")
    bad = resnet18.copy()
    bad.loc[bad.index[bad["launches_kernel"].to_numpy()][0], "flops_per_sample"] = np.nan
    with pytest.raises(ProfileError, match="resnet18 img_size 224 pass forward"):
        kernel_profiles(bad)


def test_fusion_rules_keep_flops_and_cut_traffic(resnet18):
    from src.features.kernels import fuse, launched_kernels

    k = launched_kernels(resnet18.loc[resnet18["pass"] == "forward"])
    eager, pointwise, producer = (fuse(k, f) for f in ("none", "pointwise", "producer"))
    # eager: every operator; TensorRT: 20 convolutions (bn, relu, residual add folded in), 1 max pool, 1 global
    # pool, 1 linear (+ its flatten copy, if any); torch.compile: conv, then one kernel per pointwise chain
    assert len(eager) > len(pointwise) > len(producer)
    assert int((producer["kernel_class"] == "mac").sum()) == 21 and len(producer) <= 25
    for fused in (pointwise, producer):
        assert fused["flops_per_sample"].sum() == pytest.approx(eager["flops_per_sample"].sum())
        traffic = (fused["in_elems_per_sample"] + fused["out_elems_per_sample"]).sum()
        assert traffic < (eager["in_elems_per_sample"] + eager["out_elems_per_sample"]).sum()
    # a residual block under TensorRT: conv -> bn -> add -> relu is one kernel that also reads the shortcut
    block = producer.loc[producer["op_index"] == 9].iloc[0]  # layer1.0.conv2 (op 9), bn 11, add_ 12, relu_ 13
    assert block["in_elems_per_sample"] == pytest.approx(200704 + 200704)
    assert block["out_elems_per_sample"] == pytest.approx(200704)


def test_training_keeps_batch_norm_out_of_chains(resnet18):
    from src.features.kernels import fuse, launched_kernels

    k = launched_kernels(resnet18.loc[resnet18["pass"] == "train_forward"])
    fused = fuse(k, "pointwise")
    assert int((fused["kind"] == "norm").sum()) == int((k["kind"] == "norm").sum())


def test_winograd_marks_dense_3x3_stride_1_convolutions(resnet18):
    prof = kernel_profiles(resnet18, fusions=("none",))
    fwd = prof.loc[prof["pass"] == "forward"]
    # resnet18's 20 convolutions: 13 are 3x3 stride 1 (4 in layer1, 3 in each later stage); the 7x7/2 stem, the
    # three 3x3/2 stage entries and the three 1x1/2 shortcuts are not
    assert int(fwd.loc[fwd["winograd"], "count"].sum()) == 13
    assert (fwd.loc[fwd["winograd"], "kernel_class"] == "mac").all()
    # the data and filter gradients of the same convolutions keep the flag
    bwd = prof.loc[prof["pass"] == "backward"]
    assert int(bwd.loc[bwd["winograd"], "count"].sum()) == 13


def test_grouped_convolutions_are_flagged():
    """ResNeXt-50 32x4d: its 16 grouped 3x3 convolutions (one per bottleneck) are "mac" kernels flagged `grouped`;
    resnet18 has none."""
    layers = pd.read_parquet(LAYERS, columns=LAYER_COLUMNS, filters=[("model_key", "==", "resnext50_32x4d")])
    prof = kernel_profiles(layers.loc[layers["img_size"] == 224], fusions=("none",))
    fwd = prof.loc[prof["pass"] == "forward"]
    assert int(fwd.loc[fwd["grouped"], "count"].sum()) == 16
    assert (fwd.loc[fwd["grouped"], "kernel_class"] == "mac").all()
    r18 = pd.read_parquet(LAYERS, columns=LAYER_COLUMNS, filters=[("model_key", "==", "resnet18")])
    assert not kernel_profiles(r18, fusions=("none",))["grouped"].any()
