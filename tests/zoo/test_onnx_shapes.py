"""Shapes of an ONNX graph (src/zoo/onnx_shapes.py): sizes an exporter computes at run time are folded, so the
per-layer table of such a file equals the meta recorder's."""

import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (zoo / zoo-ci extra)")

from src.zoo import layers as L  # noqa: E402
from src.zoo.layer_pricing import sums  # noqa: E402
from src.zoo.onnx_shapes import infer_shapes_at  # noqa: E402
from src.zoo.resolve import Built, ModelSpec  # noqa: E402


def test_run_time_shape_arithmetic_is_folded(tmp_path):
    """A channel shuffle (ShuffleNet) exports its view sizes as Shape -> Gather -> Div -> Concat -> Reshape, which
    ONNX's data propagation does not follow (Div): the sizes are folded as a runtime would, and the table equals
    the meta recorder's on the same CNN."""
    torch = pytest.importorskip("torch", reason="torch is not installed (profiling / zoo-ci extra)")
    from torch import nn

    class Shuffle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.c1(x)
            b, c, h, w = y.shape
            y = y.view(b, 2, c // 2, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
            return self.c2(y)

    model = Shuffle().eval()
    path = tmp_path / "shuffle.onnx"
    torch.onnx.export(model, torch.randn(1, 3, 16, 16), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    exported = onnx.load(str(path))
    assert "Div" in {n.op_type for n in exported.graph.node}  # the arithmetic inference stops at
    shapes = infer_shapes_at(exported, 5, 16, "shuffle.onnx")
    assert shapes[exported.graph.output[0].name][1] == (5, 8, 16, 16)
    got = L.layer_table("onnx", str(path))
    built = Built(ModelSpec("torchvision", "shuffle", 16), 16, "torch", (1, 3, 16, 16), module=model.to("meta"))
    with torch.device("meta"):
        ref = L.layer_table("torchvision", "shuffle", passes=("forward",), built=built)
    r, g = sums(ref, batch=3)["forward"], sums(got, batch=3)["forward"]
    assert g["macs"] == pytest.approx(r["macs"]) and g["activations"] == pytest.approx(r["activations"])
    assert g["kernels"] == r["kernels"] == 3  # two convs and the shuffle's copy (Transpose / contiguous)
    shuffle = got.loc[got["op"] == "Transpose"].iloc[0]
    assert shuffle["kind"] == "copy" and shuffle["out_elems_per_sample"] == 8 * 16 * 16
