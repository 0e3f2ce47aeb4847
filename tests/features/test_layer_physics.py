"""The per-kernel physics estimate: by hand on one kernel, physical directions on real CNN profiles, fallbacks."""

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT
from src.features.kernels import LAYER_COLUMNS, QUANTITIES, kernel_profiles
from src.features.layer_physics import (
    PHYSICS_FEATURES,
    PhysicsConstants,
    ProfileIndex,
    cached_price,
    price_rows,
)
from src.ingest.gpus import gpu_features

LAYERS = REPO_ROOT / "data" / "processed" / "layers.parquet"
GPU_SPECS = ["memory_bandwidth_gbs", "fp32_tflops", "fp16_tflops", "tensor_fp16_tflops", "fp64_tflops",
             "tensor_cores", "compute_capability", "sm_count", "l2_cache_mb"]


@pytest.fixture(scope="module")
def index() -> ProfileIndex:
    keys = ["resnet18", "resnet50", "mobilenetv2_100", "densenet121"]
    layers = pd.read_parquet(LAYERS, columns=LAYER_COLUMNS, filters=[("model_key", "in", keys)])
    return ProfileIndex(kernel_profiles(layers.loc[layers["img_size"] == 224]))


def rows(gpus: list[str], **cfg) -> pd.DataFrame:
    table = gpu_features(sorted(set(gpus))).set_index("gpu")[GPU_SPECS]
    specs = table.loc[gpus].reset_index()
    base = {"model_key": "resnet50", "img_size": 224, "batch_size": 64, "precision": "fp32", "mode": "inference",
            "compile_mode": "eager", "gmacs": 4.11, "param_count_m": 25.56, "activations_m": 11.11,
            "memory_layout": "nchw"}
    base.update(cfg)
    return pd.concat([pd.DataFrame([base] * len(specs)), specs], axis=1)


def one_kernel_index(flops: float, elems: float, c_out: float, out_pixels: float) -> ProfileIndex:
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=flops, in_elems_per_sample=elems)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 32, "pass": "forward", "kernel_class": "mac",
                          "c_out": c_out, "out_pixels": out_pixels, **q, "count": 3, "param_elems": 0.0}])
    return ProfileIndex(prof)


def test_one_kernel_by_hand():
    # 3 launches of a GEMM kernel: 1 GFLOP and 1 M fp32 elements per sample, 128 x 128 grid tiles.
    idx = one_kernel_index(1e9, 1e6, c_out=256, out_pixels=64 * 128)
    X = rows(["Tesla V100 SXM2 32 GB"], model_key="toy", img_size=32, batch_size=2)
    g = X.iloc[0]
    out = price_rows(X, idx, PhysicsConstants(dispatch_us={"eager": 0.0}))
    blocks = np.ceil(2 * 64 * 128 / 128) * np.ceil(256 / 128)  # 256 blocks on 80 SMs: 4 waves, 256/320 useful
    weff = blocks / (np.ceil(blocks / g.sm_count) * g.sm_count)
    t_compute = 2e9 / (g.fp32_tflops * 1e12 * weff)
    t_memory = 2e6 * 4 / (g.memory_bandwidth_gbs * 1e9)
    assert out["t_kernels_ms"].iloc[0] == pytest.approx(3 * max(t_compute, t_memory) * 1e3)
    assert out["mac_wave_efficiency"].iloc[0] == pytest.approx(weff)
    assert out["n_kernels"].iloc[0] == 3 and out["compute_bound_share"].iloc[0] == 1.0


def test_directions_physics_dictates(index):
    gpus = ["Tesla T4", "Tesla V100 SXM2 32 GB", "A100 SXM4 80 GB", "H100 SXM5 80 GB"]
    fp16 = price_rows(rows(gpus, precision="amp_fp16"), index)["t_physics_ms"].to_numpy()
    assert np.all(np.diff(fp16) < 0)  # each newer datacenter GPU is faster, H100 included (never seen in training)
    X = rows(["A100 SXM4 80 GB"] * 2)
    X.loc[1, "memory_bandwidth_gbs"] *= 2
    X.loc[1, "fp32_tflops"] *= 2
    t = price_rows(X, index)["t_physics_ms"].to_numpy()
    assert t[1] < t[0]
    small, big = (price_rows(rows(["A100 SXM4 80 GB"], batch_size=b), index)["t_physics_ms"].iloc[0] for b in (8, 64))
    assert big > small
    infer = price_rows(rows(["A100 SXM4 80 GB"]), index)["t_physics_ms"].iloc[0]
    train = price_rows(rows(["A100 SXM4 80 GB"], mode="training"), index)["t_physics_ms"].iloc[0]
    assert 2.0 < train / infer < 5.0  # forward + backward (about 2x the forward) + optimizer update


def test_eager_batch_one_is_dispatch_bound(index):
    X = rows(["H100 SXM5 80 GB"], model_key="mobilenetv2_100", batch_size=1, gmacs=0.31, param_count_m=3.5,
             activations_m=6.68)
    eager = price_rows(X, index).iloc[0]
    assert eager["t_dispatch_ms"] > eager["t_kernels_ms"] and eager["t_physics_ms"] == eager["t_dispatch_ms"]
    trt = price_rows(X.assign(compile_mode="tensorrt"), index).iloc[0]
    assert trt["t_physics_ms"] < eager["t_physics_ms"]


def test_layout_transforms_of_nchw_convolutions_on_tensor_cores(index):
    """cuDNN wraps an NCHW dense convolution on tensor cores in two layout transforms (the H200 traces): priced for
    the runtimes that leave NCHW to cuDNN, never for NHWC, CUDA-core fp32 or depthwise-only work."""
    on = PhysicsConstants(layout_transform_runtimes=["eager", "cuda_graphs"])
    off = PhysicsConstants()
    amp = rows(["A100 SXM4 80 GB"] * 2, precision="amp_fp16")
    amp.loc[1, "memory_layout"] = "nhwc"
    t_on, t_off = (price_rows(amp, index, c)["t_kernels_ms"].to_numpy() for c in (on, off))
    assert t_on[0] > 1.1 * t_off[0] and t_on[1] == t_off[1]
    # the extra time is the two transforms' traffic: each tensor read and written once at the GPU's bandwidth
    assert t_on[0] - t_off[0] < t_off[0]
    compiled = amp.assign(compile_mode="torch_compile")
    same = price_rows(compiled, index, on)["t_kernels_ms"] == price_rows(compiled, index, off)["t_kernels_ms"]
    assert same.all()
    # fp32: only with TF32, and only from Ampere on (a V100 runs fp32 NCHW convolutions on CUDA cores)
    fp32 = rows(["A100 SXM4 80 GB", "Tesla V100 SXM2 32 GB"])
    tf32 = np.array([True, True])
    grown = price_rows(fp32, index, on, tf32)["t_kernels_ms"] / price_rows(fp32, index, off, tf32)["t_kernels_ms"]
    assert grown.iloc[0] > 1.0 and grown.iloc[1] == 1.0
    assert (price_rows(fp32, index, on)["t_kernels_ms"] == price_rows(fp32, index, off)["t_kernels_ms"]).all()


def test_fp16_uses_tensor_cores_and_tf32_flag(index):
    X = rows(["A100 SXM4 80 GB"] * 3, batch_size=256)
    X.loc[1, "precision"] = "amp_fp16"
    t = price_rows(X, index, tf32=np.array([False, False, True]))["t_physics_ms"].to_numpy()
    assert t[1] < t[0] / 2 and t[2] < t[0] / 2


def test_shares_and_unknown_cnn(index):
    X = rows(["Tesla T4", "Tesla T4"], model_key="resnet50")
    X.loc[1, "model_key"] = "no_such_cnn"
    out = price_rows(X, index)
    assert list(out.columns) == PHYSICS_FEATURES
    assert out["has_layer_profile"].tolist() == [1.0, 0.0]
    shares = out[["compute_bound_share", "memory_bound_share", "floor_bound_share"]].sum(axis=1)
    assert shares.iloc[0] == pytest.approx(1.0)
    assert np.isfinite(out.to_numpy()).all() and (out["t_physics_ms"] > 0).all()
    # the whole-network fallback lands within a factor 3 of the layer estimate for a plain ResNet
    assert 1 / 3 < out["t_kernels_ms"].iloc[1] / out["t_kernels_ms"].iloc[0] < 3


def test_a_cnn_by_its_numbers_adds_compute_and_memory_passes(index):
    from src.features.engineer import engineer

    X = rows(["Tesla T4", "GeForce RTX 4090", "GeForce RTX 4090"], model_key="no_such_cnn")
    X.loc[2, "batch_size"] = 256
    net = engineer(X)
    old = price_rows(X, index, PhysicsConstants())  # 0 passes: the roofline max, as pickled models price it
    new = price_rows(X, index, PhysicsConstants(by_numbers_memory_passes=2.0))
    assert np.allclose(old["t_kernels_ms"], np.maximum(net["t_compute_ms"], net["t_memory_ms"]))
    assert np.allclose(new["t_kernels_ms"], net["t_compute_ms"] + 2.0 * net["t_memory_ms"])
    # the compute share is the compute part; nothing else about the row changes
    assert np.allclose(new["compute_bound_share"], net["t_compute_ms"] / new["t_kernels_ms"])
    assert new["n_kernels"].equals(old["n_kernels"]) and (new["has_layer_profile"] == 0).all()
    # a named CNN's kernels are priced the same either way
    named = rows(["Tesla T4"], model_key="resnet50")
    pd.testing.assert_frame_equal(price_rows(named, index, PhysicsConstants()),
                                  price_rows(named, index, PhysicsConstants(by_numbers_memory_passes=2.0)))


def test_cache_pickling_and_missing_columns(index):
    X = rows(["Tesla T4", "GeForce RTX 4090"])
    first = cached_price(X, index, PhysicsConstants())
    again = cached_price(X.copy(), index, PhysicsConstants())
    pd.testing.assert_frame_equal(first, again)
    clone = pickle.loads(pickle.dumps(index))
    assert clone._cache == {} and len(clone) == len(index)
    with pytest.raises(KeyError, match="sm_count"):
        price_rows(X.drop(columns=["sm_count"]), index)
    with pytest.raises(ValueError, match="unknown key"):
        PhysicsConstants.from_config({"kernel_floor_us": 2.0, "typo": 1})


def test_fusing_runtimes_launch_fewer_cheaper_kernels(index):
    X = rows(["Tesla V100 SXM2 32 GB"] * 3, precision="fp16", batch_size=8)
    X["compile_mode"] = ["eager", "torch_compile", "tensorrt"]
    out = price_rows(X, index)
    assert out["n_kernels"].is_monotonic_decreasing and out["n_kernels"].iloc[2] < out["n_kernels"].iloc[0] / 2
    assert out["t_kernels_ms"].is_monotonic_decreasing
    assert (out["has_layer_profile"] == 1.0).all()
    # without fusion in the constants every runtime prices the same kernels
    flat = price_rows(X, index, PhysicsConstants(fusion={}))
    assert flat["n_kernels"].nunique() == 1


def test_arrays_price_as_the_frame_does(index):
    """The served path hands price_rows a mapping of arrays (no frame): the same floats, bit for bit."""
    X = rows(["Tesla T4", "GeForce RTX 4090", "A100 PCIe 40 GB"], precision="amp_fp16")
    X.loc[1, ["model_key", "precision", "compile_mode"]] = ["no_such_cnn", "int8", "tensorrt"]
    X.loc[2, ["mode", "precision"]] = ["training", "fp32"]
    tf32 = np.array([False, False, True])
    framed = price_rows(X, index, PhysicsConstants(), tf32)
    arrays = cached_price({c: X[c].to_numpy() for c in X.columns}, index, PhysicsConstants(), tf32)
    np.testing.assert_array_equal(arrays.to_numpy(), framed.to_numpy())
    assert list(arrays.columns) == list(framed.columns)
    with pytest.raises(KeyError, match="sm_count"):
        price_rows({c: X[c].to_numpy() for c in X.columns if c != "sm_count"}, index)


def test_winograd_share_and_speedup(index):
    v100 = ["Tesla V100 SXM2 32 GB"]
    shares = {m: price_rows(rows(v100, model_key=m), index)["winograd_share"].iloc[0]
              for m in ("resnet18", "resnet50", "mobilenetv2_100")}
    # resnet18 is mostly 3x3 stride-1 convolutions, resnet50 mostly 1x1 ones, MobileNetV2 has none (depthwise)
    assert shares["resnet18"] > shares["resnet50"] > 0 and shares["mobilenetv2_100"] == 0
    X = pd.concat([rows(v100, model_key="resnet18", precision=p) for p in ("fp32", "amp_fp16")], ignore_index=True)
    plain = price_rows(X, index)
    faster = price_rows(X, index, PhysicsConstants(winograd_speedup=2.25))
    # fp32 on CUDA cores gets the saving on its compute-bound Winograd convolutions; tensor-core AMP does not
    assert faster["t_kernels_ms"].iloc[0] < 0.9 * plain["t_kernels_ms"].iloc[0]
    assert faster["t_kernels_ms"].iloc[1] == pytest.approx(plain["t_kernels_ms"].iloc[1])
    # on Ampere, TF32 convolutions run on tensor cores (no saving); without TF32 they run on CUDA cores
    a100 = rows(["A100 SXM4 40 GB"], model_key="resnet18", precision="fp32")
    for tf32, saves in ((True, False), (False, True)):
        flag = np.array([tf32])
        ratio = (price_rows(a100, index, PhysicsConstants(winograd_speedup=2.25), flag)["t_kernels_ms"].iloc[0]
                 / price_rows(a100, index, tf32=flag)["t_kernels_ms"].iloc[0])
        assert (ratio < 0.9) if saves else ratio == pytest.approx(1.0)


def test_gemm_tile_fill_and_depth_by_hand():
    # one conv-like GEMM: 32 output channels of 64 x 64 pixels, K = 288 MACs per output element (3x3 x 32 in)
    out = 32 * 64 * 64
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=2.0 * 288 * out, in_elems_per_sample=32 * 64 * 64, out_elems_per_sample=out)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 64, "pass": "forward", "kernel_class": "mac",
                          "c_out": 32.0, "out_pixels": 64.0 * 64, **q, "count": 1, "param_elems": 0.0}])
    got = price_rows(rows(["Tesla V100 SXM2 32 GB"], model_key="toy", img_size=64), ProfileIndex(prof)).iloc[0]
    assert got["mac_tile_fill"] == pytest.approx(32 / 128)
    assert got["mac_log2_depth"] == pytest.approx(np.log2(288))
    assert got["winograd_share"] == 0  # a profile without the flag (older served models) has no eligible kernel


def test_split_k_fills_small_grids_only_when_asked():
    # ResNet-34's last stage at batch 1: 7 x 7 x 512 output (4 tiles of 128 x 128), K = 3 x 3 x 512 = 4608
    pixels, c_out, depth = 49.0, 512.0, 4608.0
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=2.0 * depth * pixels * c_out, out_elems_per_sample=pixels * c_out)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 224, "pass": "forward", "kernel_class": "mac",
                          "c_out": c_out, "out_pixels": pixels, **q, "count": 1, "param_elems": 0.0}])
    idx = ProfileIndex(prof)
    X = rows(["Tesla V100 SXM2 32 GB"] * 2, model_key="toy", img_size=224, batch_size=1)
    X.loc[1, "batch_size"] = 256  # 392 x 4 = 1,568 tiles: already many waves, nothing to split
    base = dict(dispatch_us={"eager": 0.0}, kernel_floor_us=0.0)
    off = price_rows(X, idx, PhysicsConstants(**base))
    on = price_rows(X, idx, PhysicsConstants(**base, split_k_min_depth=256, split_k_max=32))
    default_cap = price_rows(X, idx, PhysicsConstants(**base, split_k_min_depth=256))
    capped = price_rows(X, idx, PhysicsConstants(**base, split_k_min_depth=256, split_k_max=4))
    sms = X["sm_count"].iloc[0]
    assert off["mac_wave_efficiency"].iloc[0] == pytest.approx(4 / sms)
    # 4608 / 256 = 18 slices of each of the 4 tiles: 72 blocks on 80 SMs
    assert on["mac_wave_efficiency"].iloc[0] == pytest.approx(72 / sms)
    assert default_cap["mac_wave_efficiency"].iloc[0] == pytest.approx(64 / sms)  # at most 16 slices
    assert capped["mac_wave_efficiency"].iloc[0] == pytest.approx(16 / sms)
    assert on["t_kernels_ms"].iloc[0] == pytest.approx(off["t_kernels_ms"].iloc[0] * 4 / 72)
    assert on["t_kernels_ms"].iloc[1] == pytest.approx(off["t_kernels_ms"].iloc[1])


def test_split_k_leaves_kernels_without_an_output_grid_alone_and_warns_nothing():
    # a weight-gradient-like GEMM (no output grid that grows with the batch) next to a pointwise kernel
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=2.0e6, in_elems_per_sample=1.0e5, out_elems_fixed=1.0e4)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 224, "pass": "forward", "kernel_class": kind,
                          "c_out": 0.0, "out_pixels": 0.0, **q, "count": 1, "param_elems": 0.0}
                         for kind in ("mac", "elementwise")])
    X = rows(["Tesla V100 SXM2 32 GB"], model_key="toy", img_size=224, batch_size=1)
    base = dict(dispatch_us={"eager": 0.0}, kernel_floor_us=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: a division by the zero block count (RuntimeWarning)
        on = price_rows(X, ProfileIndex(prof), PhysicsConstants(**base, split_k_min_depth=256))
    off = price_rows(X, ProfileIndex(prof), PhysicsConstants(**base))
    assert np.isfinite(on["t_kernels_ms"].iloc[0])
    assert on["t_kernels_ms"].iloc[0] == pytest.approx(off["t_kernels_ms"].iloc[0])


def test_split_k_applies_only_to_the_runtimes_named():
    pixels, c_out, depth = 49.0, 512.0, 4608.0  # ResNet-34's last stage at batch 1, as above
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=2.0 * depth * pixels * c_out, out_elems_per_sample=pixels * c_out)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 224, "pass": "forward", "kernel_class": "mac",
                          "c_out": c_out, "out_pixels": pixels, **q, "count": 1, "param_elems": 0.0}])
    X = rows(["Tesla V100 SXM2 32 GB"] * 2, model_key="toy", img_size=224, batch_size=1)
    X["compile_mode"] = ["eager", "tensorrt"]
    base = dict(dispatch_us={"eager": 0.0, "tensorrt": 0.0}, kernel_floor_us=0.0, split_k_min_depth=256)
    every = price_rows(X, ProfileIndex(prof), PhysicsConstants(**base))
    only = price_rows(X, ProfileIndex(prof), PhysicsConstants(**base, split_k_runtimes=["tensorrt"]))
    sms = X["sm_count"].iloc[0]
    assert every["mac_wave_efficiency"].tolist() == pytest.approx([64 / sms, 64 / sms])
    assert only["mac_wave_efficiency"].tolist() == pytest.approx([4 / sms, 64 / sms])


def memo_rows() -> pd.DataFrame:
    """72 rows: 3 GPUs x 4 CNNs (one without a profile) x 3 batches x 2 modes."""
    frames = []
    for model_key in ["resnet18", "resnet50", "densenet121", "no_such_cnn"]:
        for batch in [1, 8, 64]:
            for mode in ["inference", "training"]:
                frames.append(rows(["Tesla T4", "Tesla V100 SXM2 32 GB", "GeForce RTX 4090"], model_key=model_key,
                                   batch_size=batch, mode=mode))
    return pd.concat(frames, ignore_index=True)


def test_row_memo_prices_any_subset_as_pricing_it_directly(index):
    X = memo_rows()
    constants = PhysicsConstants()
    tf32 = np.arange(len(X)) % 3 == 0
    index._cache.clear()
    full = price_rows(X, index, constants, tf32)
    rng = np.random.default_rng(0)
    for size in (20, 40, len(X)):
        pick = np.sort(rng.choice(len(X), size=size, replace=False))
        got = cached_price(X.iloc[pick], index, constants, tf32[pick])
        pd.testing.assert_frame_equal(got, full.iloc[pick], check_exact=True)
    memo = index.row_memo(constants)
    assert len(memo) == len(X)  # each distinct row priced once
    cached_price(X, index, constants, tf32)
    assert len(memo) == len(X)
    # a shuffled column (permutation importance) makes new rows: priced, and right
    shuffled = X.assign(gpu=rng.permutation(X["gpu"].to_numpy()), sm_count=rng.permutation(X["sm_count"].to_numpy()))
    pd.testing.assert_frame_equal(cached_price(shuffled, index, constants, tf32),
                                  price_rows(shuffled, index, constants, tf32), check_exact=True)
    # the TF32 flag is part of a row's key
    flipped = cached_price(X, index, constants, ~tf32)
    pd.testing.assert_frame_equal(flipped, price_rows(X, index, constants, ~tf32), check_exact=True)
    assert not flipped.equals(full)
    # other constants, another memo; a pickled index carries none
    assert index.row_memo(PhysicsConstants(kernel_floor_us=3.0)) is not memo
    assert pickle.loads(pickle.dumps(index))._cache == {}


def test_a_row_without_a_profile_is_priced_the_same_alone_or_in_a_frame(index):
    X = memo_rows()
    full = price_rows(X, index)
    for mode in ("inference", "training"):
        k = int(np.flatnonzero((X["model_key"] == "no_such_cnn") & (X["mode"] == mode))[0])
        alone = price_rows(X.iloc[[k]], index)
        pd.testing.assert_frame_equal(alone, full.iloc[[k]], check_exact=True)
        assert alone["n_kernels"].iloc[0] == pytest.approx(index.kernels_per_gmac(mode) * X["gmacs"].iloc[k])
    # a training step launches more kernels per GMAC than a forward pass (backward + optimizer)
    assert index.kernels_per_gmac("training") > 1.5 * index.kernels_per_gmac("inference")


def test_kernels_per_gmac_by_hand():
    toy = one_kernel_index(flops=2e9, elems=1e6, c_out=64, out_pixels=1024)  # 3 launches of 1 GMAC each
    assert toy.kernels_per_gmac("inference") == pytest.approx(3 / 3.0)


def test_a_profile_added_later_prices_as_one_there_from_the_start():
    """`ProfileIndex.add` (a CNN described at query time): the added CNN prices exactly as in an index built with
    it; known keys stay; the memo is dropped; the kernels-per-GMAC property stays that of the original table."""
    keys = ["resnet18", "mobilenetv2_100", "densenet121"]
    layers = pd.read_parquet(LAYERS, columns=LAYER_COLUMNS, filters=[("model_key", "in", keys)])
    layers = layers.loc[layers["img_size"] == 224]
    full = ProfileIndex(kernel_profiles(layers))
    part = ProfileIndex(kernel_profiles(layers.loc[layers["model_key"] != "densenet121"]))
    per_gmac = {m: part.kernels_per_gmac(m) for m in ("inference", "training")}
    X = pd.concat([rows(["Tesla T4", "GeForce RTX 4090"], model_key=k, mode=m, batch_size=b)
                   for k in keys for m, b in (("inference", 1), ("training", 32))], ignore_index=True)
    before = cached_price(X, part, PhysicsConstants())
    assert before.loc[X["model_key"] == "densenet121", "has_layer_profile"].eq(0.0).all()
    added = part.add(kernel_profiles(layers.loc[layers["model_key"] == "densenet121"]))
    assert sorted({k[0] for k in added}) == ["densenet121"] and all(k[1] == 224 for k in added)
    assert part._cache == {} and len(part) == len(full) and part.has("densenet121", 224, "training")
    pd.testing.assert_frame_equal(cached_price(X, part, PhysicsConstants()), price_rows(X, full))
    assert {m: part.kernels_per_gmac(m) for m in per_gmac} == per_gmac
    assert part.add(kernel_profiles(layers.loc[layers["model_key"] == "resnet18"])) == []
    pd.testing.assert_frame_equal(price_rows(X, part), price_rows(X, full))


def test_grouped_share_is_the_time_share_of_grouped_convolutions():
    """Two equal MAC kernels, one a grouped convolution: half of the kernel time is grouped. A profile without the
    flag (older served models) has none."""
    q = dict.fromkeys(QUANTITIES, 0.0)
    q.update(flops_per_sample=2.0e9, out_elems_per_sample=1.0e5)
    prof = pd.DataFrame([{"model_key": "toy", "img_size": 224, "pass": "forward", "kernel_class": "mac",
                          "winograd": False, "grouped": grouped, "c_out": 128.0, "out_pixels": 784.0, **q,
                          "count": 1, "param_elems": 0.0} for grouped in (True, False)])
    X = rows(["Tesla V100 SXM2 32 GB"], model_key="toy", img_size=224, batch_size=1)
    base = PhysicsConstants(dispatch_us={"eager": 0.0}, kernel_floor_us=0.0)
    assert price_rows(X, ProfileIndex(prof), base)["grouped_share"].iloc[0] == pytest.approx(0.5)
    assert price_rows(X, ProfileIndex(prof.drop(columns="grouped")), base)["grouped_share"].iloc[0] == 0
