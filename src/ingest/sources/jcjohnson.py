"""jcjohnson/cnn-benchmarks: Torch7 forward and forward+backward times of 10 CNNs on Maxwell/Pascal/Kepler GPUs.

Two kinds of input, read as follows (SOURCE.md):
- `outputs/<run folder>/<id>.json`, the raw output of `cnn_benchmark.lua`: 10 timed passes (after one discarded)
  of batch 16 at 224 px, fp32, model in training mode; per pass the forward and the backward time in seconds.
  Each file gives two measurements: the forward pass (`mode` inference; the forward of a training-mode model,
  i.e. batch-norm with batch statistics, said in `variant`) and forward + backward (`mode` training; no optimizer
  step, said in `variant`). The statistic is the median of the 10 passes, the spread their inter-quartile range.
  `cudnn_version` "none" means Torch's own `nn` CUDA kernels without cuDNN; the cuDNN release or "nn" is part of
  `variant`, so both runs of one CNN stay distinct rows.
- `history_93014cd7/README.md` (the README of 2016-07-13): per-network tables `GPU | Forward | Backward | Total`
  in ms. Its Tesla K40c rows exist nowhere else and are ingested (forward -> inference, total -> training, the
  source's mean); its GTX 1080 / Maxwell TITAN X rows summarise runs that `outputs/` holds as JSON and are
  quarantined as such (never counted twice); its CPU rows are kept and flagged as CPU rows.
The README at HEAD only summarises the JSON runs and is not read. Each table row counts as two rows read (forward,
total); each JSON file too. A table whose header is not `GPU | Forward (ms) | Backward (ms) | Total (ms)` stops
the parse with an error naming file and line.

Models are the Torch .t7 conversions: fb.resnet.torch ResNets (torchvision's layout), VGG-16/19, BVLC AlexNet
(grouped convolutions, unlike torchvision's single-tower AlexNet; same model_key, an approximation) and
GoogLeNet v1 (BVLC, LRN and no batch norm; torchvision's `googlenet` adds batch norm: the approximation of
docs/zoo.md).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, to_float, workload

SOURCE = "jcjohnson"
MIRROR_DIR = "jcjohnson-cnn-benchmarks"
HISTORY_README = f"{MIRROR_DIR}/history_93014cd7/README.md"
# `.t7` file stem / README section -> the torchvision/timm name we build.
MODEL_NAMES = {
    "alexnet": "alexnet", "googlenet-v1": "googlenet", "vgg16": "vgg16", "vgg19": "vgg19",
    "resnet-18": "resnet18", "resnet-34": "resnet34", "resnet-50": "resnet50", "resnet-101": "resnet101",
    "resnet-152": "resnet152", "resnet-200": "resnet200",
    "AlexNet": "alexnet", "VGG-16": "vgg16", "VGG-19": "vgg19", "ResNet-18": "resnet18", "ResNet-34": "resnet34",
    "ResNet-50": "resnet50", "ResNet-101": "resnet101", "ResNet-152": "resnet152", "ResNet-200": "resnet200",
}
TABLE_HEADER = ["GPU", "Forward (ms)", "Backward (ms)", "Total (ms)"]
FORWARD_NOTE = "forward of a training-mode model (batch-norm batch statistics)"
STEP_NOTE = "forward + backward, no optimizer step"
# Device strings of the old README whose runs `outputs/` holds as JSON (re-run there): summaries, not new data.
SUMMARISED_IN_OUTPUTS = ("GeForce GTX 1080", "GeForce GTX TITAN X")
_PASSES = {"inference": ("forward_times",), "training": ("forward_times", "backward_times")}


class MarkdownTableError(ValueError):
    """A README table whose header is not the one this parser knows."""


def _cudnn_label(version: Any) -> str:
    """5105 -> 'cudnn 5.1.05'; 'none' -> 'nn' (Torch's CUDA kernels without cuDNN)."""
    text = str(version).strip()
    if text == "none":
        return "nn"
    if not text.isdigit() or len(text) != 4:
        raise ValueError(f"unreadable cudnn_version {version!r}")
    return f"cudnn {text[0]}.{text[1]}.{text[2:]}"


def _row(rel: str, commit: str, key: str, device_raw: str, name: str, mode: str, latency_ms: Any,
         stat: str, spread: float | None, n: int | None, variant: str, raw: Any) -> dict[str, Any]:
    device = resolve_device(device_raw, where=rel)
    return {
        "measurement_id": f"{SOURCE}:{rel}:{key}", "source": SOURCE, "source_file": rel, "upstream_commit": commit,
        "gpu": device.gpu, "device_raw": device_raw, "is_cpu": device.is_cpu, "num_gpus": 1,
        "framework": "torch7", "framework_version": "", "cuda_version": "" if device.is_cpu else "8.0",
        "precision": "fp32", "memory_layout": "nchw", "compile_mode": "eager", "variant": variant,
        **workload(name, "torchvision"), "img_size": 224, "batch_size": 16, "mode": mode,
        "latency_ms": latency_ms, "throughput": _throughput(16, latency_ms), "latency_stat": stat,
        "latency_spread_ms": spread, "n_samples": n, "param_count_m": None, "gmacs": None, "activations_m": None,
        "_raw": raw, "_row_key": key,
    }


def _throughput(batch: int, latency_ms: Any) -> Any:
    value = to_float(latency_ms)
    return batch / value * 1000.0 if value and value > 0 else latency_ms  # the validator names a bad value


def parse_json(path: Path, rel: str, commit: str) -> ParseResult:
    """One `cnn_benchmark.lua` output: a forward row and a forward+backward row."""
    result = ParseResult(n_read=2)
    keys = {mode: f"{mode}" for mode in _PASSES}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        opt = record["opt"]
        stem = Path(opt["model_t7"]).stem
        name = MODEL_NAMES[stem]
        variant_base = _cudnn_label(record["cudnn_version"])
        batch, height, width = int(opt["batch_size"]), int(opt["image_height"]), int(opt["image_width"])
        gpu_name = str(record["gpu_name"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        reason = f"unreadable benchmark output: {type(exc).__name__}: {exc}"
        raw = path.read_text(encoding="utf-8", errors="replace")[:2000]
        result.quarantine.extend(quarantined(SOURCE, rel, keys[m], reason, raw) for m in _PASSES)
        return result
    for mode, fields in _PASSES.items():
        problem = _times_problem(record, fields)
        if problem is None and (batch, height, width) != (16, 224, 224):
            problem = f"batch {batch} at {height}x{width}: only batch 16 at 224x224 is documented"
        if problem:
            result.quarantine.append(quarantined(SOURCE, rel, keys[mode], problem, record))
            continue
        passes = [sum(float(record[f][i]) for f in fields) * 1000.0 for i in range(len(record[fields[0]]))]
        q1, _, q3 = statistics.quantiles(passes, n=4)
        note = FORWARD_NOTE if mode == "inference" else STEP_NOTE
        result.rows.append(_row(rel, commit, keys[mode], gpu_name, name, mode, statistics.median(passes), "median",
                                q3 - q1, len(passes), f"{variant_base}; {note}", record))
    return result


def _times_problem(record: dict, fields: tuple[str, ...]) -> str | None:
    lengths = {len(record[f]) if isinstance(record.get(f), list) else -1 for f in fields}
    if len(lengths) != 1 or lengths.pop() < 2:
        return f"per-pass times {fields} missing or of unequal length"
    for f in fields:
        for value in record[f]:
            number = to_float(value)
            if number is None or number <= 0:
                return f"non-positive or non-numeric time in {f}: {value!r}"
    return None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_history_readme(path: Path, rel: str, commit: str) -> ParseResult:
    """The 2016-07-13 README's per-network tables; K40c and CPU rows kept, JSON-summarised GPUs quarantined."""
    result = ParseResult()
    section = None
    lines = path.read_text(encoding="utf-8").splitlines()
    for line_no, line in enumerate(lines, start=1):
        heading = re.match(r"^###\s+(.+?)\s*$", line)
        if heading:
            section = heading.group(1) if heading.group(1) in MODEL_NAMES else None
            continue
        if section is None or not line.strip().startswith("|"):
            continue
        cells = _cells(line)
        if cells[0] == "GPU":
            if cells != TABLE_HEADER:
                raise MarkdownTableError(f"{rel}:{line_no}: unexpected table header {cells}; expected {TABLE_HEADER}")
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        result.extend(_history_row(rel, commit, line_no, cells, section))
    return result


def _history_row(rel: str, commit: str, line_no: int, cells: list[str], section: str) -> ParseResult:
    result = ParseResult(n_read=2)
    keys = {"inference": f"line {line_no}:forward", "training": f"line {line_no}:total"}
    if len(cells) != len(TABLE_HEADER):
        reason = f"truncated row: {len(cells)} of {len(TABLE_HEADER)} cells"
        result.quarantine.extend(quarantined(SOURCE, rel, k, reason, cells) for k in keys.values())
        return result
    label = re.match(r"^(.*?)\s*(?:\((cuDNN \d+|nn)\))?$", cells[0])
    device_raw, software = label.group(1), label.group(2) or ""
    if device_raw in SUMMARISED_IN_OUTPUTS:
        reason = "summary of a run that outputs/ holds as JSON (re-run there; ingested from the JSON)"
        result.quarantine.extend(quarantined(SOURCE, rel, k, reason, cells) for k in keys.values())
        return result
    variant_base = "nn" if software == "nn" else _cudnn_label(software.split()[-1]) if software else ""
    for mode, col in (("inference", 1), ("training", 3)):
        value = to_float(cells[col])
        if value is None or value <= 0:
            reason = f"non-numeric or non-positive {TABLE_HEADER[col]}: {cells[col]!r}"
            result.quarantine.append(quarantined(SOURCE, rel, keys[mode], reason, cells))
            continue
        note = FORWARD_NOTE if mode == "inference" else STEP_NOTE
        variant = f"{variant_base}; {note}" if variant_base else note
        result.rows.append(_row(rel, commit, keys[mode], device_raw, MODEL_NAMES[section], mode, value, "mean",
                                None, 10, variant, cells))
    return result


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Every JSON output and the old README's tables (`files`: mirror-relative path -> local path)."""
    result = ParseResult()
    for rel in sorted(r for r in files if r.startswith(f"{MIRROR_DIR}/outputs/") and r.endswith(".json")):
        result.extend(parse_json(files[rel], rel, commits.get(rel, "")))
    if HISTORY_README not in files:
        raise FileNotFoundError(f"{HISTORY_README}: listed in the manifest's source but absent from the files given")
    result.extend(parse_history_readme(files[HISTORY_README], HISTORY_README, commits.get(HISTORY_README, "")))
    return result
