"""Triton PTX collection and launch grids, on real nvcc PTX placed in Triton's cache layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from src.profiling.ncu import NCU_METRICS, read_ncu_csv
from src.profiling.triton_ptx import (
    PtxCaptureError,
    collect_triton_ptx,
    compare_with_ncu,
    launch_params,
    launches_from_ncu,
    launches_from_trace,
    ptx_entries,
    wrapper_calls,
)

FIX = Path(__file__).parent / "fixtures"
PTX = FIX / "triton_like_kernel_sm90.ptx"  # real nvcc 13.0 output, see triton_like_kernel.cu
NAME = "triton_poi_fused_add_relu_0"


def _cache_variant(cache: Path, triton_hash: str, num_warps: int) -> None:
    """One compiled kernel in Triton's cache layout: <cache>/triton/0/<hash>/<name>.{ptx,json}."""
    folder = cache / "triton" / "0" / triton_hash
    folder.mkdir(parents=True)
    shutil.copyfile(PTX, folder / f"{NAME}.ptx")
    (folder / f"{NAME}.json").write_text(json.dumps({"name": NAME, "num_warps": num_warps, "shared": 0}))


def test_entries_of_real_ptx():
    assert ptx_entries(PTX.read_text()) == [NAME]


def test_single_variant_is_kept_with_its_block_size(tmp_path: Path):
    cache, dest = tmp_path / "cache", tmp_path / "out"
    _cache_variant(cache, "A" * 52, num_warps=4)
    manifest = collect_triton_ptx(cache, dest)
    assert manifest.loc[0, "kernel_name"] == NAME and manifest.loc[0, "status"] == "only_variant"
    assert manifest.loc[0, "threads_per_block"] == 128
    assert (dest / manifest.loc[0, "ptx_file"]).read_text() == PTX.read_text()


def test_autotuning_winner_comes_from_best_config(tmp_path: Path):
    cache, dest = tmp_path / "cache", tmp_path / "out"
    _cache_variant(cache, "B" * 52, num_warps=4)
    _cache_variant(cache, "C" * 52, num_warps=8)
    (cache / "xy").mkdir()
    (cache / "xy" / "cxyz.best_config").write_text(json.dumps({"XBLOCK": 1024, "num_warps": 8,
                                                                "triton_cache_hash": "C" * 52}))
    manifest = collect_triton_ptx(cache, dest).set_index("triton_hash")
    assert manifest.loc["C" * 52, "status"] == "autotune_winner"
    assert manifest.loc["B" * 52, "status"] == "autotune_loser"


def test_variants_without_a_recorded_winner_are_ambiguous(tmp_path: Path):
    cache = tmp_path / "cache"
    _cache_variant(cache, "D" * 52, num_warps=4)
    _cache_variant(cache, "E" * 52, num_warps=8)
    assert set(collect_triton_ptx(cache, tmp_path / "out")["status"]) == {"ambiguous"}


def test_no_ptx_is_an_error(tmp_path: Path):
    with pytest.raises(PtxCaptureError, match="no .ptx files"):
        collect_triton_ptx(tmp_path, tmp_path / "out")


def test_launches_from_a_trace():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": NAME, "args": {"grid": [98, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": NAME, "args": {"grid": [98, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "args": {}},
    ]}
    launches = launches_from_trace(trace)
    assert launches.to_dict("records") == [{"kernel_name": NAME, "grid_x": 98, "grid_y": 1, "grid_z": 1,
                                            "block_x": 128, "block_y": 1, "block_z": 1, "launches": 2}]


def test_a_cpu_trace_has_no_kernel_launches(tmp_path: Path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.relu(torch.randn(8, 8) + 1)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    with pytest.raises(PtxCaptureError, match="no CUDA kernel events"):
        launches_from_trace(tmp_path / "trace.json")


def test_launches_from_ncu_grid_columns():
    kernels = read_ncu_csv(FIX / "ncu_details_h100_tinycnn.csv", required=NCU_METRICS).kernels
    launches = launches_from_ncu(kernels)
    assert launches.loc[1, ["grid_x", "grid_y", "grid_z"]].tolist() == [64, 2, 1]
    assert launches.loc[1, "block_x"] == 384 and int(launches["launches"].sum()) == 3


# A wrapper module in Inductor's call style: buffers and inputs, then xnumel, then keyword arguments.
WRAPPER = """
def call(args):
    arg0_1, arg1_1 = args
    buf0 = empty_strided_cuda((98, 128), (128, 1), torch.float32)
    stream0 = get_raw_stream(0)
    triton_poi_fused_add_relu_0.run(arg0_1, arg1_1, buf0, 12544, grid=grid(12544), stream=stream0)
    triton_per_fused_mean_1.run(buf0, buf1, 98, 128, stream=stream0)
    return (buf1, )
"""


def _ncu_launch(launch_id: int, name: str, grid: str, block: str, warp_inst: float) -> dict:
    return {"launch_id": launch_id, "kernel_name": name, "grid_size": grid, "block_size": block,
            "sm__inst_executed.sum": warp_inst, "smsp__thread_inst_executed.sum": warp_inst * 32}


def test_wrapper_calls_give_scalar_arguments(tmp_path: Path):
    (tmp_path / "cabc.py").write_text(WRAPPER)
    calls = wrapper_calls(tmp_path)
    assert calls[NAME] == [["arg0_1", "arg1_1", "buf0", "12544"]]
    assert calls["triton_per_fused_mean_1"] == [["buf0", "buf1", "98", "128"]]
    assert launch_params(calls[NAME][0], 4) == {3: 12544}
    assert launch_params(calls[NAME][0], 6) == {3: 12544}  # two trailing scratch pointers (newer Triton)
    assert launch_params(calls[NAME][0], 3) is None  # a specialised argument was dropped: positions shift


def test_analyzer_counts_next_to_ncu(tmp_path: Path):
    cache, dest = tmp_path / "cache", tmp_path / "out"
    _cache_variant(cache, "F" * 52, num_warps=4)
    (cache / "ab").mkdir()
    (cache / "ab" / "cabxyz.py").write_text(WRAPPER)  # collected into dest/wrappers because it calls .run(
    manifest = collect_triton_ptx(cache, dest)
    ncu = pd.DataFrame([
        _ncu_launch(0, NAME, "(98, 1, 1)", "(128, 1, 1)", 9100.0),
        _ncu_launch(1, "triton_per_fused_mean_1", "(98, 1, 1)", "(64, 1, 1)", 99.0),
        _ncu_launch(2, "void cudnn::conv(float*)", "(8, 1, 1)", "(64, 1, 1)", 5.0),
    ])
    cmp = compare_with_ncu(manifest, dest, ncu)
    assert list(cmp["kernel_name"]) == [NAME, "triton_per_fused_mean_1"]  # only Triton kernels are compared
    first = cmp.iloc[0]
    assert first["status"] == "ok"
    # 98 blocks x 4 warps, all 12544 threads in bounds: every warp runs the 23 PTX instructions of the kernel
    assert first["ptx_warp_inst"] == 98 * 4 * 23 and first["ptx_thread_inst"] == 12544 * 23
    assert first["rel_diff"] == pytest.approx((98 * 4 * 23 - 9100.0) / 9100.0)
    assert cmp.iloc[1]["status"] == "ptx_missing" and np.isnan(cmp.iloc[1]["ptx_warp_inst"])


def test_unknown_scalar_arguments_give_bounds_not_silence(tmp_path: Path):
    cache, dest = tmp_path / "cache", tmp_path / "out"
    _cache_variant(cache, "G" * 52, num_warps=4)
    (cache / "ab").mkdir()
    (cache / "ab" / "cab.py").write_text(WRAPPER.replace("buf0, 12544, grid", "buf0, xnumel, grid"))
    cmp = compare_with_ncu(collect_triton_ptx(cache, dest), dest,
                           pd.DataFrame([_ncu_launch(0, NAME, "(98, 1, 1)", "(128, 1, 1)", 9000.0)]))
    assert cmp.iloc[0]["status"] == "ok_estimate"
    assert cmp.iloc[0]["ptx_warp_inst"] > 0
