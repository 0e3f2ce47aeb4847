"""Lambda's TensorFlow benchmark (tf_cnn_benchmarks): throughput in images/s.

Two kinds of input:
- `DERIVED_logs_total_images_per_sec.csv`: one row per raw log (one run per configuration), with batch size
  per GPU. These are the measurements we keep.
- the published summary tables (`tf-train-throughput-*.csv` with `tf-train-bs-*.csv` at HEAD, and
  `history_64f866ce/tf-inference-throughput-*.csv`): aggregates of the same logs. Every cell is read; zeros
  (Lambda's "not run/failed") and cells that repeat a log measurement are quarantined with that reason; inference
  cells have no batch size and are quarantined as such. The older `history_*` train tables and the
  `history_6595db3e/summary` folder are earlier snapshots of the same aggregates and are not read.
Latency per step is derived as total batch / throughput; `fp16` runs are mixed precision (fp32 variables).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, read_csv_rows, to_float, workload

SOURCE = "lambda"
DERIVED = "lambda-tensorflow-benchmark/DERIVED_logs_total_images_per_sec.csv"
_TOP = "lambda-tensorflow-benchmark"
TRAIN_SUMMARIES = {
    "fp16": (f"{_TOP}/tf-train-throughput-fp16.csv", f"{_TOP}/tf-train-bs-fp16.csv"),
    "fp32": (f"{_TOP}/tf-train-throughput-fp32.csv", f"{_TOP}/tf-train-bs-fp32.csv"),
}
INFERENCE_SUMMARIES = {
    "fp16": "lambda-tensorflow-benchmark/history_64f866ce/tf-inference-throughput-fp16.csv",
    "fp32": "lambda-tensorflow-benchmark/history_64f866ce/tf-inference-throughput-fp32.csv",
}
MODELS = ("alexnet", "inception3", "inception4", "resnet152", "resnet50", "vgg16")
# tf_cnn_benchmarks' model input sizes (alexnet is 224 + 3).
IMAGE_SIZES = {"alexnet": 227, "inception3": 299, "inception4": 299, "resnet50": 224, "resnet152": 224, "vgg16": 224}
PRECISIONS = {"fp16": "amp_fp16", "fp32": "fp32"}
DATA_MODES = {("syn", "0"): "synthetic", ("real", "0"): "real", ("real", "1"): "real_distorted",
              ("syn", "1"): "synthetic"}

_CPU_PREFIX = re.compile(r"^(?:i7-\w+|Gold_\d+|Platinum|Processor|\d{4}X?)-")
_SUFFIXES = re.compile(r"_(?:XLA|trt2?|NVLink|HP16|LambdaCloud|TF\d+_\d+)(?=_|$)")
_LABEL_SUFFIXES = re.compile(r"[ _](?:XLA|trt2?|NVLink)(?=[ _]|$)")


def system_gpu(system: str) -> tuple[str, int | None]:
    """GPU part of a log system label and the GPU count it encodes (`7742-4xA100-SXM4-40GB_TF2_3`)."""
    label = _CPU_PREFIX.sub("", system)
    label = re.sub(r"^LambdaCloud[-_]", "", label)
    label = _SUFFIXES.sub("", label)
    label = re.sub(r"-PCIEGen\d(?:-10bit)?$", "", label)
    count = re.match(r"^(\d+)x", label)
    if count:
        label = label[count.end():]
    return label, int(count.group(1)) if count else None


# Systems whose every synthetic-data log says "Compiled cluster using XLA!" (XLA auto-clustering on, the README's
# `TF_XLA_FLAGS=--tf_xla_auto_jit=2` recipe) although their label has no `_XLA`: read in the raw logs of
# LambdaColdStorage/lambda-tensorflow-benchmark at e086e0e7 (2026-11-27; the logs are not in the shared mirror).
XLA_WITHOUT_LABEL = frozenset({"7502-A100-PCIE-40GB", "7502-GeForce_RTX_3070", "7662-GeForce_RTX_3090",
                               "LambdaCloud-RTX_A6000"})
# Labelled `_XLA`, but the logs of these data modes compiled nothing with XLA (the real-ImageNet runs of one system).
NO_XLA_DATA_MODES = {"Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15": frozenset({"real", "real_distorted"})}


def software(system: str, metadata: dict[str, str], data_mode: str = "synthetic") -> dict[str, str]:
    """Compile mode (XLA or none), TF and CUDA versions of a system label and its metadata file.

    A `_trt` / `_trt2` label does not mean TensorRT: benchmark.sh never passes tf_cnn_benchmarks' `--trt_mode`
    (default off; it would act only with `--forward_only` and `--freeze_when_forward_only`), no log of such a system
    loads libnvinfer or mentions TensorRT, and half of those runs are training steps, which TF-TRT cannot run. Those
    runs are plain TensorFlow graphs, with or without XLA as the logs say.
    """
    xla = ("_XLA" in system or system in XLA_WITHOUT_LABEL) and data_mode not in NO_XLA_DATA_MODES.get(system, ())
    tf_label = re.search(r"TF(\d+)_(\d+)", system)
    tf = f"{tf_label.group(1)}.{tf_label.group(2)}" if tf_label else metadata.get("TF", "")
    cuda = re.match(r"V?(\d+\.\d+)", metadata.get("CUDA", ""))
    return {"compile_mode": "xla" if xla else "eager", "framework_version": tf,
            "cuda_version": cuda.group(1) if cuda else ""}


def read_metadata(path: Path | None) -> dict[str, str]:
    """`key<TAB>value` lines of a system's metadata file (first value wins)."""
    meta: dict[str, str] = {}
    if path is None:
        return meta
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("\t")
        meta.setdefault(key.strip(), value.strip())
    return meta


def _row(**kw: object) -> dict[str, object]:
    model = str(kw["model"])
    return {
        "source": SOURCE,
        "framework": "tensorflow",
        "memory_layout": "nchw",  # tf_cnn_benchmarks' default data_format on GPUs
        **workload(model, "tf_cnn_benchmarks"),
        "img_size": IMAGE_SIZES.get(model, 224),
        "latency_ms": None,
        "latency_stat": "from_throughput",
        "latency_spread_ms": None,
        "n_samples": None,
        "param_count_m": None,
        "gmacs": None,
        "activations_m": None,
        "is_cpu": False,
        **kw,
    }


def parse_logs(path: Path, commit: str, files: dict[str, Path]) -> ParseResult:
    """One measurement per raw log line of the derived table."""
    result = ParseResult()
    header, rows = read_csv_rows(path)
    metadata_cache: dict[str, dict[str, str]] = {}
    for line_no, fields in rows:
        result.n_read += 1
        raw = dict(zip(header, fields, strict=False))
        key = f"line {line_no}"
        if len(fields) != len(header):
            reason = f"truncated row: {len(fields)} of {len(header)} fields"
            result.quarantine.append(quarantined(SOURCE, DERIVED, key, reason, raw))
            continue
        system = raw["system"]
        gpu_label, _ = system_gpu(system)
        device = resolve_device(gpu_label, where=f"{DERIVED} system {system!r}")
        if device.gpu is None:
            result.quarantine.append(quarantined(SOURCE, DERIVED, key, str(device.excluded_reason), raw))
            continue
        if not raw["total_images_per_sec"].strip():
            reason = "missing value: run printed no total images/sec"
            result.quarantine.append(quarantined(SOURCE, DERIVED, key, reason, raw))
            continue
        if system not in metadata_cache:
            metadata_cache[system] = read_metadata(files.get(f"{_TOP}/logs/{system}.logs/metadata"))
        data_mode = DATA_MODES.get((raw["data_mode"], raw["distortions"]), raw["data_mode"])
        soft = software(system, metadata_cache[system], data_mode)
        num_gpus = int(raw["num_gpus"])
        per_gpu = to_float(raw["batch_size_per_gpu"])
        result.rows.append(
            _row(
                measurement_id=f"{SOURCE}:{DERIVED}:{line_no}",
                source_file=DERIVED,
                upstream_commit=commit,
                gpu=device.gpu,
                device_raw=system,
                num_gpus=num_gpus,
                precision=PRECISIONS.get(raw["precision"], raw["precision"]),
                model=raw["model"],
                batch_size=per_gpu * num_gpus if per_gpu is not None else raw["batch_size_per_gpu"],
                mode="training" if raw["mode"] == "train" else "inference",
                throughput=raw["total_images_per_sec"],
                data_mode=data_mode,
                variant=raw["variable_update"],
                _raw=raw,
                _row_key=key,
                **soft,
            )
        )
    return result


def summary_gpu(label: str) -> tuple[str, int, str]:
    """GPU, GPU count and software suffix of a summary-table label (`2x RTX 2080Ti NVLink`, `4x2080Ti_XLA_trt`)."""
    text = label.replace("Lambda Cloud — ", "").strip()
    count = re.match(r"^(\d+)x\s*", text)
    num = int(count.group(1)) if count else 1
    text = text[count.end():] if count else text
    gpu = _LABEL_SUFFIXES.sub("", text).strip()
    gpu = re.sub(r"[ _](?:XLA|trt2?|NVLink)$", "", gpu)
    return gpu, num, text[len(gpu):].strip(" _")


def parse_summaries(files: dict[str, Path], commits: dict[str, str], log_keys: set[tuple]) -> ParseResult:
    """Read every cell of the summary tables; keep only those that add a measurement not in the logs."""
    result = ParseResult()
    for precision, (throughput_rel, batch_rel) in TRAIN_SUMMARIES.items():
        header, rows = read_csv_rows(files[throughput_rel])
        _, batch_rows = read_csv_rows(files[batch_rel])
        batches = {fields[0]: dict(zip(header, fields, strict=False)) for _, fields in batch_rows}
        for line_no, fields in rows:
            raw = dict(zip(header, fields, strict=False))
            gpu_label, num, suffix = summary_gpu(raw["name_gpu"])
            device = resolve_device(gpu_label, where=f"{throughput_rel} row {raw['name_gpu']!r}")
            for model in MODELS:
                result.n_read += 1
                key = f"line {line_no} {model}"
                cell = {"name_gpu": raw["name_gpu"], "model": model, "throughput": raw.get(model),
                        "batch_size": batches.get(raw["name_gpu"], {}).get(model)}
                value, batch = to_float(cell["throughput"]), to_float(cell["batch_size"])
                reason = None
                if value == 0:
                    reason = "zero stands for missing (not run or failed)"
                elif batch is None or batch == 0:
                    reason = "missing batch size in the tf-train-bs table"
                elif (device.gpu, num, PRECISIONS[precision], "training", model, int(batch)) in log_keys:
                    reason = "duplicate of a per-run log measurement (summaries aggregate the logs)"
                if reason:
                    result.quarantine.append(quarantined(SOURCE, throughput_rel, key, reason, cell))
                    continue
                result.rows.append(
                    _row(
                        measurement_id=f"{SOURCE}:{throughput_rel}:{line_no}:{model}",
                        source_file=throughput_rel,
                        upstream_commit=commits[throughput_rel],
                        gpu=device.gpu,
                        device_raw=raw["name_gpu"],
                        num_gpus=num,
                        precision=PRECISIONS[precision],
                        model=model,
                        batch_size=batch,
                        mode="training",
                        throughput=cell["throughput"],
                        data_mode="synthetic",
                        variant=suffix or "summary",
                        compile_mode="eager",
                        framework_version="",
                        cuda_version="",
                        _raw=cell,
                        _row_key=key,
                    )
                )
    for _precision, rel in INFERENCE_SUMMARIES.items():
        header, rows = read_csv_rows(files[rel])
        for line_no, fields in rows:
            raw = dict(zip(header, fields, strict=False))
            gpu_label, _, _ = summary_gpu(raw["name_gpu"])
            resolve_device(gpu_label, where=f"{rel} row {raw['name_gpu']!r}")
            for model in MODELS:
                result.n_read += 1
                cell = {"name_gpu": raw["name_gpu"], "model": model, "throughput": raw.get(model)}
                reason = ("zero stands for missing (not run or failed)" if to_float(raw.get(model)) == 0
                          else "missing batch size: inference summary gives throughput only")
                result.quarantine.append(quarantined(SOURCE, rel, f"line {line_no} {model}", reason, cell))
    return result
