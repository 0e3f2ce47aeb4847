"""Per-layer tables (src/zoo/layers.py): every pass recorded on the meta device, batch linearity, a tiny CNN's
sums by hand, Keras on the meta device, the `layers` stage's reuse of committed rows and the CLI. The operator
rules are tested in test_op_rules.py, pricing in test_layer_pricing.py. CI has CPU torch + Keras only:
torchvision/timm checks skip with the reason."""

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

from src.zoo import layers as L  # noqa: E402
from src.zoo import layers_stage as S  # noqa: E402
from src.zoo.layer_pricing import price, sums  # noqa: E402
from src.zoo.names import ModelSpec  # noqa: E402
from src.zoo.resolve import Built, MissingFrameworkError  # noqa: E402
from tests.zoo.meta_net import forward_rows, net_built, net_layer_table  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HAS_KERAS = importlib.util.find_spec("keras") is not None
HAS_TV = importlib.util.find_spec("torchvision") is not None
HAS_TIMM = importlib.util.find_spec("timm") is not None


@pytest.fixture(scope="module")
def net_table() -> pd.DataFrame:
    return net_layer_table()


def test_parameters_are_on_meta_and_the_table_has_every_pass(net_table):
    assert net_built().module.conv.weight.device.type == "meta"
    assert set(net_table["pass"]) == set(L.PASSES)
    assert net_table.attrs["batches"] == {"forward": (1, 8), "train_forward,backward": (2, 8)}


def test_intercept_plus_slope_reproduces_a_third_batch_size():
    """Rows fitted from batches 1 and 8 price batch 3 exactly as a recording at batch 3 measures it."""
    built = net_built()
    table = L.layer_table("torch", "net", built=built, passes=("forward",))
    direct = L.record_passes(built, 3, ("forward",))["forward"]
    priced = price(table, 3)
    assert len(direct) == len(priced)
    for rec, (_, row) in zip(direct, priced.iterrows(), strict=True):
        assert rec.op == row["op"]
        assert rec.macs == row["macs"] and rec.flops == row["flops"]
        assert rec.in_elems * 4 == row["bytes_read_inputs"] and rec.out_elems * 4 == row["bytes_written"]
    # bytes are element counts times the precision's element size
    half = price(table, 3, "fp16")
    assert half["bytes_written"].sum() * 2 == priced["bytes_written"].sum()
    with pytest.raises(ValueError, match="unknown precision"):
        price(table, 1, "fp12")


def test_tinynets_tiny_cnn_by_hand():
    sys.path.insert(0, str(REPO))
    from tests.profiling.tinynets import tiny_cnn

    with torch.device("meta"):
        module = tiny_cnn().eval()
    built = Built(ModelSpec("torch", "tiny_cnn", 32), 32, "torch", (1, 3, 32, 32), module=module)
    s = sums(L.layer_table("torch", "tiny_cnn", built=built), batch=1)
    assert s["forward"]["macs"] == 32 * 32 * 8 * 27 + 16 * 16 * 16 * 72 + 16 * 10
    assert s["forward"]["params_used"] == 8 * 27 + 16 + 16 * 72 + 32 + 170
    assert s["forward"]["kernels"] == 2 + 2 + 2 + 1 + 1  # conv, bn, relu x2; pool; addmm


@pytest.mark.skipif(not HAS_KERAS, reason="Keras is not installed (zoo / zoo-ci extra)")
def test_keras_mobilenet_on_meta_matches_the_static_analyzer():
    """A Keras application on the torch backend runs on the meta device, inference and a training step."""
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    df = L.layer_table("keras", "MobileNet", 64)
    assert df.attrs["framework"] == "keras-torch" and df.attrs["build"] == "meta"
    s = sums(df, batch=1)
    ref = static_features(build("keras", "MobileNet", 64))  # CPU forward, Keras' own parameter count
    assert s["forward"]["macs"] == ref["macs"]
    assert s["forward"]["params_used"] == ref["trainable_params"]
    assert s["forward"]["activations"] == ref["activations"]
    f = forward_rows(df)
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
    return S.compact(df)


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
    s = sums(L.layer_table("torchvision", "resnet18", 224), batch=1)
    assert round(s["forward"]["gmacs"], 2) == 1.81  # torchvision's documented 1.81 GFLOPS (multiply-adds)
    assert s["forward"]["params_used"] == 11_689_512
    assert s["forward"]["kernels"] == 20 + 20 + 17 + 8 + 1 + 1 + 1  # conv, bn, relu, add, maxpool, mean, addmm


@pytest.mark.skipif(not HAS_TIMM, reason="timm is not installed (zoo extra; CI has CPU torch only)")
def test_timm_depthwise_training_step_is_about_three_forwards():
    """efficientnet_b0: 0.39 GMACs (timm: 0.4); a training step ~3x the forward MACs (flop_counter: ~14x)."""
    s = sums(L.layer_table("timm", "efficientnet_b0", 224), batch=1)
    assert round(s["forward"]["gmacs"], 2) == 0.39
    assert s["forward"]["params_used"] == 5_288_548
    ratio = (s["train_forward"]["macs"] + s["backward"]["macs"]) / s["forward"]["macs"]
    assert 2.9 < ratio < 3.0


@pytest.mark.skipif(not HAS_TIMM, reason="timm is not installed (zoo extra; CI has CPU torch only)")
def test_timm_deprecated_ig_resnext_names_build_their_own_width():
    """timm 1.0.31 maps ig_resnext101_32x48d to resnext101_32x8d; the resolver builds the 828 M-parameter net."""
    s = sums(L.layer_table("timm", "ig_resnext101_32x48d", 224, passes=("forward",)), batch=1)["forward"]
    assert round(s["params_used"] / 1e6, 2) == 828.41  # timm's table: 828.41 M, 153.57 GMACs
    assert 153 < s["gmacs"] < 154

