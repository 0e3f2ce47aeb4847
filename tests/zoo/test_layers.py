"""Per-layer tables (src/zoo/layers.py): sums against hand-computed figures, batch linearity, conv geometry, the
backward conv rule (groups respected), Keras on the meta device, the `layers` stage's reuse of committed rows and
the CLI. CI has CPU torch + Keras only: torchvision/timm checks skip with the reason."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch", reason="per-layer tables record torch operators (zoo / zoo-ci extra)")
from torch import nn  # noqa: E402

from src.zoo import layers as L  # noqa: E402
from src.zoo import layers_stage as S  # noqa: E402
from src.zoo.names import ModelSpec  # noqa: E402
from src.zoo.resolve import Built, MissingFrameworkError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HAS_KERAS = importlib.util.find_spec("keras") is not None
HAS_TV = importlib.util.find_spec("torchvision") is not None
HAS_TIMM = importlib.util.find_spec("timm") is not None


class Net(nn.Module):
    """conv3x3 3->8 (no bias) + BN + ReLU; grouped conv3x3 8->16 g=2 stride 2 (+bias); depthwise 3x3 (16, bias)
    + ReLU with a residual add; maxpool 2; pointwise 1x1 16->32 (no bias); global avg pool; linear 32->10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.gconv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pool = nn.MaxPool2d(2)
        self.pw = nn.Conv2d(16, 32, 1, bias=False)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.gconv(x)
        x = x + torch.relu(self.dw(x))
        x = self.pw(self.pool(x))
        return self.fc(torch.flatten(x.mean((2, 3)), 1))


H = 32  # input size
# hand-computed, per image: output elements x (C_in / groups) x kernel area
MACS = {
    "conv": 8 * H * H * 3 * 9,                       # 32x32x8 outputs, 3 inputs x 3x3
    "grouped_conv": 16 * 16 * 16 * (8 // 2) * 9,     # 16x16x16 outputs, 4 inputs per group x 3x3
    "depthwise_conv": 16 * 16 * 16 * 1 * 9,          # one input channel per output
    "pointwise": 32 * 8 * 8 * 16,                    # 1x1 after the 2x2 pool
    "fc": 32 * 10,
}
PARAMS = 3 * 8 * 9 + (8 + 8) + (16 * 4 * 9 + 16) + (16 * 9 + 16) + 16 * 32 + (32 * 10 + 10)


def net_built(size: int = H) -> Built:
    with torch.device("meta"):
        module = Net().eval()
    return Built(ModelSpec("torch", "net", size), size, "torch", (1, 3, size, size), module=module)


@pytest.fixture(scope="module")
def net_table() -> pd.DataFrame:
    return L.layer_table("torch", "net", built=net_built())


def _fwd(df: pd.DataFrame, kind: str | None = None) -> pd.DataFrame:
    f = df.loc[df["pass"] == "forward"]
    return f if kind is None else f.loc[f["kind"] == kind]


def test_parameters_are_on_meta_and_the_table_has_every_pass(net_table):
    assert net_built().module.conv.weight.device.type == "meta"
    assert set(net_table["pass"]) == set(L.PASSES)
    assert net_table.attrs["batches"] == {"forward": (1, 8), "train_forward,backward": (2, 8)}


def test_forward_macs_params_and_kinds_by_hand(net_table):
    s = L.sums(net_table, batch=1)["forward"]
    assert s["macs"] == sum(MACS.values())
    assert s["params_used"] == PARAMS
    assert L.sums(net_table, batch=5)["forward"]["macs"] == 5 * sum(MACS.values())
    f = _fwd(net_table)
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
    f = _fwd(net_table)
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


def test_intercept_plus_slope_reproduces_a_third_batch_size():
    """Rows fitted from batches 1 and 8 price batch 3 exactly as a recording at batch 3 measures it."""
    built = net_built()
    table = L.layer_table("torch", "net", built=built, passes=("forward",))
    direct = L.record_passes(built, 3, ("forward",))["forward"]
    priced = L.price(table, 3)
    assert len(direct) == len(priced)
    for rec, (_, row) in zip(direct, priced.iterrows(), strict=True):
        assert rec.op == row["op"]
        assert rec.macs == row["macs"] and rec.flops == row["flops"]
        assert rec.in_elems * 4 == row["bytes_read_inputs"] and rec.out_elems * 4 == row["bytes_written"]
    # bytes are element counts times the precision's element size
    half = L.price(table, 3, "fp16")
    assert half["bytes_written"].sum() * 2 == priced["bytes_written"].sum()
    with pytest.raises(ValueError, match="unknown precision"):
        L.price(table, 1, "fp12")


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
    tr = L.sums(net_table, batch=4)
    assert tr["backward"]["macs"] + tr["train_forward"]["macs"] == pytest.approx(
        4 * (3 * sum(MACS.values()) - MACS["conv"]))


def test_forward_flops_agree_with_torch_flop_counter():
    """Conv and matmul FLOPs of the forward pass = torch.utils.flop_counter's (real CPU tensors)."""
    from torch.utils.flop_counter import FlopCounterMode

    module = Net().eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        module(torch.randn(2, 3, H, H))
    table = L.layer_table("torch", "net", built=net_built(), passes=("forward",))
    mac = table.loc[table["kind"].isin(L.MAC_KINDS)]
    assert L.price(mac, 2)["flops"].sum() - 2 * 10 == fc.get_total_flops()  # addmm's bias adds: ours only


def test_train_forward_uses_batch_statistics(net_table):
    tf = net_table.loc[(net_table["pass"] == "train_forward") & (net_table["kind"] == "norm")]
    assert len(tf) == 1
    assert tf.iloc[0]["flops_per_sample"] == 7 * 8 * H * H  # batch statistics (eval: 2 per element)
    assert _fwd(net_table, "norm").iloc[0]["flops_per_sample"] == 2 * 8 * H * H
    # running statistics are updated in place: batch-independent writes
    assert tf.iloc[0]["out_elems_fixed"] > 0


def test_tinynets_tiny_cnn_by_hand():
    sys.path.insert(0, str(REPO))
    from tests.profiling.tinynets import tiny_cnn

    with torch.device("meta"):
        module = tiny_cnn().eval()
    built = Built(ModelSpec("torch", "tiny_cnn", 32), 32, "torch", (1, 3, 32, 32), module=module)
    s = L.sums(L.layer_table("torch", "tiny_cnn", built=built), batch=1)
    assert s["forward"]["macs"] == 32 * 32 * 8 * 27 + 16 * 16 * 16 * 72 + 16 * 10
    assert s["forward"]["params_used"] == 8 * 27 + 16 + 16 * 72 + 32 + 170
    assert s["forward"]["kernels"] == 2 + 2 + 2 + 1 + 1  # conv, bn, relu x2; pool; addmm


def test_conv_rows_match_the_single_layer_cost_model(net_table):
    """FLOPs and bytes of forward conv rows = src/ingest/layers.py's conv_cost (the layer table's formula)."""
    from src.ingest.layers import conv_cost

    conv = L.price(_fwd(net_table).loc[lambda d: d["c_in"].notna()], 4)
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


@pytest.mark.skipif(not HAS_KERAS, reason="Keras is not installed (zoo / zoo-ci extra)")
def test_keras_mobilenet_on_meta_matches_the_static_analyzer():
    """A Keras application on the torch backend runs on the meta device, inference and a training step."""
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    df = L.layer_table("keras", "MobileNet", 64)
    assert df.attrs["framework"] == "keras-torch" and df.attrs["build"] == "meta"
    s = L.sums(df, batch=1)
    ref = static_features(build("keras", "MobileNet", 64))  # CPU forward, Keras' own parameter count
    assert s["forward"]["macs"] == ref["macs"]
    assert s["forward"]["params_used"] == ref["trainable_params"]
    assert s["forward"]["activations"] == ref["activations"]
    f = _fwd(df)
    assert (f["kind"] == "depthwise_conv").sum() == 13
    b = df.loc[df["pass"] == "backward"]
    # conv1, 13 pointwise, the 1x1 classifier conv and 13 depthwise convs
    assert (b["op"] == "convolution_backward.default").sum() == 28
    # As TensorFlow runs it on a GPU: 27 fused batch norms (not Keras' seven elementwise ops each) in inference
    # and training, and NCHW convolutions without layout copies of their activations.
    n_bn = sum(type(layer).__name__ == "BatchNormalization" for layer in build("keras", "MobileNet", 64)
               .keras_model.layers)
    assert n_bn == 27
    for p in ("forward", "train_forward"):
        ran = df.loc[(df["pass"] == p) & df["launches_kernel"]]
        assert (ran["kind"] == "norm").sum() == n_bn, p
        assert not (ran["kind"] == "copy").any(), ran["op"].value_counts()
        assert not ran["op"].str.match(r"(rsqrt|sub|ones_like|var)").any(), ran["op"].value_counts()
    assert b["op"].str.startswith("native_batch_norm_backward").sum() == n_bn
    assert 2.5 < (s["train_forward"]["macs"] + s["backward"]["macs"]) / s["forward"]["macs"] < 3.0


def _measurements(rows: list[tuple[str, str, str, int, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"model_key": k, "model": m, "model_source": src, "img_size": size, "gpu": gpu,
                          "is_cpu": False, "is_cnn": True, "batch_size": 1, "gmacs": float("nan"),
                          "param_count_m": float("nan"), "activations_m": float("nan")}
                         for k, m, src, size, gpu in rows])


def _stage(tmp_path: Path, meas: pd.DataFrame, **kw) -> dict:
    meas.to_parquet(tmp_path / "m.parquet")
    pd.DataFrame({"gpu": ["G1", "G2"], "compute_capability": [8.6, 7.5]}).to_parquet(tmp_path / "g.parquet")
    return S.run_layers_stage(tmp_path / "m.parquet", tmp_path / "g.parquet", None, tmp_path / "layers.parquet",
                              tmp_path / "fail.csv", tmp_path / "summary.json", workers=0, log=lambda *_: None, **kw)


def _committed_rows(model_key: str, size: int) -> pd.DataFrame:
    df = L.layer_table("torch", "net", built=net_built(size))
    df.insert(0, "model_key", model_key)
    df["build"], df["seconds"], df["layers_version"] = "meta", 0.5, L.LAYERS_VERSION
    return L.compact(df)


def test_stage_reuses_committed_rows_and_failures_without_building(tmp_path, monkeypatch):
    meas = _measurements([("resnet50", "resnet50", "torchvision", 224, "G1"),
                          ("resnet50", "resnet50", "torchvision", 224, "G2"),
                          ("vgg16", "vgg16", "torchvision", 224, "G1"),
                          ("foo", "foo", "mlperf", 224, "G1")])
    committed = _committed_rows("resnet50", 32).assign(img_size=224)
    committed.to_parquet(tmp_path / "layers.parquet")
    fail = pd.DataFrame([{"model_key": "vgg16", "model": "vgg16", "model_source": "torchvision", "img_size": 224,
                          "n_gpus": 1, "zoo_source": "torchvision", "zoo_model": "vgg16", "stage": "record",
                          "error": "RuntimeError", "reason": "made up", "seconds": 0.1,
                          "layers_version": L.LAYERS_VERSION}])
    fail.to_csv(tmp_path / "fail.csv", index=False)

    def no_build(*a, **k):
        raise AssertionError("the stage built a model although the committed tables hold it")

    monkeypatch.setattr(S, "build_target", no_build)
    summary = _stage(tmp_path, meas)
    out = pd.read_parquet(tmp_path / "layers.parquet")
    assert len(out) == len(committed) and set(out["model_key"]) == {"resnet50"}
    assert summary["reused_pairs"] == 1 and summary["pairs_built_now"] == 0
    cov = summary["coverage"]
    assert (cov["cnns_total"], cov["cnns_with_layers"], cov["gpu_rows_total"], cov["gpu_rows_with_layers"]) == (
        3, 1, 4, 2)
    fails = pd.read_csv(tmp_path / "fail.csv")
    # the committed failure is kept, the suite model without a definition is added: nothing dropped silently
    assert sorted(zip(fails["model_key"], fails["stage"], strict=True)) == [("foo", "resolve"), ("vgg16", "record")]
    assert summary["failures_by_reason"] == {"record:RuntimeError": 1, "resolve:NoDefinition": 1}
    assert json.loads((tmp_path / "summary.json").read_text())["coverage"] == cov


def test_stage_builds_only_missing_pairs_and_skips_without_the_extra(tmp_path, monkeypatch):
    meas = _measurements([("resnet50", "resnet50", "torchvision", 224, "G1"),
                          ("resnet18", "resnet18", "torchvision", 224, "G1"),
                          ("convnext_tiny", "convnext_tiny.fb_in1k", "timm", 224, "G2")])
    _committed_rows("resnet50", 32).assign(img_size=224).to_parquet(tmp_path / "layers.parquet")
    calls = []

    def fake_build(model_key, source, name, img_size, timeout_s=None):
        calls.append((model_key, source, name, img_size))
        if source == "timm":
            return None, {"stage": S.MISSING_EXTRA, "error": "MissingFrameworkError", "reason": "no timm"}
        return _committed_rows(model_key, 32).assign(img_size=img_size), None

    monkeypatch.setattr(S, "build_target", fake_build)
    summary = _stage(tmp_path, meas)
    assert sorted(calls) == [("convnext_tiny", "timm", "convnext_tiny", 224),
                             ("resnet18", "torchvision", "resnet18", 224)]
    assert summary["pairs_built_now"] == 1 and summary["skipped_missing_extra"] == 1
    assert summary["coverage"]["pairs_with_layers"] == 2
    # a missing extra is not the model's failure, but the pair is named with the reason, never dropped silently
    named = pd.read_csv(tmp_path / "fail.csv")
    assert named[["model_key", "stage", "error"]].values.tolist() == [
        ["convnext_tiny", "not_computed", "MissingZooExtra"]]
    assert "no timm" in named["reason"].iloc[0]
    assert summary["failures"] == 0 and summary["not_computed"] == 1
    calls.clear()
    _stage(tmp_path, meas)
    assert calls == [("convnext_tiny", "timm", "convnext_tiny", 224)]  # only the pair still missing


def test_stage_offline_or_over_budget_names_what_it_did_not_build(tmp_path, monkeypatch):
    meas = _measurements([("resnet50", "resnet50", "torchvision", 224, "G1"),
                          ("resnet18", "resnet18", "torchvision", 224, "G1")])
    _committed_rows("resnet50", 32).assign(img_size=224).to_parquet(tmp_path / "layers.parquet")
    monkeypatch.setattr(S, "build_target", lambda *a, **k: pytest.fail("offline: nothing is built"))
    summary = _stage(tmp_path, meas, offline_only=True)
    named = pd.read_csv(tmp_path / "fail.csv")
    assert named[["model_key", "stage", "error"]].values.tolist() == [["resnet18", "not_computed", "OfflineOnly"]]
    assert summary["failures"] == 0 and summary["not_computed"] == 1 and summary["skipped_offline_only"] == 1
    summary = _stage(tmp_path, meas, time_budget_s=-1.0)  # a budget already spent: resnet18 is still to do
    named = pd.read_csv(tmp_path / "fail.csv")
    assert named[["model_key", "stage", "error"]].values.tolist() == [["resnet18", "not_computed", "TimeBudget"]]
    assert summary["skipped_time_budget"] == 1


def test_build_target_records_failures_with_their_stage(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("Cannot copy out of meta tensor\nmore text")

    monkeypatch.setattr(L, "build_meta", boom)
    rows, fail = S.build_target("x", "torchvision", "resnet18", 224)
    assert rows is None and fail["stage"] == "build" and fail["reason"] == "Cannot copy out of meta tensor"

    def missing(*a, **k):
        raise MissingFrameworkError("timm is not installed")

    monkeypatch.setattr(L, "build_meta", missing)
    assert S.build_target("x", "timm", "y", 224)[1]["stage"] == S.MISSING_EXTRA

    monkeypatch.setattr(L, "build_meta", lambda *a, **k: (net_built(), "meta"))
    real = L.record_passes

    def shifting(built, batch, passes=L.PASSES):  # an op sequence that changes with the batch size
        out = real(built, batch, passes)
        return {p: (r[:-1] if batch == 8 else r) for p, r in out.items()}

    monkeypatch.setattr(L, "record_passes", shifting)
    rows, fail = S.build_target("x", "torch", "net", 32)
    assert rows is None and fail["stage"] == "batch_dependent_ops" and "op sequence differs" in fail["reason"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.zoo", "layers", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_cli_unknown_name_exits_2_with_close_matches():
    p = _cli("--source", "torchvision", "--model", "resnet5O")
    assert p.returncode == 2, p.stderr
    assert "unknown torchvision model 'resnet5O'" in p.stderr and "resnet50" in p.stderr
    p = _cli("--source", "keras", "--model", "MobileNetV9")
    assert p.returncode == 2 and "MobileNetV2" in p.stderr


@pytest.mark.skipif(not HAS_KERAS, reason="Keras is not installed (zoo / zoo-ci extra)")
def test_cli_json_of_a_keras_model():
    p = _cli("--source", "keras", "--model", "MobileNet", "--input-size", "64", "--batch", "4", "--passes",
             "forward", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["batch_size"] == 4 and out["img_size"] == 64 and set(out["sums"]) == {"forward"}
    convs = [r for r in out["layers"] if r["kind"] in ("conv", "depthwise_conv")]
    assert len(convs) == 28 and all("c_in" in r and "kernel_r" in r for r in convs)
    assert math.isclose(sum(r["macs"] for r in out["layers"]), out["sums"]["forward"]["macs"])


# ---- torchvision / timm (zoo extra): skipped in CI, which has neither ---------------------------------------
@pytest.mark.skipif(not HAS_TV, reason="torchvision is not installed (zoo extra; CI has CPU torch only)")
def test_torchvision_resnet18_sums():
    s = L.sums(L.layer_table("torchvision", "resnet18", 224), batch=1)
    assert round(s["forward"]["gmacs"], 2) == 1.81  # torchvision's documented 1.81 GFLOPS (multiply-adds)
    assert s["forward"]["params_used"] == 11_689_512
    assert s["forward"]["kernels"] == 20 + 20 + 17 + 8 + 1 + 1 + 1  # conv, bn, relu, add, maxpool, mean, addmm


@pytest.mark.skipif(not HAS_TIMM, reason="timm is not installed (zoo extra; CI has CPU torch only)")
def test_timm_depthwise_training_step_is_about_three_forwards():
    """efficientnet_b0: 0.39 GMACs (timm: 0.4); a training step ~3x the forward MACs (flop_counter: ~14x)."""
    s = L.sums(L.layer_table("timm", "efficientnet_b0", 224), batch=1)
    assert round(s["forward"]["gmacs"], 2) == 0.39
    assert s["forward"]["params_used"] == 5_288_548
    ratio = (s["train_forward"]["macs"] + s["backward"]["macs"]) / s["forward"]["macs"]
    assert 2.9 < ratio < 3.0


@pytest.mark.skipif(not HAS_TIMM, reason="timm is not installed (zoo extra; CI has CPU torch only)")
def test_timm_deprecated_ig_resnext_names_build_their_own_width():
    """timm 1.0.31 maps ig_resnext101_32x48d to resnext101_32x8d; the resolver builds the 828 M-parameter net."""
    s = L.sums(L.layer_table("timm", "ig_resnext101_32x48d", 224, passes=("forward",)), batch=1)["forward"]
    assert round(s["params_used"] / 1e6, 2) == 828.41  # timm's table: 828.41 M, 153.57 GMACs
    assert 153 < s["gmacs"] < 154

