"""Pricing a per-layer table (src/zoo/layer_pricing.py): forward conv rows priced at a batch size equal the
single-layer cost model's FLOPs and bytes. The small CNN is tests/zoo/meta_net.py's."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch", reason="per-layer tables record torch operators (zoo / zoo-ci extra)")

from src.zoo.layer_pricing import price  # noqa: E402
from tests.zoo.meta_net import forward_rows, net_layer_table  # noqa: E402


@pytest.fixture(scope="module")
def net_table() -> pd.DataFrame:
    return net_layer_table()


def test_conv_rows_match_the_single_layer_cost_model(net_table):
    """FLOPs and bytes of forward conv rows = src/ingest/layers.py's conv_cost (the layer table's formula)."""
    from src.ingest.layers import conv_cost

    conv = price(forward_rows(net_table).loc[lambda d: d["c_in"].notna()], 4)
    rows = pd.DataFrame({
        "n": 4, "c": conv["c_in"], "h": conv["in_h"], "w": conv["in_w"], "k": conv["c_out"], "r": conv["kernel_r"],
        "s": conv["kernel_s"], "stride_h": conv["stride_h"], "stride_w": conv["stride_w"], "pad_h": conv["pad_h"],
        "pad_w": conv["pad_w"], "pad_h_end": conv["pad_h"], "pad_w_end": conv["pad_w"],
        "dilation_h": conv["dilation_h"], "dilation_w": conv["dilation_w"], "groups": conv["groups"],
        "precision": "fp32"}).astype({c: "int64" for c in ("c", "h", "w", "k", "r", "s", "groups")})
    ref = conv_cost(rows)
    assert list(ref["flops"]) == list(conv["flops"])
    assert list(ref["bytes_in"]) == list(conv["bytes_read_inputs"])
    assert list(ref["bytes_out"]) == list(conv["bytes_written"])
