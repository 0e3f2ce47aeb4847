"""Physics estimate of one step of a CNN on a target GPU, kernel by kernel (docs/physics.md "Network estimate").

Why: a regressor that maps GPU specs to latency cannot answer for a GPU faster than any it saw; a physical time
computed per kernel on the target GPU can, and a learner then corrects only how far reality is from it.

Per kernel k of the CNN's pass(es) (forward for inference; train_forward + backward, plus an optimizer update,
for training), at batch b and the row's precision:
    FLOPs_k = flops_fixed + flops_per_sample x b
    bytes_k = (in + weights + out elements) x bytes per element + other bytes
    t_k = max(FLOPs_k / (peak_k x wave efficiency_k), bytes_k / DRAM bandwidth, kernel floor)
peak_k: `src.features.physics.peak_tflops` for "mac" kernels (tensor cores for fp16/bf16/AMP/int8, TF32 for fp32
convolutions where the framework release enables it), the CUDA-core rate for depthwise and other kernels. Wave
efficiency (mac kernels whose output grows with the batch): a nominal 128 x 128-tile implicit GEMM grid over
(batch x output pixels) x output channels on the GPU's SMs, one resident block per SM (`physics.wave_efficiency`);
weight-gradient GEMMs (output = the weight, reduction over the batch) run split-K and fill the GPU. The kernel
floor is the shortest back-to-back kernel a GPU runs (launch + drain). The optimizer step of a training row moves
`optimizer_bytes_per_param` bytes per trainable parameter (SGD with momentum on fp32 master weights: read
weight, gradient, momentum; write weight, momentum = 20 bytes).
Kernels per runtime (`src.features.kernels.fuse`, constants `fusion`): eager runs one kernel per operator;
torch.compile and XLA fuse chains of pointwise operators into one kernel; TensorRT folds pointwise operators
(bias, inference batch norm, activation, residual add) into the convolution or GEMM before them. A fused kernel
reads the chain's inputs once and writes its last output, so its memory time drops.
The host issues one kernel per launched (fused) kernel, dearer in eager mode (framework dispatch) than from a
compiler or an engine; the GPU runs while the host issues, so the step takes max(sum_k t_k, kernels x dispatch time).
Aggregates the learner may use: the shares of kernel time that are compute-, memory- and floor-bound, the
kernel count, the largest kernel's share, the mean wave efficiency of mac kernels, the share of bytes in
kernels whose working set fits in L2, and dispatch / kernel time.
A CNN without a profile at the row's input size is priced from its whole-network numbers (GMACs, parameters,
activations), with `has_layer_profile` 0 so the learner knows: its compute time plus `by_numbers_memory_passes` x
its memory time (an eager CNN alternates compute-bound convolutions with memory-bound pointwise kernels, so the
two add), or as one roofline kernel at 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from .engineer import HALF_PRECISIONS, Columns, bytes_per_element, engineer, factorize, lookup
from .kernels import PROFILE_KEYS, QUANTITIES, fused_pass
from .physics import peak_tflops, wave_efficiency

# Passes priced per mode.
PASSES_BY_MODE = {"inference": ("forward",), "training": ("train_forward", "backward")}
# Features added to the Pipeline (positive magnitudes are logged by PerfFeatures, shares are not).
TIME_FEATURES = ["t_physics_ms", "t_kernels_ms", "t_dispatch_ms", "n_kernels"]
SHARE_FEATURES = ["compute_bound_share", "memory_bound_share", "floor_bound_share", "largest_kernel_share",
                  "mac_wave_efficiency", "l2_resident_share", "dispatch_over_kernels", "has_layer_profile",
                  "winograd_share", "mac_tile_fill", "mac_log2_depth", "grouped_share"]
PHYSICS_FEATURES = TIME_FEATURES + SHARE_FEATURES
# Columns a row needs to be priced (besides the GPU spec columns of `GPU_COLUMNS`).
ROW_COLUMNS = ["model_key", "img_size", "batch_size", "precision", "mode", "compile_mode", "gmacs", "param_count_m",
               "activations_m", "memory_layout"]
GPU_COLUMNS = ["gpu", "memory_bandwidth_gbs", "fp32_tflops", "fp16_tflops", "tensor_fp16_tflops", "fp64_tflops",
               "tensor_cores", "compute_capability", "sm_count", "l2_cache_mb"]
NOMINAL_TILE = 128.0


@dataclass(frozen=True)
class PhysicsConstants:
    """The few hardware/software constants the estimate assumes (conf/physics/default.yaml documents each)."""

    kernel_floor_us: float = 2.0
    dispatch_us: dict = field(default_factory=lambda: {"eager": 20.0, "torch_compile": 17.0, "cuda_graphs": 0.5,
                                                       "xla": 2.0, "tensorrt": 0.5, "xla_tensorrt": 1.0})
    training_dispatch_factor: float = 1.5
    # compile_mode -> the kernel fusion its runtime applies (`src.features.kernels.FUSIONS`); absent = none.
    fusion: dict = field(default_factory=lambda: {"eager": "none", "cuda_graphs": "none", "torch_compile": "pointwise",
                                                  "xla": "pointwise", "tensorrt": "producer",
                                                  "xla_tensorrt": "producer"})
    optimizer_bytes_per_param: float = 20.0
    blocks_per_sm: float = 1.0
    winograd_speedup: float = 1.0
    split_k_min_depth: float = 0.0
    split_k_max: float = 16.0
    # compile_modes whose kernels may be split along K (None = every one, when split_k_min_depth > 0).
    split_k_runtimes: list | None = None
    # compile_modes whose NCHW convolutions on tensor cores run cuDNN's NHWC engines between two layout transforms
    # (conf/physics documents the evidence). Empty = none: what models pickled before the key priced.
    layout_transform_runtimes: list = field(default_factory=list)
    # A CNN without a profile: 0 = the whole-network roofline max(compute, memory) (what models pickled before the
    # key priced); k > 0 = compute + k x memory (conf/physics documents the choice).
    by_numbers_memory_passes: float = 0.0

    @classmethod
    def from_config(cls, cfg: dict | None) -> PhysicsConstants:
        cfg = dict(cfg or {})
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        unknown = sorted(set(cfg) - set(cls.__dataclass_fields__) - {"name"})
        if unknown:
            raise ValueError(f"physics config: unknown key(s) {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**known)


class ProfileIndex:
    """Kernel profiles as contiguous NumPy arrays, addressed by (model_key, img_size, pass).

    Carried inside the fitted Pipeline (so inside the served model); a small cache keyed by the content of the
    rows priced makes repeated pricing of the same training rows (trials, folds) free.
    """

    def __init__(self, profiles: pd.DataFrame):
        prof = profiles.sort_values(PROFILE_KEYS, kind="stable").reset_index(drop=True)
        keys = list(zip(prof["model_key"].astype(str), prof["img_size"].astype(int), prof["pass"].astype(str),
                        strict=True))
        self.ranges: dict[tuple[str, int, str], tuple[int, int]] = {}
        start = 0
        for i in range(1, len(keys) + 1):
            if i == len(keys) or keys[i] != keys[start]:
                self.ranges[keys[start]] = (start, i)
                start = i
        # float32 halves what the served model carries (~0.55 M kernels); 7 digits are plenty for an estimate.
        self.q = {c: prof[c].to_numpy(dtype=np.float32) for c in QUANTITIES}
        self.count = prof["count"].to_numpy(dtype=np.float32)
        self.mac = (prof["kernel_class"].astype(str) == "mac").to_numpy()
        self.depthwise = (prof["kernel_class"].astype(str) == "depthwise").to_numpy()
        self.winograd = (prof["winograd"].to_numpy(dtype=bool) if "winograd" in prof
                         else np.zeros(len(prof), dtype=bool))
        self.grouped = (prof["grouped"].to_numpy(dtype=bool) if "grouped" in prof
                        else np.zeros(len(prof), dtype=bool))
        self.c_out = prof["c_out"].to_numpy(dtype=np.float32)
        self.out_pixels = prof["out_pixels"].to_numpy(dtype=np.float32)
        self.param_elems = prof["param_elems"].to_numpy(dtype=np.float32)
        self.models = sorted({k[0] for k in self.ranges})
        self._cache: dict[str, RowMemo] = {}

    def row_memo(self, constants: PhysicsConstants) -> RowMemo:
        """The memo of rows priced under `constants` (one per set of constants; dropped when pickled)."""
        key = repr(constants)
        memo = self._cache.get(key)
        if memo is None:
            memo = self._cache.setdefault(key, RowMemo())
        return memo

    def kernels_per_gmac(self, mode: str) -> float:
        """Median kernels of `mode`'s passes per forward GMAC over the profiled CNNs: the kernel count a row
        without a profile gets (x its GMACs). A property of the table, so a row's features never depend on the
        other rows priced with it (a served request and a training frame agree)."""
        ratios = self.__dict__.setdefault("_kernels_per_gmac", {})
        if mode not in ratios:
            passes = PASSES_BY_MODE.get(mode, PASSES_BY_MODE["inference"])
            flops = (self.q["flops_fixed"].astype(np.float64) + self.q["flops_per_sample"]) * self.count
            found = []
            for (model_key, img_size, p), (a, b) in self.ranges.items():
                spans = [self.ranges.get((model_key, img_size, q)) for q in passes]
                if p != "forward" or any(sp is None for sp in spans):
                    continue
                gmacs = flops[a:b].sum() / 2e9
                if gmacs > 0:
                    found.append(sum(float(self.count[c:d].sum()) for c, d in spans) / gmacs)
            ratios[mode] = float(np.median(found)) if found else 100.0
        return ratios[mode]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __deepcopy__(self, memo):
        return self  # read-only arrays: sklearn's clone of a Pipeline shares one index (and its cache)

    def has(self, model_key: str, img_size: int, mode: str = "inference") -> bool:
        return all((model_key, int(img_size), p) in self.ranges for p in PASSES_BY_MODE[mode])

    def __len__(self) -> int:
        return len(self.count)

    def add(self, profiles: pd.DataFrame) -> list[tuple[str, int, str]]:
        """Add the kernel profiles of CNNs this index lacks, in place; keys it holds already stay as they are.

        Why: a CNN nobody measured, described at query time by its definition or an ONNX file
        (`src.predict.profiles`), is then priced layer by layer like a measured one instead of by its whole-network
        numbers. The table's own properties (`kernels_per_gmac`) are fixed first, so the rows without a profile
        are priced as before; the memo of priced rows is dropped (it may hold the CNN priced without its profile).
        Returns the (model_key, img_size, pass) keys added."""
        for mode in PASSES_BY_MODE:
            self.kernels_per_gmac(mode)
        new = ProfileIndex(profiles)
        added = [k for k in new.ranges if k not in self.ranges]
        if not added:
            return []
        take = np.concatenate([np.arange(*new.ranges[k]) for k in added])
        start = len(self.count)
        for k in added:
            a, b = new.ranges[k]
            self.ranges[k] = (start, start + b - a)
            start += b - a
        for c in QUANTITIES:
            self.q[c] = np.concatenate([self.q[c], new.q[c][take]])
        if not hasattr(self, "grouped"):  # an index pickled before the flag (older served models)
            self.grouped = np.zeros(len(self.count), dtype=bool)
        for name in ("count", "mac", "depthwise", "winograd", "grouped", "c_out", "out_pixels", "param_elems"):
            setattr(self, name, np.concatenate([getattr(self, name), getattr(new, name)[take]]))
        self.models = sorted({k[0] for k in self.ranges})
        self._cache = {}
        return added


def row_keys(X: pd.DataFrame, tf32: np.ndarray) -> np.ndarray:
    """A 64-bit content key per row: pandas' vectorised hash of the columns X holds, mixed with the TF32 flag
    (about 5 ms for a 28k-row training table)."""
    keys = pd.util.hash_pandas_object(X, index=False).to_numpy(dtype=np.uint64)
    return keys ^ (tf32.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))


class RowMemo:
    """Physics features of rows already priced, by row content (`row_keys`).

    Why per row: training prices the same dataset rows again and again, in different subsets (each trial's tuning
    rows, each fold's training and held-out part, each protocol); a memo per frame missed every new subset, and
    pricing was a third of a linear model's training time. A row's features depend on that row alone
    (`price_rows`), so a remembered row is exact. Thread-safe (folds run in threads); cleared past `max_rows`."""

    def __init__(self, max_rows: int = 1_000_000):
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._keys = np.empty(0, dtype=np.uint64)
        self._lookup = pd.Index(self._keys)
        self._values = np.empty((0, len(PHYSICS_FEATURES)))

    def __len__(self) -> int:
        return len(self._keys)

    def price(self, X: pd.DataFrame, tf32: np.ndarray | None, compute) -> pd.DataFrame:
        """Features of every row of X: remembered rows looked up, the others (each distinct one once) priced by
        `compute(rows, tf32 of those rows)` and remembered. Row order and values as `compute(X, tf32)`."""
        flags = np.zeros(len(X), dtype=bool) if tf32 is None else np.asarray(tf32, dtype=bool)
        keys = row_keys(X, flags)
        with self._lock:
            pos = self._lookup.get_indexer(keys)
            new = pos < 0
            if new.any():
                fresh, first = np.unique(keys[new], return_index=True)
                rows = np.flatnonzero(new)[first]
                priced = compute(X.iloc[rows], flags[rows])
                if list(priced.columns) != PHYSICS_FEATURES:
                    raise RuntimeError(f"physics features {list(priced.columns)} differ from {PHYSICS_FEATURES}")
                if len(self._keys) + len(fresh) > self.max_rows:
                    self._clear()
                self._keys = np.concatenate([self._keys, fresh])
                self._values = np.concatenate([self._values, priced.to_numpy(dtype=np.float64)])
                self._lookup = pd.Index(self._keys)
                pos = self._lookup.get_indexer(keys)
            values = self._values[pos]
        return pd.DataFrame(values, columns=PHYSICS_FEATURES)


def _spans(index: ProfileIndex, model_key: str, img_size: int, mode_key: str) -> list[tuple[int, int]] | None:
    """Kernel ranges of a row's passes; `mode_key` is `<mode>` or `<mode>@<fusion>`. A fused profile missing from
    the index (a table built without fusion) falls back to the unfused passes; no profile at all -> None."""
    mode, _, fusion = mode_key.partition("@")
    passes = PASSES_BY_MODE.get(mode, PASSES_BY_MODE["inference"])
    for f in ([fusion] if fusion else []) + ["none"]:
        spans = [index.ranges.get((model_key, img_size, fused_pass(p, f))) for p in passes]
        if all(sp is not None for sp in spans):
            return spans
    return None


def _pairs(index: ProfileIndex, model_key: np.ndarray, img_size: np.ndarray, mode: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row of each pair, kernel of each pair, rows with a profile) for every kernel of every row's passes.

    Pairs are ordered by row, then pass, then kernel (the order the per-row sums accumulate in). Rows are grouped
    by their (CNN, size, mode) key with factorised codes rather than a pandas groupby: a served single-row
    request then costs tens of microseconds here instead of a millisecond.
    """
    n = len(model_key)
    found = np.zeros(n, dtype=bool)
    empty = np.zeros(0, dtype=np.int64)
    if n == 0:
        return empty, empty, found
    codes = [factorize(np.asarray(a)) for a in (model_key, img_size, mode)]
    combo = np.zeros(n, dtype=np.int64)
    for c, uniq in codes:
        combo = combo * max(len(uniq), 1) + c
    keys, first, group = np.unique(combo, return_index=True, return_inverse=True)
    # Per group: its spans (start, length) in pass order, laid end to end; groups without a profile get none.
    g_start, g_len, g_count = [], [], np.zeros(len(keys), dtype=np.int64)
    for g, r in enumerate(first):
        spans = _spans(index, str(model_key[r]), int(img_size[r]), str(mode[r]))
        for a, b in spans or ():
            g_start.append(a)
            g_len.append(b - a)
        g_count[g] = len(spans or ())
    if not g_start:
        return empty, empty, found
    g_start, g_len = np.asarray(g_start, dtype=np.int64), np.asarray(g_len, dtype=np.int64)
    g_offset = np.cumsum(g_count) - g_count
    per_row = g_count[group.ravel()]
    found = per_row > 0
    owner = np.repeat(np.arange(n), per_row)
    span = np.repeat(g_offset[group.ravel()], per_row) + (np.arange(per_row.sum()) - np.repeat(
        np.cumsum(per_row) - per_row, per_row))
    start, length = g_start[span], g_len[span]
    pair_row = np.repeat(owner, length)
    offsets = np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length)
    pair_kernel = np.repeat(start, length) + offsets
    return pair_row, pair_kernel, found


def _cuda_core_peak(precision: np.ndarray, gpu: Columns) -> np.ndarray:
    fp32 = np.asarray(gpu["fp32_tflops"], dtype=float)
    fp16 = np.asarray(gpu["fp16_tflops"], dtype=float)
    half = np.isin(precision, list(HALF_PRECISIONS))
    return np.where(half, np.maximum(fp16, fp32), np.where(precision == "fp64",
                                                          np.asarray(gpu["fp64_tflops"], dtype=float), fp32))


def _categories(values: np.ndarray, table: dict, default: str) -> np.ndarray:
    """table[value] per row (default where absent), each distinct value looked up once."""
    codes, uniq = factorize(values)
    return np.array([table.get(u, default) for u in uniq], dtype=object)[codes]


def _str_array(values) -> np.ndarray:
    """Like `Series.astype(str).to_numpy()` for a Series or an array (the served path hands over arrays)."""
    return np.asarray(values).astype(str).astype(object)


def _layout_transforms(X: Columns, constants: PhysicsConstants, precision: np.ndarray, compile_mode: np.ndarray,
                       tf32: np.ndarray, row: np.ndarray, index: ProfileIndex, ker: np.ndarray, mac: np.ndarray,
                       grouped: np.ndarray, q: dict, b: np.ndarray, bpe: np.ndarray, bw: np.ndarray,
                       floor: float) -> np.ndarray:
    """Per kernel: the time of the NCHW -> NHWC transform of a dense convolution's input and the NHWC -> NCHW one
    of its output, where the row's runtime leaves NCHW tensors to cuDNN's tensor-core engines (half precision on
    Volta and newer, TF32 on Ampere and newer). Each transform reads and writes its tensor once. Why: on our H200
    traces ResNet-18 eager ran 48 such kernels beside its 21 convolutions and GEMMs, torch.compile none
    (docs/physics.md); depthwise and grouped convolutions ran none."""
    if not constants.layout_transform_runtimes:
        return np.zeros(len(ker))
    cc = np.asarray(X["compute_capability"], dtype=float)
    tensor_path = (np.isin(precision, list(HALF_PRECISIONS)) & (cc >= 7.0)) | (tf32 & (cc >= 8.0))
    rows = (tensor_path & (_str_array(X["memory_layout"]) == "nchw")
            & np.isin(compile_mode, list(constants.layout_transform_runtimes)))
    dense_conv = mac & ~index.depthwise[ker] & ~grouped & (index.out_pixels[ker] > 1)
    elems = (q["in_elems_fixed"] + q["in_elems_per_sample"] * b
             + q["out_elems_fixed"] + q["out_elems_per_sample"] * b)
    per_tensor = np.maximum(elems * bpe[row] / bw[row], floor)  # both transforms: read + write each tensor once
    return np.where(rows[row] & dense_conv, 2.0 * per_tensor, 0.0)


def price_rows(X: Columns, index: ProfileIndex, constants: PhysicsConstants | None = None,
               tf32: np.ndarray | None = None) -> pd.DataFrame:
    """PHYSICS_FEATURES per row of X (ROW_COLUMNS + GPU_COLUMNS; a DataFrame or a mapping of column -> array);
    `tf32`: fp32 convolutions may use TF32. Everything is read as NumPy arrays once: a served single row costs
    about 1 ms, most of it building the answer frame."""
    constants = constants or PhysicsConstants()
    missing = [c for c in ROW_COLUMNS + GPU_COLUMNS if c not in X]
    if missing:
        raise KeyError(f"physics estimate: missing column(s) {missing}")
    precision = _str_array(X["precision"])
    n = len(precision)
    mode = _str_array(X["mode"])
    compile_mode = _str_array(X["compile_mode"])
    training = mode == "training"
    batch = np.asarray(X["batch_size"], dtype=float)
    bpe = bytes_per_element(precision)
    tf32 = np.zeros(n, dtype=bool) if tf32 is None else np.asarray(tf32, dtype=bool)
    gpu = X  # GPU spec columns, read as NumPy arrays (no aligned copy: a frame copy costs more than the math)
    mac_peak = peak_tflops(precision, gpu, tf32) * 1e12
    core_peak = _cuda_core_peak(precision, gpu) * 1e12
    bw = np.asarray(gpu["memory_bandwidth_gbs"], dtype=float) * 1e9
    sms = np.asarray(gpu["sm_count"], dtype=float)
    l2 = np.asarray(gpu["l2_cache_mb"], dtype=float) * 1e6
    floor = constants.kernel_floor_us * 1e-6

    fusion = _categories(compile_mode, constants.fusion, "none")
    fusion = np.where(training & (fusion == "producer"), "pointwise", fusion)  # no engine builder trains
    mode_key = np.where(fusion == "none", mode, np.char.add(np.char.add(mode.astype(str), "@"), fusion.astype(str)))
    row, ker, found = _pairs(index, _str_array(X["model_key"]), np.asarray(X["img_size"]).astype(int), mode_key)
    q = {c: index.q[c][ker].astype(np.float64) for c in QUANTITIES}
    b = batch[row]
    flops = q["flops_fixed"] + q["flops_per_sample"] * b
    elems = (q["in_elems_fixed"] + q["in_elems_per_sample"] * b + q["weight_elems"]
             + q["out_elems_fixed"] + q["out_elems_per_sample"] * b)
    nbytes = elems * bpe[row] + q["other_bytes_fixed"] + q["other_bytes_per_sample"] * b
    mac = index.mac[ker]
    # Profile indexes pickled before the Winograd flag (older served models) have none: no kernel is eligible.
    winograd = getattr(index, "winograd", np.zeros(len(index.count), dtype=bool))[ker] & mac
    grouped = getattr(index, "grouped", np.zeros(len(index.count), dtype=bool))[ker] & mac
    blocks = np.ceil(b * index.out_pixels[ker] / NOMINAL_TILE) * np.ceil(index.c_out[ker] / NOMINAL_TILE)
    out_elems = q["out_elems_fixed"] + q["out_elems_per_sample"] * b
    # GEMM reduction depth K (MACs per output element: C_in/groups x R x S for a conv).
    depth_k = np.maximum(flops / np.maximum(2.0 * out_elems, 1.0), 1.0)
    if constants.split_k_min_depth > 0:
        # A grid smaller than the GPU is split along K (split-K / stream-K, as cuBLAS and cuDNN do for small
        # outputs): up to K / min_depth slices (at most split_k_max), never more than it takes to fill one wave.
        slots = sms[row] * constants.blocks_per_sm
        splits = np.clip(np.minimum(np.floor(depth_k / constants.split_k_min_depth),
                                    np.ceil(slots / np.maximum(blocks, 1.0))),
                         1.0, constants.split_k_max)
        if constants.split_k_runtimes is not None:
            splits = np.where(np.isin(compile_mode, list(constants.split_k_runtimes))[row], splits, 1.0)
        blocks = blocks * splits
    # Outputs that do not grow with the batch (weight gradients: M x N = the weight, K = batch x pixels) run as
    # split-K GEMMs that fill the GPU; the wave model applies to outputs that scale with the batch.
    gridded = mac & (index.out_pixels[ker] > 0)
    weff = np.where(gridded, wave_efficiency(blocks, sms[row], constants.blocks_per_sm), 1.0)
    peak = np.where(mac, mac_peak[row], core_peak[row])
    # Winograd (cuDNN) saves multiplies on CUDA cores; tensor-core paths run these convolutions as implicit GEMM.
    cuda_core_mac = mac & (mac_peak[row] <= core_peak[row] * 1.001)
    speedup = np.where(winograd & cuda_core_mac, constants.winograd_speedup, 1.0)
    t_compute = flops / (peak * weff * speedup)
    t_memory = nbytes / bw[row]
    t_kernel = np.maximum(np.maximum(t_compute, t_memory), floor)
    t_kernel = t_kernel + _layout_transforms(X, constants, precision, compile_mode, tf32, row, index, ker, mac,
                                             grouped, q, b, bpe, bw, floor)
    count = index.count[ker].astype(np.float64)
    t_total = t_kernel * count

    def per_row(values: np.ndarray) -> np.ndarray:
        # float always: with no kernel at all (only rows without a profile) bincount returns integers, and the
        # whole-network times written into them below were truncated to 0
        return np.bincount(row, weights=values, minlength=n).astype(np.float64, copy=False)

    t_kernels = per_row(t_total)
    n_kernels = per_row(count)
    compute_bound = per_row(np.where((t_compute >= t_memory) & (t_compute >= floor), t_total, 0.0))
    floor_bound = per_row(np.where(np.maximum(t_compute, t_memory) < floor, t_total, 0.0))
    largest = np.zeros(n)
    np.maximum.at(largest, row, t_kernel)
    mac_time = per_row(np.where(mac, t_total, 0.0))
    wave = per_row(np.where(mac, t_total * weff, 0.0))
    all_bytes = per_row(nbytes * count)
    winograd_time = per_row(np.where(winograd, t_total, 0.0))
    grouped_time = per_row(np.where(grouped, t_total, 0.0))
    # GEMM reduction depth K (MACs per output element: C_in/groups x R x S for a conv): deep GEMMs keep the math
    # units busy, shallow ones are bound by operand traffic. Time-weighted mean of log2 K over the MAC kernels.
    depth = np.log2(depth_k)
    depth_time = per_row(np.where(mac, t_total * depth, 0.0))
    # Share of a 128-wide output tile that holds real output channels (a 32-channel conv fills a quarter).
    fill = index.c_out[ker] / (np.ceil(np.maximum(index.c_out[ker], 1.0) / NOMINAL_TILE) * NOMINAL_TILE)
    grid_time = per_row(np.where(gridded, t_total, 0.0))
    fill_time = per_row(np.where(gridded, t_total * fill, 0.0))
    l2_bytes = per_row(np.where(nbytes <= l2[row], nbytes * count, 0.0))

    params = np.zeros(n)
    if len(ker):
        np.maximum.at(params, row, index.param_elems[ker])
    t_kernels = t_kernels + np.where(training, params * constants.optimizer_bytes_per_param / bw, 0.0)

    # Rows without a layer profile: the whole network as one kernel (engineer's roofline) and the median
    # kernels per GMAC of the profiled rows, so dispatch is still counted.
    if not found.all():
        net = engineer(X.reset_index(drop=True) if isinstance(X, pd.DataFrame) else pd.DataFrame(dict(X)))
        miss = ~found
        passes = float(getattr(constants, "by_numbers_memory_passes", 0.0) or 0.0)
        t_compute, t_memory = net["t_compute_ms"].to_numpy() * 1e-3, net["t_memory_ms"].to_numpy() * 1e-3
        whole = np.maximum(t_compute, t_memory) if passes == 0 else t_compute + passes * t_memory
        t_kernels[miss] = whole[miss]
        gmacs = np.asarray(X["gmacs"], dtype=float)
        ratio = np.where(training, index.kernels_per_gmac("training"), index.kernels_per_gmac("inference"))
        n_kernels[miss] = np.maximum(1.0, ratio[miss] * gmacs[miss])
        compute_bound[miss] = (np.where(net["intensity_over_ridge"].to_numpy()[miss] >= 1, t_kernels[miss], 0.0)
                               if passes == 0 else t_compute[miss])
        floor_bound[miss] = 0.0
        largest[miss] = t_kernels[miss]
        mac_time[miss] = 0.0
        winograd_time[miss] = 0.0
        grouped_time[miss] = 0.0
        grid_time[miss] = 0.0
        all_bytes[miss] = net["bytes_step"].to_numpy()[miss]
        l2_bytes[miss] = np.where(all_bytes[miss] <= l2[miss], all_bytes[miss], 0.0)

    default_us = constants.dispatch_us.get("eager", 20.0)
    dispatch_us = lookup(compile_mode, lambda m: constants.dispatch_us.get(m, default_us))
    t_dispatch = n_kernels * dispatch_us * 1e-6 * np.where(training, constants.training_dispatch_factor, 1.0)
    t_physics = np.maximum(t_kernels, t_dispatch)
    safe = np.maximum(t_kernels, 1e-12)
    out = pd.DataFrame({
        "t_physics_ms": t_physics * 1e3,
        "t_kernels_ms": t_kernels * 1e3,
        "t_dispatch_ms": t_dispatch * 1e3,
        "n_kernels": n_kernels,
        "compute_bound_share": np.clip(compute_bound / safe, 0, 1),
        "memory_bound_share": np.clip((t_kernels - compute_bound - floor_bound) / safe, 0, 1),
        "floor_bound_share": np.clip(floor_bound / safe, 0, 1),
        "largest_kernel_share": np.clip(largest / safe, 0, 1),
        "mac_wave_efficiency": np.where(mac_time > 0, wave / np.maximum(mac_time, 1e-30), 1.0),
        "l2_resident_share": np.where(all_bytes > 0, l2_bytes / np.maximum(all_bytes, 1e-30), 0.0),
        "dispatch_over_kernels": t_dispatch / safe,
        "has_layer_profile": found.astype(float),
        "winograd_share": np.clip(winograd_time / safe, 0, 1),
        "mac_tile_fill": np.where(grid_time > 0, fill_time / np.maximum(grid_time, 1e-30), 1.0),
        "mac_log2_depth": np.where(mac_time > 0, depth_time / np.maximum(mac_time, 1e-30), 0.0),
        "grouped_share": np.clip(grouped_time / safe, 0, 1),
    }, index=X.index if isinstance(X, pd.DataFrame) else None)
    return out


# Frames of at most this many rows (served requests) are priced directly, never hashed for the memo.
SMALL_FRAME_ROWS = 16


def cached_price(X: Columns, index: ProfileIndex, constants: PhysicsConstants,
                 tf32: np.ndarray | None = None) -> pd.DataFrame:
    """price_rows, memoised per row on its content (`RowMemo`: training prices the same rows for every trial,
    fold and protocol, in ever different subsets).

    Frames of a few rows (served requests) are priced directly: hashing them costs as much as a repeat would
    save. Only the columns price_rows reads are hashed and handed on; a frame lacking one goes on whole, so
    price_rows names what is missing."""
    if not isinstance(X, pd.DataFrame):  # a few served rows as arrays (engineer.PerfFeatures.physics_frame)
        return price_rows(X, index, constants, tf32)
    cols = ROW_COLUMNS + GPU_COLUMNS
    if not set(cols) <= set(X.columns):
        return price_rows(X, index, constants, tf32)
    narrow = X if list(X.columns) == cols else X[cols]
    if len(X) <= SMALL_FRAME_ROWS:
        return price_rows(narrow, index, constants, tf32).set_axis(X.index)
    priced = index.row_memo(constants).price(narrow, tf32, lambda rows, flags: price_rows(rows, index, constants,
                                                                                           flags))
    return priced.set_axis(X.index)


@lru_cache(maxsize=4)
def load_profile_index(path: str, layers_path: str | None = None) -> ProfileIndex:
    """ProfileIndex of a kernel profile table (the `features` stage writes data/processed/kernel_profiles.parquet);
    where that file is absent (a hold-out fit on tables of its own), compacted in memory from the layer table."""
    if Path(path).exists():
        return ProfileIndex(pd.read_parquet(path))
    if layers_path and Path(layers_path).exists():
        from .kernels import LAYER_COLUMNS, kernel_profiles

        return ProfileIndex(kernel_profiles(pd.read_parquet(layers_path, columns=LAYER_COLUMNS), layers_path))
    raise FileNotFoundError(f"{path}: kernel profiles not found, nor the layer table {layers_path}; build them "
                            "with `python -m src.features` (DVC stage `features`, after the `layers` stage)")
