"""Per-layer tables of an ONNX file (src/zoo/onnx_layers.py): by hand, against the meta-device recorder on the same
CNN exported by torch, per-sample scaling, and clear refusals (fixed batch, control flow, training passes)."""

import json
import subprocess
import sys

import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (zoo / zoo-ci extra)")
from onnx import TensorProto, helper  # noqa: E402

from src.config import REPO_ROOT  # noqa: E402
from src.zoo import layers as L  # noqa: E402
from src.zoo.layer_pricing import price, sums  # noqa: E402
from src.zoo.onnx_layers import OnnxGraphError, onnx_layer_rows  # noqa: E402
from src.zoo.resolve import Built, ModelSpec, UnsupportedModelError, build_onnx  # noqa: E402


def _tiny_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed (profiling / zoo-ci extra)")
    from torch import nn

    class Tiny(nn.Module):
        """conv-BN-ReLU, a depthwise residual branch, max pool, global mean, linear: every priced kind."""

        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
            self.dw, self.b2 = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16)
            self.pw = nn.Conv2d(16, 24, 1, stride=2)
            self.fc = nn.Linear(24, 10)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = y + torch.relu(self.b2(self.dw(y)))
            y = nn.functional.max_pool2d(self.pw(y), 2)
            return self.fc(y.mean((2, 3)))

    torch.manual_seed(0)
    model = Tiny().eval()
    with torch.no_grad():  # distinct BN statistics, so the folded biases are distinct initializers
        for bn in (model.b1, model.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 2)
            bn.bias.uniform_(-1, 1)
    return torch, model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny CNN and its ONNX file, exported as a user would (dynamic batch axis, constant folding on)."""
    torch, model = _tiny_torch()
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    torch.onnx.export(model, torch.randn(1, 3, 32, 32), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    return model, path


def test_rows_by_hand(exported):
    _, path = exported
    df = L.layer_table("onnx", str(path))
    assert df.attrs["framework"] == "onnx" and set(df["pass"]) == {"forward"} and df["img_size"].eq(32).all()
    run = df.loc[df["launches_kernel"]].reset_index(drop=True)
    assert run["kind"].tolist() == ["conv", "activation", "depthwise_conv", "activation", "add", "conv", "pool",
                                    "reduction", "matmul"]
    c1, dw, pw, fc = run.iloc[0], run.iloc[2], run.iloc[5], run.iloc[8]
    assert c1["macs_per_sample"] == pytest.approx(32 * 32 * 16 * 3 * 9) and c1["macs_fixed"] == pytest.approx(0)
    assert c1["flops_per_sample"] == pytest.approx(2 * 32 * 32 * 16 * 27)
    assert c1["weight_elems"] == 16 * 27 + 16  # weight + the bias BN folded into it
    assert c1["in_elems_per_sample"] == 3 * 32 * 32 and c1["out_elems_per_sample"] == 16 * 32 * 32
    assert (c1["c_in"], c1["c_out"], c1["kernel_r"], c1["stride_h"], c1["pad_h"], c1["groups"]) == (3, 16, 3, 1, 1, 1)
    assert dw["macs_per_sample"] == pytest.approx(32 * 32 * 16 * 9) and dw["groups"] == 16
    assert pw["macs_per_sample"] == pytest.approx(16 * 16 * 24 * 16) and pw["stride_h"] == 2
    assert run.iloc[4]["in_elems_per_sample"] == 2 * 16 * 32 * 32  # the residual add reads both branches
    assert fc["flops_per_sample"] == pytest.approx(2 * 24 * 10 + 10) and fc["weight_elems"] == 24 * 10 + 10
    assert run.iloc[6]["flops_per_sample"] == pytest.approx(8 * 8 * 24 * 4)  # max pool: window x outputs
    # a third batch size: intercept + slope reproduce shape inference at batch 5
    s1, s5 = sums(df, batch=1), sums(df, batch=5)
    assert s5["forward"]["macs"] == pytest.approx(5 * s1["forward"]["macs"])
    assert s5["forward"]["bytes_read_weights"] == s1["forward"]["bytes_read_weights"]
    assert s1["forward"]["params_used"] == (16 * 27 + 16) + (16 * 9 + 16) + (24 * 16 + 24) + (24 * 10 + 10)


def test_agrees_with_the_meta_recorder_on_the_same_cnn(exported):
    """The same CNN through torch's dispatch (the measured CNNs' tables) and through its ONNX file: equal MACs, conv
    geometry and activations; the ONNX graph has no batch-norm kernels (the exporter folded them into the convs)."""
    import torch

    model, path = exported
    built = Built(ModelSpec("torchvision", "tiny", 32), 32, "torch", (1, 3, 32, 32), module=model.to("meta"))
    with torch.device("meta"):
        ref = L.layer_table("torchvision", "tiny", passes=("forward",), built=built)
    got = L.layer_table("onnx", str(path))
    r, g = sums(ref, batch=4)["forward"], sums(got, batch=4)["forward"]
    assert g["macs"] == pytest.approx(r["macs"]) and g["activations"] == pytest.approx(r["activations"])
    bn = int(((ref["kind"] == "norm") & ref["launches_kernel"]).sum())
    assert bn == 2 and g["kernels"] == r["kernels"] - bn
    convs = ["c_in", "c_out", "kernel_r", "kernel_s", "stride_h", "pad_h", "groups", "in_h"]
    is_conv = ["conv", "depthwise_conv"]
    assert (got.loc[got["kind"].isin(is_conv), convs].astype(int).to_numpy().tolist()
            == ref.loc[ref["kind"].isin(is_conv), convs].astype(int).to_numpy().tolist())
    # bytes differ only by what BN read and wrote (the folded graph reads no BN input and writes no BN output)
    bn_bytes = price(ref.loc[ref["kind"] == "norm"], 4)["bytes"].sum()
    assert g["bytes"] == pytest.approx(r["bytes"] - bn_bytes, rel=0.02)


def test_exporter_spellings_priced_as_the_kernels_torch_runs(tmp_path):
    """torch.onnx writes Linear as MatMul + Add, exact GELU as five nodes, SiLU as Sigmoid + Mul and GroupNorm as
    InstanceNormalization + Mul + Add: each group is priced as the one kernel eager PyTorch runs, so the table has
    the recorder's kernels, FLOPs and bytes (a squeeze-excite gate, Sigmoid times another tensor, stays two)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (profiling / zoo-ci extra)")
    from torch import nn

    class Spellings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.gn, self.se = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.Conv2d(8, 8, 1)
            self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

        def forward(self, x):
            y = nn.functional.silu(self.gn(self.conv(x)))
            y = y * torch.sigmoid(self.se(y))
            return self.fc2(nn.functional.gelu(self.fc1(y.mean((2, 3)))))

    model = Spellings().eval()
    path = tmp_path / "spellings.onnx"
    torch.onnx.export(model, torch.randn(1, 3, 8, 8), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert {"Erf", "InstanceNormalization", "Sigmoid"} <= set(ops)
    got = L.layer_table("onnx", str(path))
    assert got.attrs["exporter_groups"] == {"Gelu": 1, "GroupNorm": 1, "Silu": 1}
    built = Built(ModelSpec("torchvision", "spellings", 8), 8, "torch", (1, 3, 8, 8), module=model.to("meta"))
    with torch.device("meta"):
        ref = L.layer_table("torchvision", "spellings", passes=("forward",), built=built)
    r, g = sums(ref, batch=2)["forward"], sums(got, batch=2)["forward"]
    run = got.loc[got["launches_kernel"]]
    kinds = ["conv", "norm", "activation", "conv", "activation", "elementwise", "reduction", "matmul", "activation",
             "matmul"]
    assert run["kind"].tolist() == kinds == ref.loc[ref["launches_kernel"], "kind"].tolist()
    assert g["kernels"] == r["kernels"] and g["macs"] == pytest.approx(r["macs"])
    assert g["flops"] == pytest.approx(r["flops"], rel=0.02) and g["bytes"] == pytest.approx(r["bytes"], rel=0.02)
    gelu = got.loc[got["op"] == "Gelu"].iloc[0]
    assert gelu["flops_per_sample"] == gelu["out_elems_per_sample"] == 16


def _graph(nodes, inits, out_shape=("N", 4), inputs_shape=("N", 3, 32, 32)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(inputs_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_graph_that_fixes_its_batch_is_refused_with_the_reason():
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 3072])
    m = _graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="flatten_to_1")], [shape], ("N", 3072))
    with pytest.raises(OnnxGraphError, match="fixes its batch size"):
        onnx_layer_rows(m, 32, "fixed.onnx")


def test_control_flow_and_training_passes_are_refused(tmp_path):
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    m = _graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch, name="gate")],
               [cond], ("N", 3, 32, 32))
    with pytest.raises(UnsupportedModelError, match="If node 'gate'"):
        onnx_layer_rows(m, 32)
    path = tmp_path / "relu.onnx"
    onnx.save(_graph([helper.make_node("Relu", ["x"], ["y"])], [], ("N", 3, 32, 32)), str(path))
    with pytest.raises(UnsupportedModelError, match="forward pass only"):
        L.layer_table("onnx", str(path), 32, passes=L.PASSES)


def test_unclassified_op_is_kept_and_named(tmp_path):
    path = tmp_path / "shrink.onnx"
    onnx.save(_graph([helper.make_node("Shrink", ["x"], ["y"], lambd=0.5)], [], ("N", 3, 32, 32)), str(path))
    df = L.layer_table("onnx", str(path), 32)
    assert df.attrs["unclassified_ops"] == ["Shrink"] and df["kind"].tolist() == ["other"]
    assert df["in_elems_per_sample"].iloc[0] == 3 * 32 * 32 and df["launches_kernel"].iloc[0]


def test_input_size_override_and_static_subgraphs(tmp_path):
    """A weight transposed in the graph is folded by any runtime (a row that launches nothing); the MatMul reads
    the transposed weight as a weight. The input size of the file can be overridden."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], [0.1] * 12)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["f", "wt"], ["y"])]
    path = tmp_path / "head.onnx"
    onnx.save(_graph(nodes, [w]), str(path))
    df = L.layer_table("onnx", str(path), 64)
    assert build_onnx(str(path), None).input_size == 32 and df.attrs["img_size"] == 64
    kinds = dict(zip(df["op"], zip(df["kind"], df["launches_kernel"], strict=True), strict=True))
    assert kinds == {"GlobalAveragePool": ("pool", True), "Flatten": ("view", False), "Transpose": ("view", False),
                     "MatMul": ("matmul", True)}
    mm = df.loc[df["op"] == "MatMul"].iloc[0]
    assert mm["weight_elems"] == 12 and mm["macs_per_sample"] == 12 and mm["in_elems_per_sample"] == 3
    assert df.loc[df["op"] == "GlobalAveragePool", "flops_per_sample"].iloc[0] == 3 * 64 * 64
    assert sums(df)["forward"]["params_used"] == 12


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.zoo", "layers", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)


def test_cli_json_of_an_onnx_file_and_its_errors(exported, tmp_path):
    _, path = exported
    p = _cli("--source", "onnx", "--model", str(path), "--batch", "2", "--precision", "fp16", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["framework"] == "onnx" and set(out["sums"]) == {"forward"} and out["batch_size"] == 2
    assert out["sums"]["forward"]["kernels"] == 9
    assert sum(r["macs"] for r in out["layers"]) == pytest.approx(out["sums"]["forward"]["macs"])
    p = _cli("--source", "onnx", "--model", str(path), "--passes", "training")
    assert p.returncode == 1 and "forward pass only" in p.stderr
    p = _cli("--source", "onnx", "--model", str(tmp_path / "missing.onnx"))
    assert p.returncode == 2 and "not found" in p.stderr
