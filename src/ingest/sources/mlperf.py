"""MLPerf Inference v2.1-v4.1 closed results (mlcommons/cm4mlperf-results): ResNet-50 and RetinaNet.

One JSON list per experiment (`experiment/<name>/<timestamp>/cm-result.json`), one object per submitted system
and scenario; each object is one row read. Kept: NVIDIA GPUs running NVIDIA's TensorRT harness. Everything else
is quarantined with its reason (nothing dropped):
- non-NVIDIA accelerators and CPU-only systems (accelerator "N/A", "-", None);
- MIG slices and virtualised GPUs (vGPU profiles such as `A10-24Q`, `H100-80C`, "Virtualized ..."): not a whole GPU;
- accelerator names that do not say which board (memory size or module) it is: `HGX A100 SXM` (40 or 80 GB, which
  differ in bandwidth), `NVIDIA Orin` / `NVIDIA Jetson AGX Orin` (32 or 64 GB module), `NVIDIA Orin NX` (8 or 16 GB);
- software stacks other than TensorRT (reference implementations in PyTorch/ONNX Runtime/TFLite, other vendors'
  SDKs): the precision they ran is not recorded here, and guessing it would mislabel rows;
- results inferred from another scenario (`inferred` = 1: allowed for edge Offline, not a measurement), and counts
  of accelerators that are not numbers.

Precision: `int8` for every kept row. The aggregated files have no precision field; NVIDIA's closed TensorRT
submissions of ResNet-50 and RetinaNet run INT8 engines (SOURCE.md caveats). framework "tensorrt", compile_mode
"tensorrt"; the version from the `framework` field ("TensorRT 9.0.0, CUDA 12.2" -> 9.0.0 / 12.2); NVIDIA's harness
named otherwise ("Nvidia inference implementation", "Jetson CUDA-X AI Developer Preview", "NGC MLPerf", "CUDA 11.6")
is TensorRT with the version not stated. Third-party stacks around TensorRT without a version (KRAI KILT) are
quarantined with the others: their precision is not recorded either.

Scenarios. SingleStream: the 90th-percentile latency of one query at batch 1 (`latency_stat` "p90", batch 1).
Offline: whole-system samples/s; each GPU runs its own engine on a share of the samples (the work is split), so the
row is one GPU's share, throughput / (accelerators_per_node x number_of_nodes), `num_gpus` 1, said in `variant`.
Offline results do not report the batch size the engine ran: rows carry `batch_size` = OFFLINE_NOMINAL_BATCH and
`latency_ms` = that batch / per-GPU throughput (`latency_stat` "from_throughput"), i.e. the per-sample time of a
saturated GPU scaled to a nominal batch; `variant` says so, and `scenario` = "offline" tells them apart.

Input: LoadGen serves ImageNet/OpenImages samples that were preprocessed and loaded into host memory before the
timed run, so no input pipeline (decoding, resizing) is timed: `data_mode` "preloaded" (the copy to the GPU is timed,
as in DLInfBench).

Models: resnet50 = ResNet-50 v1.5 (torchvision's layout), 224 px; retinanet = RetinaNet with a ResNeXt50-32x4d FPN
backbone, 800 px (a detection CNN; `src/zoo/definitions.py` writes its network down from MLPerf's reference, so the
zoo computes its static features, layer table and PTX counts like any other CNN's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, to_float, workload

SOURCE = "mlperf"
MIRROR_DIR = "mlcommons-cm4mlperf-results"
OFFLINE_NOMINAL_BATCH = 256
MODELS = {"resnet50": ("resnet50", 224, "torchvision"), "retinanet": ("retinanet_resnext50_32x4d_fpn", 800, "mlperf")}
SCENARIOS = {"Offline": "offline", "SingleStream": "single_stream"}
UNITS = {"Offline": "Samples/s", "SingleStream": "Latency (ms)"}
NOT_AN_ACCELERATOR = {"N/A", "-", "None", ""}
AMBIGUOUS = {
    "NVIDIA HGX A100 SXM": "A100 SXM memory size not stated (40 and 80 GB boards differ in bandwidth)",
    "NVIDIA Orin": "Jetson AGX Orin module not stated (32 and 64 GB modules differ in SMs)",
    "NVIDIA Jetson AGX Orin": "Jetson AGX Orin module not stated (32 and 64 GB modules differ in SMs)",
    "NVIDIA Orin NX": "Jetson Orin NX module not stated (8 and 16 GB modules differ in SMs)",
}
# NVIDIA's own harness under other names (TensorRT inside, version not stated).
NVIDIA_HARNESS = re.compile(r"nvidia inference implementation|jetson cuda-x ai|^ngc mlperf|^cuda \d", re.IGNORECASE)
_TRT_VERSION = re.compile(r"tensorrt\s*v?(\d+(?:\.\d+)*)", re.IGNORECASE)
_CUDA_VERSION = re.compile(r"cuda\s*v?(\d+\.\d+)", re.IGNORECASE)
_VGPU = re.compile(r"-\d+[CQ]\b|virtuali[sz]ed", re.IGNORECASE)
REQUIRED = ("Model", "Scenario", "Result", "Units", "accelerator_model_name", "accelerators_per_node",
            "number_of_nodes", "framework", "version", "SystemName", "uid")


def _exclusion(record: dict[str, Any]) -> str | None:
    """Why a result is not one NVIDIA GPU running TensorRT (None if it is)."""
    missing = [f for f in REQUIRED if f not in record]
    if missing:
        return f"missing field(s) {missing}"
    name = str(record["accelerator_model_name"]).strip()
    if name in NOT_AN_ACCELERATOR:
        return f"no accelerator ({name!r}): CPU-only system"
    if not (name.upper().startswith("NVIDIA") or name == "Tesla T4" or name.startswith("Virtualized NVIDIA")):
        return f"non-NVIDIA accelerator {name!r}"
    if "MIG" in name:
        return f"MIG slice {name!r}: not a whole GPU"
    if _VGPU.search(name):
        return f"virtualised GPU {name!r} (vGPU profile): not a whole GPU"
    if name in AMBIGUOUS:
        return AMBIGUOUS[name]
    if record["Model"] not in MODELS:
        return f"unknown model {record['Model']!r}"
    if record["Scenario"] not in SCENARIOS:
        return f"unknown scenario {record['Scenario']!r}"
    if record["Units"] != UNITS[record["Scenario"]]:
        return f"unexpected units {record['Units']!r} for scenario {record['Scenario']}"
    framework = str(record["framework"])
    if not (_TRT_VERSION.search(framework) or NVIDIA_HARNESS.search(framework.strip())):
        return f"software stack {framework!r} is not NVIDIA's TensorRT harness: its precision is not recorded"
    if record.get("inferred") == 1:
        return "result inferred from another scenario (inferred=1), not measured"
    for field in ("accelerators_per_node", "number_of_nodes"):
        value = to_float(record[field])
        if value is None or value < 1 or value != int(value):
            return f"{field} is not a whole number >= 1: {record[field]!r}"
    result = to_float(record["Result"])
    if result is None or result <= 0:
        return f"non-numeric or non-positive Result: {record['Result']!r}"
    return None


def _row(record: dict[str, Any], rel: str, commit: str, index: int) -> dict[str, Any]:
    name = str(record["accelerator_model_name"]).strip()
    device = resolve_device(f"mlperf {name}", where=f"{rel} [{index}]")
    model, img, model_source = MODELS[record["Model"]]
    scenario = SCENARIOS[record["Scenario"]]
    framework = str(record["framework"])
    trt, cuda = _TRT_VERSION.search(framework), _CUDA_VERSION.search(framework)
    gpus = int(to_float(record["accelerators_per_node"])) * int(to_float(record["number_of_nodes"]))
    value = float(to_float(record["Result"]))
    common = f"MLPerf {record['version']} {record.get('Availability', '')}: {record['SystemName']}"
    if scenario == "offline":
        batch, latency, throughput, stat = OFFLINE_NOMINAL_BATCH, None, value / gpus, "from_throughput"
        variant = (f"{common}; offline throughput of {gpus} GPU(s) divided per GPU; batch not reported, "
                   f"nominal {OFFLINE_NOMINAL_BATCH}")
    else:
        batch, latency, throughput, stat = 1, value, 1000.0 / value, "p90"
        variant = f"{common}; single-stream 90th-percentile latency"
    key = f"{record['uid']}:{scenario}"
    return {
        "measurement_id": f"{SOURCE}:{rel}:{key}", "source": SOURCE, "source_file": rel, "upstream_commit": commit,
        "gpu": device.gpu, "device_raw": name, "is_cpu": False, "num_gpus": 1 if scenario == "offline" else gpus,
        "framework": "tensorrt", "framework_version": trt.group(1) if trt else "",
        "cuda_version": cuda.group(1) if cuda else "", "precision": "int8", "memory_layout": "nchw",
        "compile_mode": "tensorrt", "data_mode": "preloaded", "variant": variant, "scenario": scenario,
        **workload(model, model_source), "img_size": img, "batch_size": batch, "mode": "inference",
        "latency_ms": latency, "throughput": throughput, "latency_stat": stat, "latency_spread_ms": None,
        "n_samples": None, "param_count_m": None, "gmacs": None, "activations_m": None,
        "_raw": record, "_row_key": f"[{index}] {key}",
    }


def parse_file(path: Path, rel: str, commit: str) -> ParseResult:
    """One `cm-result.json`: every object is a row read; kept rows are one GPU running TensorRT."""
    result = ParseResult()
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{rel}: not valid JSON ({exc})") from exc
    if not isinstance(records, list):
        raise ValueError(f"{rel}: expected a JSON list of results, got {type(records).__name__}")
    for index, record in enumerate(records):
        result.n_read += 1
        if not isinstance(record, dict):
            result.quarantine.append(quarantined(SOURCE, rel, f"[{index}]", "result is not a JSON object", record))
            continue
        reason = _exclusion(record)
        if reason:
            key = f"[{index}] {record.get('uid', '')}:{record.get('Scenario', '')}"
            result.quarantine.append(quarantined(SOURCE, rel, key, reason, record))
            continue
        result.rows.append(_row(record, rel, commit, index))
    return result


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Every experiment's results (`files`: mirror-relative path -> local path)."""
    result = ParseResult()
    for rel in sorted(r for r in files if r.startswith(f"{MIRROR_DIR}/") and r.endswith("cm-result.json")):
        result.extend(parse_file(files[rel], rel, commits.get(rel, "")))
    return result
