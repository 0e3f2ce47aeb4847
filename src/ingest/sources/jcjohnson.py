"""jcjohnson/cnn-benchmarks: Torch7 forward and forward+backward times of 10 CNNs on Kepler/Maxwell/Pascal GPUs.

Method (cnn_benchmark.lua / utils.lua, SOURCE.md): Torch7, fp32 (`torch.CudaTensor`), model in training mode,
`cudnn.benchmark = true` with cuDNN; a new random batch per pass; forward and backward (`model:backward` with a
random gradOutput, no weight update) timed separately between `cutorch.synchronize()` calls; 11 passes, the
first discarded. One GPU per run (`num_gpus` 1, nothing to divide).

What is read, and how (every table row and every JSON file counts as two rows read: forward, forward + backward):
- `outputs/<run folder>/<id>.json`, the raw output of one run, is the measurement. It gives two rows: the forward
  pass (`mode` inference; the forward of a training-mode model, i.e. batch-norm with batch statistics, said in
  `variant`) and forward + backward (`mode` training; no optimizer step, said in `variant`). Statistic: the median
  of the 10 passes (`latency_stat` median, `n_samples` 10), spread their inter-quartile range. Batch and image size
  come from the record's `opt` (16 and 224x224 everywhere). `cudnn_version` "none" means Torch's own `nn` CUDA
  kernels without cuDNN. The kernel backend, the cuDNN release ("cudnn 5.1.05") or "nn", is the row's
  `framework_version` (Torch7 itself has no release in the outputs; the backend sets the speed: `nn` runs a median
  2.7x slower than cuDNN over 80 (GPU, CNN, mode) pairs, 1.8-3.8x) and starts its `variant`, so the backends of one
  CNN are distinct rows that a model can tell apart. Repeated runs of one configuration (folder 1080_cudnn50) are all
  kept: distinct runs.
- `README.md` (HEAD) and `history_93014cd7/README.md` (2016-07-13): per-network tables of the means of the same
  kind of runs (ms). A table row is matched to the JSON runs of its GPU, cuDNN release and model:
  * a JSON run whose means print as the row (`%.2f`, as the upstream analysis script prints them): the row is its
    summary, quarantined as "summary of JSON output: <json file>" (all HEAD README GPU rows);
  * JSON runs of that configuration exist but none has the row's values: the row is an earlier run that was
    re-measured (the old README's GTX 1080 / Maxwell TITAN X rows; the JSON files were committed in Aug 2016),
    quarantined as "superseded by a JSON re-run ...: <json files>" so the configuration is not ingested twice;
  * no JSON run of that configuration (the old README's Tesla K40c rows): ingested from the table, `latency_stat`
    mean (the README's number is the mean of the 10 passes), `n_samples` 10;
  * CPU rows ("CPU: Dual Xeon E5-2630 v3"): quarantined as a CPU-only system.
  Batch and image size come from the section's "(input 16 x 3 x 224 x 224)" line. The model overview and GPU spec
  tables of the README are not measurement tables and are not read. A per-network table whose header differs from
  the expected one, or a results table under a section heading that names no known model, stops the parse with an
  error naming file and line.

GPUs: `gpu_name` as CUDA reports it, resolved under a `jcjohnson ` prefix (the Pascal card reports plain "TITAN X";
a bare "titan x" alias would mislabel other sources' Maxwell Titan X). `cuda_version` "8.0": the README gives CUDA
8.0 (release candidate on the GTX 1080 / TITAN X / K40c machines, the 8.0 release on the GTX 1080 Ti machine).

Models are the Torch .t7 conversions, mapped to the torchvision/timm definitions we build: fb.resnet.torch
ResNet-18..152 = torchvision's layout (stride in the 3x3, projection shortcuts), VGG-16/19 = torchvision's;
approximations: BVLC AlexNet (two-group convs, LRN; torchvision's `alexnet` is the single-tower variant),
Inception-V1 from soumith/inception.torch (LRN, no batch norm; torchvision's `googlenet` has batch norm),
fb.resnet.torch ResNet-200 (pre-activation, "Identity Mappings"; timm's `resnet200` is post-activation, same convs).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from ..gpus import UnknownGPUError, resolve_device
from ..records import ParseResult, quarantined, to_float, workload

SOURCE = "jcjohnson"
MIRROR_DIR = "jcjohnson-cnn-benchmarks"
HEAD_README = f"{MIRROR_DIR}/README.md"
HISTORY_README = f"{MIRROR_DIR}/history_93014cd7/README.md"
CUDA_VERSION = "8.0"
N_PASSES = 10  # cnn_benchmark.lua's -num_passes default, used by every run (the README means are over them)
# `.t7` file stem -> (the torchvision/timm name we build, its model source).
MODELS: dict[str, tuple[str, str]] = {
    "alexnet": ("alexnet", "torchvision"), "googlenet-v1": ("googlenet", "torchvision"),
    "vgg16": ("vgg16", "torchvision"), "vgg19": ("vgg19", "torchvision"),
    "resnet-18": ("resnet18", "torchvision"), "resnet-34": ("resnet34", "torchvision"),
    "resnet-50": ("resnet50", "torchvision"), "resnet-101": ("resnet101", "torchvision"),
    "resnet-152": ("resnet152", "torchvision"), "resnet-200": ("resnet200", "timm"),
}
# README section heading -> `.t7` stem.
SECTIONS = {
    "AlexNet": "alexnet", "Inception-V1": "googlenet-v1", "VGG-16": "vgg16", "VGG-19": "vgg19",
    "ResNet-18": "resnet-18", "ResNet-34": "resnet-34", "ResNet-50": "resnet-50", "ResNet-101": "resnet-101",
    "ResNet-152": "resnet-152", "ResNet-200": "resnet-200",
}
HEAD_HEADER = ["GPU", "cuDNN", "Forward (ms)", "Backward (ms)", "Total (ms)"]
HISTORY_HEADER = ["GPU", "Forward (ms)", "Backward (ms)", "Total (ms)"]
# HEAD README GPU labels -> CUDA device name: the inverse of `gpu_name_map` in analyze_cnn_benchmark_results.py.
HEAD_GPU_LABELS = {
    "GTX 1080 Ti": "GeForce GTX 1080 Ti", "GTX 1080": "GeForce GTX 1080", "Pascal Titan X": "TITAN X",
    "Maxwell Titan X": "GeForce GTX TITAN X", "Tesla P100": "Tesla P100-SXM2-16GB",
}
MODES = {"inference": ("forward_times",), "training": ("forward_times", "backward_times")}
KEYS = {"inference": "forward", "training": "forward+backward"}
NOTES = {"inference": "forward only, of a training-mode model (batch-norm batch statistics)",
         "training": "forward + backward, no optimizer step"}
TIME_FIELDS = ("forward_times", "backward_times", "total_times")


class MarkdownTableError(ValueError):
    """A README table whose header is not the one this parser knows."""


def cudnn_label(version: str) -> str:
    """'5105' -> 'cudnn 5.1.05'; 'none' -> 'nn' (Torch's CUDA kernels without cuDNN)."""
    return "nn" if version == "none" else f"cudnn {version[0]}.{version[1]}.{version[2:]}"


def _cudnn_code(value: Any) -> str | None:
    """The JSON's `cudnn_version` as text ('5105', 'none'); None if unreadable."""
    text = str(value).strip()
    return text if text == "none" or re.fullmatch(r"\d{4}", text) else None


def _resolve(gpu_name: str, where: str) -> str:
    return resolve_device(f"{SOURCE} {gpu_name}", where=where).gpu


def _row(rel: str, commit: str, key: str, gpu_name: str, gpu: str, stem: str, mode: str, latency_ms: float,
         stat: str, spread: float | None, n: int, batch: int, img: int, cudnn: str, raw: Any) -> dict[str, Any]:
    name, model_source = MODELS[stem]
    return {
        "measurement_id": f"{SOURCE}:{rel}:{key}", "source": SOURCE, "source_file": rel, "upstream_commit": commit,
        "gpu": gpu, "device_raw": gpu_name, "is_cpu": False, "num_gpus": 1,
        "framework": "torch7", "framework_version": cudnn_label(cudnn), "cuda_version": CUDA_VERSION,
        "precision": "fp32", "memory_layout": "nchw", "compile_mode": "eager", "data_mode": "synthetic",
        "variant": f"{cudnn_label(cudnn)}; {NOTES[mode]}", "scenario": "", "source_rows": 1,
        **workload(name, model_source), "img_size": img, "batch_size": batch, "mode": mode,
        "latency_ms": latency_ms, "throughput": batch / latency_ms * 1000.0, "latency_stat": stat,
        "latency_spread_ms": spread, "n_samples": n,
        "param_count_m": None, "gmacs": None, "activations_m": None, "_raw": raw, "_row_key": key,
    }


def _times_problem(record: dict, fields: tuple[str, ...]) -> str | None:
    """Why the per-pass times `fields` cannot be read (None if they can)."""
    lists = [record.get(f) for f in fields]
    if not all(isinstance(v, list) for v in lists):
        return f"missing field {fields[[isinstance(v, list) for v in lists].index(False)]}"
    if len({len(v) for v in lists}) != 1 or len(lists[0]) < 2:
        return f"per-pass times {'/'.join(fields)} empty or of unequal length"
    for field, values in zip(fields, lists, strict=True):
        for value in values:
            number = to_float(value)
            if number is None or number <= 0:
                return f"non-positive or non-numeric time in {field}: {value!r}"
    return None


def _json_config(record: Any) -> tuple[str, str, str, int, int, int]:
    """(gpu_name, cudnn code, model stem, batch, height, width); KeyError/TypeError/ValueError when unreadable."""
    opt = record["opt"]
    stem = Path(str(opt["model_t7"])).stem
    if stem not in MODELS:
        raise ValueError(f"unknown model file {opt['model_t7']!r}")
    cudnn = _cudnn_code(record["cudnn_version"])
    if cudnn is None:
        raise ValueError(f"unreadable cudnn_version {record['cudnn_version']!r}")
    return (str(record["gpu_name"]), cudnn, stem, int(opt["batch_size"]), int(opt["image_height"]),
            int(opt["image_width"]))


def parse_json(path: Path, rel: str, commit: str) -> tuple[ParseResult, tuple | None]:
    """One `cnn_benchmark.lua` output: a forward row and a forward+backward row.

    Also returns (gpu_name, cudnn, stem, printed means) when the whole run was ingested, for the README matching.
    """
    result = ParseResult(n_read=len(MODES))
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        record = json.loads(text)
        gpu_name, cudnn, stem, batch, height, width = _json_config(record)
        use_cudnn, gpu_index = int(record["opt"]["use_cudnn"]), int(record["opt"].get("gpu", 0))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        reason = f"unreadable benchmark output: {type(exc).__name__}: {exc}"
        result.quarantine.extend(quarantined(SOURCE, rel, KEYS[m], reason, text[:2000]) for m in MODES)
        return result, None
    problem = None
    if gpu_name == "cpu" or gpu_index < 0:
        problem = "CPU-only system (gpu_name 'cpu'): not a GPU measurement"
    elif (use_cudnn == 1) != (cudnn != "none"):
        problem = f"use_cudnn={use_cudnn} disagrees with cudnn_version {record['cudnn_version']!r}"
    elif height != width:
        problem = f"non-square input {height}x{width}"
    gpu = None if problem else _resolve(gpu_name, rel)
    for mode, fields in MODES.items():
        reason = problem or _times_problem(record, fields)
        if reason:
            result.quarantine.append(quarantined(SOURCE, rel, KEYS[mode], reason, record))
            continue
        passes = [sum(float(record[f][i]) for f in fields) * 1000.0 for i in range(len(record[fields[0]]))]
        q1, _, q3 = statistics.quantiles(passes, n=4)
        result.rows.append(_row(rel, commit, KEYS[mode], gpu_name, gpu, stem, mode, statistics.median(passes),
                                "median", q3 - q1, len(passes), batch, height, cudnn, record))
    if result.quarantine or _times_problem(record, TIME_FIELDS):
        return result, None
    # As analyze_cnn_benchmark_results.py prints them: '%.2f' of the mean in ms.
    means = tuple(f"{sum(float(t) for t in record[f]) / len(record[f]) * 1000:.2f}" for f in TIME_FIELDS)
    return result, (gpu_name, cudnn, stem, means)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _head_label(cells: list[str], rel: str, line_no: int) -> tuple[str, str | None]:
    """HEAD README: (CUDA device name or the CPU label, cuDNN code or None if unreadable)."""
    label, cudnn_text = cells[0], cells[1]
    if label.lower().startswith("cpu"):
        return label, "none"
    if label not in HEAD_GPU_LABELS:
        raise UnknownGPUError(f"unknown GPU label {label!r} (in {rel}:{line_no}): add it to HEAD_GPU_LABELS "
                              f"in src/ingest/sources/jcjohnson.py with the CUDA device name it stands for")
    match = re.fullmatch(r"(\d)\.(\d)\.(\d\d)", cudnn_text)
    cudnn = "none" if cudnn_text == "None" else "".join(match.groups()) if match else None
    return HEAD_GPU_LABELS[label], cudnn


def _history_label(cells: list[str]) -> tuple[str, str | None]:
    """Old README: 'GeForce GTX 1080 (cuDNN 5005)' / 'Tesla K40c (nn)' -> (CUDA device name, cuDNN code)."""
    match = re.fullmatch(r"(.*?)\s*\((?:cuDNN (\d{4})|(nn))\)", cells[0])
    if cells[0].lower().startswith("cpu"):
        return cells[0], "none"
    if not match:
        return cells[0], None
    return match.group(1), match.group(2) or "none"


def parse_readme(path: Path, rel: str, commit: str, runs: list[tuple[str, str, str, tuple, str]],
                 header: list[str]) -> ParseResult:
    """One README's per-network tables, each row matched against the ingested JSON runs (module docstring)."""
    result = ParseResult()
    stem: str | None = None
    section = ""
    shape: tuple[int, int] | None = None
    previous_is_table = False
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        is_table = line.strip().startswith("|")
        heading = re.match(r"^#{2,3}\s+(.+?)\s*$", line)
        if heading:
            section = heading.group(1)
            stem, shape = SECTIONS.get(section), None
        if not stem and is_table and not previous_is_table and _cells(line) == header:
            raise MarkdownTableError(f"{rel}:{line_no}: results table under section {section!r}, which names no "
                                     f"known model: add it to SECTIONS")
        size = re.match(r"^\(input (\d+) x 3 x (\d+) x (\d+)\)", line.strip())
        if size and stem and size.group(2) == size.group(3):
            shape = int(size.group(1)), int(size.group(2))
        if stem and is_table:
            cells = _cells(line)
            if not previous_is_table:
                if cells != header:
                    raise MarkdownTableError(f"{rel}:{line_no}: unexpected table header {cells}; expected {header}")
            elif not all(set(c) <= set("-: ") for c in cells):
                result.extend(_readme_row(rel, commit, line_no, cells, stem, shape, runs, header))
        previous_is_table = is_table
    return result


def _readme_row(rel: str, commit: str, line_no: int, cells: list[str], stem: str, shape: tuple[int, int] | None,
                runs: list[tuple[str, str, str, tuple, str]], header: list[str]) -> ParseResult:
    result = ParseResult(n_read=len(MODES))
    keys = {mode: f"line {line_no}:{KEYS[mode]}" for mode in MODES}

    def reject(reason: str) -> ParseResult:
        result.quarantine.extend(quarantined(SOURCE, rel, keys[m], reason, cells) for m in MODES)
        return result

    if len(cells) != len(header):
        return reject(f"truncated row: {len(cells)} of {len(header)} cells")
    gpu_name, cudnn = _head_label(cells, rel, line_no) if header == HEAD_HEADER else _history_label(cells)
    if gpu_name.lower().startswith("cpu"):
        return reject(f"CPU-only system ({gpu_name}): not a GPU measurement")
    if cudnn is None:
        return reject(f"unreadable GPU / cuDNN label {' '.join(cells[: len(header) - 3])!r}")
    if shape is None:
        return reject("the section states no square input size (input N x 3 x H x W)")
    values = dict(zip(header[-3:], cells[-3:], strict=True))
    same_config = [(json_rel, means) for name, code, s, means, json_rel in runs
                   if (name, code, s) == (gpu_name, cudnn, stem)]
    numbers = [to_float(v) for v in values.values()]
    printed = tuple(f"{n:.2f}" for n in numbers) if None not in numbers else None
    summarised = [json_rel for json_rel, means in same_config if means == printed]
    if summarised:
        return reject(f"summary of JSON output: {', '.join(summarised)}")
    if same_config:
        return reject("superseded by a JSON re-run of this GPU, cuDNN and model (values differ; ingested from the "
                      f"JSON): {', '.join(r for r, _ in same_config)}")
    gpu = _resolve(gpu_name, f"{rel}:{line_no}")
    for mode, column in (("inference", "Forward (ms)"), ("training", "Total (ms)")):
        value = to_float(values[column])
        if value is None or value <= 0:
            reason = f"non-numeric or non-positive {column}: {values[column]!r}"
            result.quarantine.append(quarantined(SOURCE, rel, keys[mode], reason, cells))
            continue
        result.rows.append(_row(rel, commit, keys[mode], gpu_name, gpu, stem, mode, value, "mean", None,
                                N_PASSES, shape[0], shape[1], cudnn, cells))
    return result


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """Every JSON output, then both READMEs' tables (`files`: mirror-relative path -> local path)."""
    result = ParseResult()
    runs: list[tuple[str, str, str, tuple, str]] = []
    for rel in sorted(r for r in files if r.startswith(f"{MIRROR_DIR}/outputs/") and r.endswith(".json")):
        parsed, run = parse_json(files[rel], rel, commits.get(rel, ""))
        result.extend(parsed)
        if run:
            runs.append((*run, rel.removeprefix(f"{MIRROR_DIR}/")))
    for rel, header in ((HEAD_README, HEAD_HEADER), (HISTORY_README, HISTORY_HEADER)):
        if rel not in files:
            raise FileNotFoundError(f"{rel}: listed in the manifest's source but absent from the files given")
        result.extend(parse_readme(files[rel], rel, commits.get(rel, ""), runs, header))
    return result
