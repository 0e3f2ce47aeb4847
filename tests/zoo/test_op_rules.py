"""Operator rules (src/zoo/op_rules.py) on a recorded table: kinds, MACs and FLOPs against hand-computed figures,
conv geometry, views that launch no kernel, the backward conv rule (groups respected), batch-statistics norms and
agreement with torch's flop counter. The small CNN is tests/zoo/meta_net.py's."""

from __future__ import annotations

import pandas as pd
import pytest

torch = pytest.importorskip("torch", reason="per-layer tables record torch operators (zoo / zoo-ci extra)")

from src.zoo.layer_pricing import price, sums  # noqa: E402
from src.zoo.layers import layer_table  # noqa: E402
from src.zoo.op_rules import MAC_KINDS  # noqa: E402
from tests.zoo.meta_net import MACS, PARAMS, H, Net, forward_rows, net_built, net_layer_table  # noqa: E402


@pytest.fixture(scope="module")
def net_table() -> pd.DataFrame:
    return net_layer_table()


def test_forward_macs_params_and_kinds_by_hand(net_table):
    s = sums(net_table, batch=1)["forward"]
    assert s["macs"] == sum(MACS.values())
    assert s["params_used"] == PARAMS
    assert sums(net_table, batch=5)["forward"]["macs"] == 5 * sum(MACS.values())
    f = forward_rows(net_table)
    kinds = f.loc[f["launches_kernel"], "kind"].value_counts().to_dict()
    assert kinds["conv"] == 2 and kinds["grouped_conv"] == 1 and kinds["depthwise_conv"] == 1
    assert kinds["matmul"] == 1 and kinds["norm"] == 1 and kinds["pool"] == 1 and kinds["add"] == 1
    assert kinds["activation"] == 2 and kinds["reduction"] == 1
    by_kind = f.groupby("kind")["macs_per_sample"].sum()
    assert by_kind["grouped_conv"] == MACS["grouped_conv"]
    assert by_kind["depthwise_conv"] == MACS["depthwise_conv"]
    assert by_kind["conv"] == MACS["conv"] + MACS["pointwise"]
    assert by_kind["matmul"] == MACS["fc"]
    # activations in the static features' sense: outputs of conv/matmul ops
    assert s["activations"] == 8 * H * H + 2 * 16 * 16 * 16 + 32 * 8 * 8 + 10


def test_conv_geometry_and_elements(net_table):
    f = forward_rows(net_table)
    g = f.loc[f["kind"] == "grouped_conv"].iloc[0]
    assert (g.c_in, g.c_out, g.kernel_r, g.kernel_s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h,
            g.groups, g.in_h, g.in_w) == (8, 16, 3, 3, 2, 2, 1, 1, 1, 2, 32, 32)
    assert g.out_shape == "1x16x16x16"
    c = f.loc[f["kind"] == "conv"].iloc[0]
    assert c.in_elems_per_sample == 3 * H * H and c.in_elems_fixed == 0
    assert c.weight_elems == 8 * 3 * 9
    assert c.out_elems_per_sample == 8 * H * H and c.out_elems_fixed == 0
    assert c.flops_per_sample == 2 * MACS["conv"]
    assert g.weight_elems == 16 * 4 * 9 + 16  # weight + bias
    d = f.loc[f["kind"] == "depthwise_conv"].iloc[0]
    assert (d.c_in, d.c_out, d.groups) == (16, 16, 16)
    bn = f.loc[f["kind"] == "norm"].iloc[0]
    assert bn.weight_elems == 4 * 8  # weight, bias, running mean and variance (eval)
    lin = f.loc[f["kind"] == "matmul"].iloc[0]
    assert lin.op == "addmm.default" and lin.weight_elems == 32 * 10 + 10


def test_views_launch_no_kernel_and_move_nothing(net_table):
    views = net_table.loc[~net_table["launches_kernel"]]
    assert len(views) > 0 and set(views["kind"]) <= {"view", "alloc"}
    assert (views[["in_elems_per_sample", "out_elems_per_sample", "weight_elems", "flops_per_sample"]] == 0).all().all()
    assert {"view.default", "t.default"} <= set(views["op"])
    assert not net_table.loc[net_table["op"] == "convolution.default", "launches_kernel"].eq(False).any()


def test_backward_conv_respects_groups(net_table):
    """convolution_backward costs 2x the forward MACs per gradient, for grouped/depthwise convs too (torch's
    flop_counter formula ignores groups and over-counts a depthwise backward by the channel count)."""
    b = net_table.loc[net_table["pass"] == "backward"]
    conv_bwd = b.loc[b["op"] == "convolution_backward.default"]
    by_kind = conv_bwd.groupby("kind")["macs_per_sample"].sum()
    assert by_kind["depthwise_conv"] == 2 * MACS["depthwise_conv"]      # input and weight gradients
    assert by_kind["grouped_conv"] == 2 * MACS["grouped_conv"]
    # the first conv's input needs no gradient: weight gradient only
    assert by_kind["conv"] == MACS["conv"] + 2 * MACS["pointwise"]
    # weight gradients are written once per step, whatever the batch: they sit in the intercept
    first = conv_bwd.loc[conv_bwd["c_in"] == 3].iloc[0]
    assert first.out_elems_fixed == 8 * 3 * 9 and first.out_elems_per_sample == 0
    tr = sums(net_table, batch=4)
    assert tr["backward"]["macs"] + tr["train_forward"]["macs"] == pytest.approx(
        4 * (3 * sum(MACS.values()) - MACS["conv"]))


def test_forward_flops_agree_with_torch_flop_counter():
    """Conv and matmul FLOPs of the forward pass = torch.utils.flop_counter's (real CPU tensors)."""
    from torch.utils.flop_counter import FlopCounterMode

    module = Net().eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        module(torch.randn(2, 3, H, H))
    table = layer_table("torch", "net", built=net_built(), passes=("forward",))
    mac = table.loc[table["kind"].isin(MAC_KINDS)]
    assert price(mac, 2)["flops"].sum() - 2 * 10 == fc.get_total_flops()  # addmm's bias adds: ours only


def test_train_forward_uses_batch_statistics(net_table):
    tf = net_table.loc[(net_table["pass"] == "train_forward") & (net_table["kind"] == "norm")]
    assert len(tf) == 1
    assert tf.iloc[0]["flops_per_sample"] == 7 * 8 * H * H  # batch statistics (eval: 2 per element)
    assert forward_rows(net_table, "norm").iloc[0]["flops_per_sample"] == 2 * 8 * H * H
    # running statistics are updated in place: batch-independent writes
    assert tf.iloc[0]["out_elems_fixed"] > 0
