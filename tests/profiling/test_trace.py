"""Kernel counts of real torch.profiler traces: resnet18, batch 1, fp32, eager and torch.compile, on the H200
(2026-11-28 campaign, fixtures/h200_resnet18_fp32_traces.tar.gz), and a real CPU trace made here."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from src.profiling.__main__ import main
from src.profiling.trace import TRACE_COLUMNS, TraceError, kernel_kind, read_events, summarize_events, summarize_traces

FIXTURE = Path(__file__).parent / "fixtures" / "h200_resnet18_fp32_traces.tar.gz"


@pytest.fixture()
def h200_traces(tmp_path: Path) -> Path:
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # the filter came in 3.11.4
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, **safe)
    return tmp_path


def test_h200_resnet18_kernels_by_runtime(h200_traces: Path) -> None:
    table = summarize_traces(h200_traces).set_index("compile_mode")
    assert list(table.columns) == [c for c in TRACE_COLUMNS if c != "compile_mode"]
    eager, compiled = table.loc["eager"], table.loc["torch_compile"]
    # 20 convolutions + the classifier's GEMV run as library kernels under both runtimes
    assert eager["mac_kernels"] == compiled["mac_kernels"] == 21
    # eager: cuDNN's NHWC engines are fed NCHW tensors, so transforms surround most convolutions
    assert eager["layout_kernels"] == 48 and eager["triton_kernels"] == 0
    # Inductor folds batch norm, ReLU and the residual add into Triton kernels and drops the transforms
    assert compiled["layout_kernels"] == 0 and compiled["triton_kernels"] == 36
    assert eager["kernels"] == 119 and compiled["kernels"] == 57
    assert compiled["kernel_us"] < eager["kernel_us"]
    assert eager["launch_calls"] >= eager["kernels"] - 5  # nearly every kernel is its own launch call
    assert eager["gpu"] == "H200 SXM 141 GB" and eager["img_size"] == 224 and eager["batch_size"] == 1
    assert compiled["compile_warmup_s"] > eager["compile_warmup_s"]


@pytest.mark.parametrize(("name", "kind"), [
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32", "mac"),
    ("nvjet_sm90_hsh_8x64_64x16_2x1_v_bz_bias_TNN", "mac"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>", "layout"),
    ("void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<int>", "other"),
    ("triton_poi_fused__native_batch_norm_legit_no_training_convolution_relu_1", "triton"),
    ("triton_tem_fused_mm_0", "mac"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "other"),
])
def test_kernel_kind(name: str, kind: str) -> None:
    assert kernel_kind(name) == kind


def test_cpu_trace_has_no_kernels(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.relu(torch.ones(8))
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    summary = summarize_events(read_events(path))
    assert summary["kernels"] == 0 and summary["kernel_us"] == 0.0


def test_bad_traces_are_named(h200_traces: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{not json")
    with pytest.raises(TraceError, match="x.json: not a readable JSON trace"):
        read_events(bad / "x.json")
    (bad / "x.json").write_text(json.dumps({"events": []}))
    with pytest.raises(TraceError, match="no 'traceEvents'"):
        read_events(bad / "x.json")
    with pytest.raises(TraceError, match="has no numeric ts/dur"):
        summarize_events([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0}])
    # a trace without its info file is not counted
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(h200_traces / "torchvision-resnet18_fp32_eager.json", lone)
    with pytest.raises(TraceError, match="do not pair up"):
        summarize_traces(lone)
    (lone / "torchvision-resnet18_fp32_eager.info.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(TraceError, match="not a `_target --info-out` file"):
        summarize_traces(lone)


def test_traces_command(h200_traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "counts.csv"
    assert main(["traces", str(h200_traces), "--out", str(out)]) == 0
    assert "2 trace(s) summarised" in capsys.readouterr().out
    assert out.read_text().splitlines()[0].split(",") == TRACE_COLUMNS
    assert main(["traces", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "missing: no such folder of traces" in capsys.readouterr().err
