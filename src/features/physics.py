"""Physical time of one kernel or layer on a GPU: the peak that really applies, roofline, waves, L2 fit.

Why: a regressor that maps GPU specs to latency cannot extrapolate to a GPU faster than any it saw; a physical
estimate can, and a learner then only has to model how far reality is from it (an efficiency, bounded). All
functions are vectorised over rows (NumPy arrays or pandas Series of equal length) and pure.

Peak rules (dense math, what cuDNN/TensorRT kernels can reach):
- fp32: CUDA-core fp32; with `tf32=True` on compute capability >= 8.0, TF32 tensor cores at half the fp16 tensor
  rate (A100: 156 of 312 TFLOP/s). PyTorch >= 1.7 and TensorFlow >= 2.4 enable TF32 for convolutions by default;
  NeuSight disabled it, CDECatapult (TF 1.10) and DeepBench predate it.
- fp16 / bf16 / AMP: tensor cores where the GPU has them (cc >= 7.0), else the better of the fp16 and fp32 CUDA-core
  rates (Pascal consumer cards run fp16 at 1/64 rate, so cuDNN computes in fp32 there). GeForce cards of Turing,
  Ampere and Ada run fp16 tensor math with fp32 accumulation (what cuDNN and AMP use) at half the rate spec tables
  headline (`consumer_fp32_accumulate_halving`); datacenter, workstation and TITAN parts do not halve.
- int8: `src.features.engineer.int8_tops` (Turing+ tensor cores at 2x fp16; dp4a on cc 6.1 and Volta).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .engineer import HALF_PRECISIONS, int8_tops

# Consumer (GeForce) architectures whose fp16 tensor math with fp32 accumulation runs at half the headline rate.
HALVING_ARCHITECTURES = ("Turing", "Ampere", "Ada Lovelace")


def consumer_fp32_accumulate_halving(gpu: pd.DataFrame) -> np.ndarray:
    """True for GeForce Turing/Ampere/Ada cards (TITAN RTX and workstation/datacenter parts keep full rate)."""
    name = gpu["gpu"].astype(str)
    return (name.str.startswith("GeForce") & gpu["architecture"].isin(HALVING_ARCHITECTURES)).to_numpy()


def peak_tflops(precision: pd.Series, gpu: pd.DataFrame, tf32: np.ndarray | bool = False) -> np.ndarray:
    """Dense peak (TFLOP/s, TOP/s for int8) per row for `precision` on the row's GPU (see the module rules)."""
    prec = precision.astype(str).to_numpy()
    cc = gpu["compute_capability"].astype(float).to_numpy()
    fp32 = gpu["fp32_tflops"].astype(float).to_numpy()
    fp16_cuda = gpu["fp16_tflops"].astype(float).to_numpy()
    tensor = gpu["tensor_fp16_tflops"].astype(float).to_numpy()
    has_tc = (cc >= 7.0) & (gpu["tensor_cores"].astype(float).to_numpy() > 0)
    tensor_fp16 = np.where(consumer_fp32_accumulate_halving(gpu), tensor / 2.0, tensor)
    half = np.where(has_tc, tensor_fp16, np.maximum(fp16_cuda, fp32))
    tf32_on = np.broadcast_to(np.asarray(tf32, dtype=bool), prec.shape) & (cc >= 8.0) & has_tc
    single = np.where(tf32_on, tensor_fp16 / 2.0, fp32)
    peak = np.where(np.isin(prec, list(HALF_PRECISIONS)), half, single)
    peak = np.where(prec == "fp64", gpu["fp64_tflops"].astype(float).to_numpy(), peak)
    return np.where(prec == "int8", int8_tops(gpu).to_numpy(dtype=float), peak)


def roofline_ms(flops: np.ndarray, bytes_moved: np.ndarray, peak_tflops_: np.ndarray,
                bandwidth_gbs: np.ndarray) -> np.ndarray:
    """max(FLOPs / peak, bytes / bandwidth) in milliseconds: the time no kernel can beat."""
    compute = np.asarray(flops, dtype=float) / (np.asarray(peak_tflops_, dtype=float) * 1e12)
    memory = np.asarray(bytes_moved, dtype=float) / (np.asarray(bandwidth_gbs, dtype=float) * 1e9)
    return np.maximum(compute, memory) * 1e3


def wave_efficiency(blocks: np.ndarray, sm_count: np.ndarray, blocks_per_sm: np.ndarray | int = 1) -> np.ndarray:
    """Useful share of the last-wave-padded work: blocks / (waves x SMs x resident blocks per SM), in (0, 1].

    A launch of `blocks` thread blocks runs in ceil(blocks / (SMs x resident)) waves; the last wave may leave SMs
    idle. The resident-blocks-per-SM count depends on registers and shared memory, which the tables do not give:
    callers pass 1 (one block per SM, the conservative case) unless they know better.
    """
    slots = np.asarray(sm_count, dtype=float) * np.asarray(blocks_per_sm, dtype=float)
    b = np.maximum(np.asarray(blocks, dtype=float), 1.0)
    return b / (np.ceil(b / slots) * slots)


def fits_in_l2(bytes_moved: np.ndarray, l2_cache_mb: np.ndarray) -> np.ndarray:
    """True where a layer's whole working set fits in L2 (its DRAM traffic can then be far below `bytes_moved`)."""
    return np.asarray(bytes_moved, dtype=float) <= np.asarray(l2_cache_mb, dtype=float) * 2**20
