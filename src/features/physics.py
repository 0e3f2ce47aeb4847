"""Physical time of one kernel or layer on a GPU: the peak that really applies, roofline, waves, L2 fit.

Why: a regressor that maps GPU specs to latency cannot extrapolate to a GPU faster than any it saw; a physical
estimate can, and a learner then only has to model how far reality is from it (an efficiency, bounded). All
functions are vectorised over rows (NumPy arrays or pandas Series of equal length) and pure.

Peak rules (dense math, what cuDNN/TensorRT kernels can reach):
- fp32: CUDA-core fp32; with `tf32=True` on compute capability >= 8.0, TF32 tensor cores at half the fp16 tensor
  rate (A100: 156 of 312 TFLOP/s). PyTorch >= 1.7 and TensorFlow >= 2.4 enable TF32 for convolutions by default;
  NeuSight disabled it, CDECatapult (TF 1.10) and DeepBench predate it.
- fp16 / bf16 / AMP: tensor cores where the GPU has them (cc >= 7.0 for fp16, cc >= 8.0 for bf16), else the
  better of the fp16 and fp32 CUDA-core rates for fp16 (Pascal consumer cards run fp16 at 1/64 rate, so cuDNN
  computes in fp32 there) and the fp32 rate for bf16. GeForce cards of Turing, Ampere and Ada run fp16 tensor
  math with fp32 accumulation (what cuDNN and AMP use) at half the rate spec tables headline
  (`consumer_fp32_accumulate_halving`); datacenter (V100, A100, H100, T4), workstation and TITAN parts of those
  generations do not. Blackwell GB20x parts (sm_120: GeForce RTX 50 and RTX PRO Blackwell) are taken as halving
  too: spec tables list the RTX 5050's and the RTX PRO 5000 Blackwell's fp16 tensor rate with fp32 accumulation
  at half their fp16-accumulate rate, and timm's RTX PRO 6000 Max-Q runs as fast as its RTX 5090 (median time
  ratio 0.98 over 87 matched configurations, equal bandwidth), which a full rate (2x the 5090's compute) would
  not; the RTX 4090 takes 1.57x the RTX 5090's time (compute ratio 2.5x at a full 5090 rate, 1.27x halved,
  bandwidth 1.77x). docs/physics.md gives the effect on the predictor.
- int8: `src.features.engineer.int8_tops` (the same rule the whole-network features use): tensor cores at 2x the
  headline fp16 rate on Turing and newer (int32 accumulation is not halved on GeForce); dp4a (4 int8 MACs per fp32
  lane, 4x fp32) on cc 6.1 and on Volta, whose tensor cores have no int8 mode; the fp32 rate before (cc <= 6.0).
- fp64: the CUDA-core fp64 rate.
The whole-network `engineer.peak_tflops` keeps its simpler rule (no halving, no TF32): its outputs are what the
trained models were fitted on.

Waves: a launch of B thread blocks on S SMs with R resident blocks per SM runs in ceil(B / (S x R)) waves; R depends
on each kernel's registers and shared memory, which no table gives, so callers state it (default 1 block per SM,
the conservative case for the large-tile cuDNN/cuBLAS kernels, 128-256 threads and tens of KB of shared memory).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .engineer import HALF_PRECISIONS, int8_tops_arrays

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp_fp16", "amp_bf16", "int8", "fp64")
# Resident thread blocks per SM assumed when a launch's occupancy is unknown (see the module docstring).
RESIDENT_BLOCKS_PER_SM = 1
# Output tile of the nominal implicit-GEMM kernel used to estimate a grid where none was recorded.
NOMINAL_TILE = (128, 128)

# Consumer (GeForce) architectures whose fp16 tensor math with fp32 accumulation runs at half the headline rate.
HALVING_ARCHITECTURES = ("Turing", "Ampere", "Ada Lovelace")
# Blackwell GB20x (compute capability 12.x), GeForce or RTX PRO: fp32 accumulation at half rate too (module rules).
GB20X_ARCHITECTURE = "Blackwell 2.0"
GB20X_MIN_CC = 12.0


def consumer_fp32_accumulate_halving(gpu: pd.DataFrame | Mapping) -> np.ndarray:
    """True for GeForce Turing/Ampere/Ada cards (TITAN RTX and workstation/datacenter parts of those generations
    keep full rate) and for every Blackwell GB20x part (sm_120, GeForce or RTX PRO)."""
    name = np.asarray(gpu["gpu"]).astype(str)
    if "architecture" in gpu:
        archs = np.asarray(gpu["architecture"]).astype(str)
        arch, gb20x = np.isin(archs, HALVING_ARCHITECTURES), archs == GB20X_ARCHITECTURE
    else:  # Turing 7.5, Ampere 8.0-8.7, Ada 8.9, GB20x 12.x: the architectures as compute capabilities
        cc = np.asarray(gpu["compute_capability"], dtype=float)
        arch, gb20x = (cc >= 7.5) & (cc < 9.0), cc >= GB20X_MIN_CC
    return (np.char.startswith(name, "GeForce") & arch) | gb20x


def peak_tflops(precision: pd.Series | np.ndarray, gpu: pd.DataFrame, tf32: np.ndarray | bool = False) -> np.ndarray:
    """Dense peak (TFLOP/s, TOP/s for int8) per row for `precision` on the row's GPU (see the module rules).

    `gpu` is row-aligned with `precision` (spec columns of `src.ingest.gpus.gpu_features`); `tf32` says whether the
    framework lets fp32 convolutions use TF32 tensor cores (a scalar or one flag per row). `tf32` as a precision
    is fp32 data with TF32 enabled. An unknown precision raises ValueError instead of falling back to fp32.
    """
    prec = np.asarray(precision).astype(str)
    unknown = sorted(set(np.unique(prec)) - set(PRECISIONS))
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}; known: {list(PRECISIONS)}")
    cc = np.asarray(gpu["compute_capability"], dtype=float)
    if len(cc) != len(prec):
        raise ValueError(f"precision has {len(prec)} rows but gpu has {len(cc)}: pass one GPU spec row per row")
    fp32 = np.asarray(gpu["fp32_tflops"], dtype=float)
    fp16_cuda = np.asarray(gpu["fp16_tflops"], dtype=float)
    tensor = np.asarray(gpu["tensor_fp16_tflops"], dtype=float)
    has_tc = (cc >= 7.0) & (np.asarray(gpu["tensor_cores"], dtype=float) > 0)
    tensor_fp16 = np.where(consumer_fp32_accumulate_halving(gpu), tensor / 2.0, tensor)
    half = np.where(has_tc, tensor_fp16, np.maximum(fp16_cuda, fp32))
    # bf16 tensor cores arrived with Ampere (cc 8.0); Volta/Turing have none and no fast bf16 CUDA-core path.
    bf16 = np.isin(prec, ["bf16", "amp_bf16"])
    half = np.where(bf16 & (cc < 8.0), fp32, half)
    tf32_on = (np.broadcast_to(np.asarray(tf32, dtype=bool), prec.shape) | (prec == "tf32")) & (cc >= 8.0) & has_tc
    single = np.where(tf32_on, tensor_fp16 / 2.0, fp32)
    peak = np.where(np.isin(prec, list(HALF_PRECISIONS)), half, single)
    peak = np.where(prec == "fp64", np.asarray(gpu["fp64_tflops"], dtype=float), peak)
    if not (prec == "int8").any():
        return peak
    return np.where(prec == "int8", int8_tops_arrays(cc, fp32, tensor), peak)


def roofline_ms(flops: np.ndarray, bytes_moved: np.ndarray, peak_tflops_: np.ndarray,
                bandwidth_gbs: np.ndarray) -> np.ndarray:
    """max(FLOPs / peak, bytes / bandwidth) in milliseconds: the time no kernel can beat."""
    compute = np.asarray(flops, dtype=float) / (np.asarray(peak_tflops_, dtype=float) * 1e12)
    memory = np.asarray(bytes_moved, dtype=float) / (np.asarray(bandwidth_gbs, dtype=float) * 1e9)
    return np.maximum(compute, memory) * 1e3


def ridge_point(peak_tflops_: np.ndarray, bandwidth_gbs: np.ndarray) -> np.ndarray:
    """FLOPs per byte at which compute and memory time are equal: below it a layer is memory bound."""
    return np.asarray(peak_tflops_, dtype=float) * 1e12 / (np.asarray(bandwidth_gbs, dtype=float) * 1e9)


def launch_blocks(grid: pd.Series | np.ndarray) -> np.ndarray:
    """Thread blocks of a launch from its grid string `x,y,z` (missing dimensions = 1); NaN where none is given."""
    def blocks(text: object) -> float:
        parts = [p for p in str(text).replace(" ", "").split(",") if p] if text is not None else []
        return float(np.prod([int(p) for p in parts])) if parts else np.nan

    return np.array([blocks(g) for g in np.asarray(grid, dtype=object)], dtype=float)


def gemm_tile_blocks(m: np.ndarray, n: np.ndarray, tile: tuple[int, int] = NOMINAL_TILE) -> np.ndarray:
    """Blocks of a nominal implicit-GEMM launch: one block per `tile` of the M x N output (conv forward: M = batch x
    output pixels, N = output channels). An estimate for layers whose real grid is unknown, not cuDNN's choice."""
    return (np.ceil(np.asarray(m, dtype=float) / tile[0]) * np.ceil(np.asarray(n, dtype=float) / tile[1]))


def wave_count(blocks: np.ndarray, sm_count: np.ndarray,
               blocks_per_sm: np.ndarray | int = RESIDENT_BLOCKS_PER_SM) -> np.ndarray:
    """ceil(blocks / (SMs x resident blocks per SM)): how many rounds the launch needs (NaN blocks stay NaN)."""
    slots = np.asarray(sm_count, dtype=float) * np.asarray(blocks_per_sm, dtype=float)
    return np.ceil(np.maximum(np.asarray(blocks, dtype=float), 1.0) / slots)


def wave_efficiency(blocks: np.ndarray, sm_count: np.ndarray,
                    blocks_per_sm: np.ndarray | int = RESIDENT_BLOCKS_PER_SM) -> np.ndarray:
    """Useful share of the last-wave-padded work: blocks / (waves x SMs x resident blocks per SM), in (0, 1].

    A launch of `blocks` thread blocks runs in ceil(blocks / (SMs x resident)) waves; the last wave may leave SMs
    idle. The resident-blocks-per-SM count depends on registers and shared memory, which the tables do not give:
    callers pass 1 (one block per SM, the conservative case) unless they know better.
    """
    slots = np.asarray(sm_count, dtype=float) * np.asarray(blocks_per_sm, dtype=float)
    b = np.maximum(np.asarray(blocks, dtype=float), 1.0)
    return b / (wave_count(b, sm_count, blocks_per_sm) * slots)


def fits_in_l2(bytes_moved: np.ndarray, l2_cache_mb: np.ndarray) -> np.ndarray:
    """True where a layer's whole working set fits in L2 (its DRAM traffic can then be far below `bytes_moved`)."""
    return np.asarray(bytes_moved, dtype=float) <= np.asarray(l2_cache_mb, dtype=float) * 2**20
