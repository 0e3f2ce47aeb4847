"""End to end without a GPU: model -> TVM Relax -> default GPU schedules -> CUDA C -> nvcc PTX -> counts.

Needs the zoo extra (torch, apache-tvm; Keras for the CLI/table cases) and nvcc; skips with the reason
otherwise. CI installs the extra, so these run there.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import src.zoo.resolve  # noqa: F401  (Keras defaults to the torch backend)

for _mod in ("torch", "tvm"):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"{_mod} not installed (zoo extra)", allow_module_level=True)
if shutil.which("nvcc") is None and not Path("/usr/local/bin/nvcc").exists():
    pytest.skip("nvcc not found (CUDA toolkit or nvidia-cuda-nvcc wheel)", allow_module_level=True)

HAS_KERAS = importlib.util.find_spec("keras") is not None

from src.zoo.counts import count_network  # noqa: E402
from src.zoo.pipeline import ptx_body_digest  # noqa: E402
from src.zoo.static import static_features  # noqa: E402
from src.zoo.tvmgen import compile_cuda, cuda_to_ptx  # noqa: E402
from tests.zoo.test_static import tiny_built  # noqa: E402


@pytest.fixture(scope="module")
def tiny_b1():
    return compile_cuda(tiny_built(32), batch=1)


def test_tiny_model_launches_and_counts(tiny_b1):
    ptx = cuda_to_ptx(tiny_b1.cuda_source, "sm_86")
    assert ".target sm_86" in ptx
    counts = count_network(ptx, tiny_b1.launches, source="tiny")
    assert counts["kernels"] == len(tiny_b1.launches) >= 3
    assert counts["launches"] == sum(x.calls for x in tiny_b1.launches)
    macs = static_features(tiny_built(32))["macs"]
    # Every multiply-accumulate of the convs/dense is at least one FMA of some thread. TVM's default schedules
    # compute padded tiles, so small layers execute several times their MACs (docs/zoo.md); bounded loosely.
    assert macs <= counts["by_class"]["fma"] < 20 * macs
    assert counts["thread_instructions"] > counts["by_class"]["fma"]
    assert counts["warp_instructions"] * 32 >= counts["thread_instructions"]
    assert not counts["estimate"]


def test_counts_scale_with_batch_close_to_linearly(tiny_b1):
    """docs/zoo.md: thread instructions grow with batch b as c(b) ~ b * c(1), up to ~10 % (tails of tiles)."""
    b4 = compile_cuda(tiny_built(32), batch=4)
    c1 = count_network(cuda_to_ptx(tiny_b1.cuda_source, "sm_86"), tiny_b1.launches)
    c4 = count_network(cuda_to_ptx(b4.cuda_source, "sm_86"), b4.launches)
    ratio = c4["thread_instructions"] / c1["thread_instructions"]
    assert 0.9 * 4 <= ratio <= 1.02 * 4, ratio
    assert c4["launches"] == c1["launches"]


def test_ptx_body_same_for_turing_and_ampere(tiny_b1):
    """Why sm_75 PTX stands for sm_86 exactly (docs/zoo.md): TVM's fp32 kernels give the same PTX body.

    (sm_89 and sm_120 can differ in a few instructions; docs/zoo.md gives the measured difference.)
    """
    assert ptx_body_digest(cuda_to_ptx(tiny_b1.cuda_source, "sm_75")) == ptx_body_digest(
        cuda_to_ptx(tiny_b1.cuda_source, "sm_86"))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_KERAS, reason="Keras not installed (zoo extra)")
def test_cli_ptx_keras_mobilenet(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "src.zoo", "ptx", "--source", "keras", "--model", "MobileNet",
                           "--input-size", "96", "--arch", "sm_86", "--batch", "1", "--json", "--per-kernel",
                           "--workdir", str(tmp_path / "w")], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("thread_instructions", "warp_instructions", "by_class", "kernels", "launches", "seconds"):
        assert key in out
    assert out["launches"] >= out["kernels"] > 20
    assert out["by_class"]["fma"] >= 0.9 * 1e6  # MobileNet at 96 px: ~105 M MACs; checked loosely here
    rows = out["per_kernel"]  # one row per launch site: counts of one call, x calls = the network totals
    assert len(rows) >= out["kernels"] and sum(r["calls"] for r in rows) == out["launches"]
    assert sum(r["thread_instructions"] * r["calls"] for r in rows) == out["thread_instructions"]
    assert sum(r["by_class"].get("fma", 0) * r["calls"] for r in rows) == out["by_class"]["fma"]
    assert {"operators", "grid", "block", "kernel_digest", "bytes_by_space"} <= set(rows[0])
    assert (tmp_path / "w" / "kernels.cu.gz").exists() and (tmp_path / "w" / "launches.json").exists()
    assert list((tmp_path / "w" / "kernels" / "sm_86" / "ptx").glob("*.ptx.gz"))  # the kernel cache


@pytest.mark.slow
@pytest.mark.skipif(not HAS_KERAS, reason="Keras not installed (zoo extra)")
def test_table_stage_incremental(tmp_path):
    import pandas as pd

    from src.zoo.table import run_table

    meas = pd.DataFrame({
        "model": ["mobilenet"] * 3 + ["foonet"], "model_key": ["mobilenet"] * 3 + ["foonet"],
        "model_source": ["tf_cnn_benchmarks"] * 4, "img_size": [64, 64, 64, 64],
        "batch_size": [1, 8, 1, 1], "gpu": ["A", "A", "B", "A"], "is_cpu": [False] * 4, "is_cnn": [True] * 4,
        "gmacs": [0.05] * 4,
    })
    gpus = pd.DataFrame({"gpu": ["A", "B"], "compute_capability": [8.6, 12.0]})
    mp, gp = tmp_path / "m.parquet", tmp_path / "g.parquet"
    meas.to_parquet(mp)
    gpus.to_parquet(gp)
    out = {"out_counts": tmp_path / "c.parquet", "out_failures": tmp_path / "f.csv",
           "out_static": tmp_path / "s.parquet", "out_kernels": tmp_path / "k.parquet"}
    kw = {"measurements": mp, "gpus_path": gp, "nvcc_archs": ["sm_75"], "model_timeout_s": None, **out}
    s1 = run_table(cache=tmp_path / "cache", **kw)
    counts = pd.read_parquet(out["out_counts"])
    fails = pd.read_csv(out["out_failures"])
    assert s1["distinct_models_with_counts"] == 1 and s1["failures"] == 1
    assert sorted(zip(counts["batch_size"], counts["arch"], strict=True)) == [(1, "sm_120"), (1, "sm_86"),
                                                                             (8, "sm_86")]
    assert set(counts["nvcc_arch"]) == {"sm_75"}
    b1 = counts.loc[(counts["batch_size"] == 1) & (counts["arch"] == "sm_86")].iloc[0]
    b8 = counts.loc[counts["batch_size"] == 8].iloc[0]
    assert b8["ptx_thread_instructions"] == 8 * b1["ptx_thread_instructions"]
    assert b8["count_method"] == "proportional_b1" and b1["count_method"] == "compiled"
    assert fails.loc[0, "model_key"] == "foonet" and fails.loc[0, "stage"] == "resolve"
    assert pd.read_parquet(out["out_static"]).loc[0, "trainable_params"] == 4_231_976
    # The network rows are the per-kernel rows (counts of one call) x calls, summed, exactly.
    k = pd.read_parquet(out["out_kernels"])
    assert set(k["nvcc_arch"]) == {"sm_75"} and (k["calls"] >= 1).all()
    assert k["operators"].str.contains("conv2d").any() and k["kernel_digest"].str.len().eq(20).all()
    for col in ["thread_instructions", "warp_instructions", "predicated_off",
                *[c for c in k.columns if c.startswith(("class_", "bytes_"))]]:
        net = f"ptx_{col}"
        if net in counts.columns:
            assert b1[net] == (k[col] * k["calls"]).sum(), col
            assert b8[net] == 8 * (k[col] * k["calls"]).sum(), col
        else:  # a class no kernel executes is dropped from the network table
            assert (k[col] == 0).all(), col
    assert b1["ptx_launches"] == k["calls"].sum() and b1["ptx_kernels"] == k["kernel"].nunique()
    assert s1["kernel_dedup"]["distinct_kernels"] <= s1["kernel_dedup"]["launch_sites"]
    # Rerun: everything comes from the cache; a fresh clone (no cache) reuses the committed tables.
    s2 = run_table(cache=tmp_path / "cache", **kw)
    assert s2["computed_or_cached"] == 1
    pd.testing.assert_frame_equal(pd.read_parquet(out["out_counts"]), counts, check_like=True)
    # After a PTX-analyzer change: recount from the stored PTX + launch list (no TVM, no nvcc), same figures.
    run_table(cache=tmp_path / "cache", recount=True, **kw)
    recounted = json.loads(next((tmp_path / "cache").glob("*__b1/result.json")).read_text())
    assert "recount" in recounted["stage_seconds"]
    s3 = run_table(cache=tmp_path / "no_cache", offline_only=True, **kw)
    assert s3["carried_from_table"] == 1 and s3["count_rows"] == 3 and s3["carried_network_only"] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out["out_counts"]), counts, check_like=True)
    pd.testing.assert_frame_equal(pd.read_parquet(out["out_kernels"]), k, check_like=True)
    # Measured batch 8 compiled at 8 (ptx.extra_batches) instead of scaled from batch 1.
    s4 = run_table(cache=tmp_path / "cache", extra_batches=[8], **kw)
    assert s4["extra_batch_results"] == 1 and s4["count_methods"] == {"compiled": 3}
    k8 = pd.read_parquet(out["out_kernels"]).query("batch_size == 8")
    c8 = pd.read_parquet(out["out_counts"]).query("batch_size == 8").iloc[0]
    assert c8["ptx_thread_instructions"] == (k8["thread_instructions"] * k8["calls"]).sum()
    assert c8["ptx_thread_instructions"] != b8["ptx_thread_instructions"]  # not exactly linear
    # ptx.nvcc_archs grows by sm_120: cached models get that PTX from their stored CUDA C (no TVM run).
    run_table(cache=tmp_path / "cache", extra_batches=[8], **{**kw, "nvcc_archs": ["sm_75", "sm_120"]})
    c = pd.read_parquet(out["out_counts"])
    assert dict(zip(c["arch"], c["nvcc_arch"], strict=True)) == {"sm_86": "sm_75", "sm_120": "sm_120"}
    assert set(pd.read_parquet(out["out_kernels"])["nvcc_arch"]) == {"sm_75", "sm_120"}
    assert "repick_archs" in json.loads(next((tmp_path / "cache").glob("*__b1/result.json")).read_text())[
        "stage_seconds"]


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="onnx not installed (zoo extra)")
def test_onnx_file_static_and_ptx(tmp_path):
    import warnings

    import torch

    from src.zoo.pipeline import ptx_features
    from src.zoo.resolve import build
    from tests.zoo.test_static import Tiny

    path = tmp_path / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Tiny().eval(), (torch.randn(1, 3, 32, 32),), str(path), dynamo=False,
                          input_names=["x"])
    f = static_features(build("onnx", str(path)))
    assert f["macs"] == static_features(tiny_built(32))["macs"]  # the exporter folds BN, MACs stay
    assert f["n_depthwise_conv"] == 1 and f["n_dense"] == 1
    r = ptx_features("onnx", str(path), None, 1, ["sm_86"])["by_arch"]["sm_86"]
    assert r["kernels"] >= 3 and r["by_class"]["fma"] >= f["macs"]
