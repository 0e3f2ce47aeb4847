"""nicklhy/DLInfBench: one-line result files `framework network [dtype] batch images_per_sec gpu_memory_MB`.

Throughput only; latency is derived as batch / throughput. The timed region includes the host-to-device copy
of the batch. Environment (driver, CUDA, framework versions) comes from each GPU's RESULT_*.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..gpus import resolve_device
from ..models import model_key
from ..records import ParseResult, quarantined, workload

SOURCE = "dlinfbench"
RESULT_FILES = {
    "gtx_1080": "RESULT_GTX1080.md",
    "gtx_1080_ti": "RESULT_GTX1080Ti.md",
    "titan_x_pascal": "RESULT_TitanXP.md",
    "titan_v": "RESULT_TitanV.md",
    "tesla_v100": "RESULT_TeslaV100.md",
    "rtx2080ti": "RESULT_RTX2080Ti.md",
}
DTYPES = {"float32": "fp32", "float16": "fp16"}
_FRAMEWORK_LINES = {
    "pytorch": r"PyTorch version",
    "tensorflow": r"Tensorflow version|TensorFlow",
    "mxnet": r"MXNet (?:Version|GitHub hash)",
    "caffe": r"Caffe GitHub (?:hash|commit)",
    "caffe2": r"Caffe2 GitHub hash",
}


def environment(result_md: str) -> dict[str, str]:
    """GPU string, CUDA version and framework versions from a RESULT_*.md text."""
    env: dict[str, str] = {}
    for line in result_md.splitlines():
        m = re.match(r"\*\s*([^:]+):\s*(.+)$", line.strip())
        if not m:
            continue
        label, value = m.group(1).strip(), m.group(2).strip()
        short = re.match(r"\[([0-9a-f]+)\]", value)
        value = f"git {short.group(1)}" if short else value
        if label == "GPU":
            env["gpu"] = value
        elif label == "CUDA":
            env["cuda"] = ".".join(value.split(".")[:2])
        for framework, pattern in _FRAMEWORK_LINES.items():
            if re.fullmatch(pattern, label):
                env[framework] = value
    return env


def parse_folder(items: list[tuple[str, Path]], rel_folder: str, commit: str, env: dict[str, str]) -> ParseResult:
    """Parse every result file (mirror-relative path, local path) of one GPU folder."""
    result = ParseResult()
    device = resolve_device(env["gpu"], where=rel_folder)
    for rel, path in sorted(items):
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        if not lines:
            result.n_read += 1
            result.quarantine.append(quarantined(SOURCE, rel, "line 1", "empty result file", ""))
            continue
        for line_no, line in enumerate(lines, start=1):
            result.n_read += 1
            fields = line.split()
            key = f"line {line_no}"
            if len(fields) == 6:
                framework, network, dtype, batch, speed, _memory = fields
            elif len(fields) == 5:
                framework, network, batch, speed, _memory = fields
                dtype = "float32"
            else:
                reason = f"expected 5 or 6 fields, got {len(fields)}"
                result.quarantine.append(quarantined(SOURCE, rel, key, reason, line))
                continue
            if dtype not in DTYPES:
                result.quarantine.append(quarantined(SOURCE, rel, key, f"unknown dtype {dtype!r}", line))
                continue
            result.rows.append(
                {
                    "measurement_id": f"{SOURCE}:{rel}:{line_no}",
                    "source": SOURCE,
                    "source_file": rel,
                    "upstream_commit": commit,
                    "gpu": device.gpu,
                    "device_raw": env["gpu"],
                    "is_cpu": device.is_cpu,
                    "num_gpus": 1,
                    "framework": framework,
                    "framework_version": env.get(framework, ""),
                    "cuda_version": env.get("cuda", ""),
                    "precision": DTYPES[dtype],
                    "memory_layout": "nhwc" if framework == "tensorflow" else "nchw",
                    "compile_mode": "eager",
                    **workload(network, "dlinfbench"),
                    "img_size": 299 if "inception_v3" in model_key(network) else 224,
                    "batch_size": batch,
                    "mode": "inference",
                    "latency_ms": None,
                    "throughput": speed,
                    "latency_stat": "from_throughput",
                    "latency_spread_ms": None,
                    "n_samples": None,
                    "param_count_m": None,
                    "gmacs": None,
                    "activations_m": None,
                    "_raw": line,
                    "_row_key": key,
                }
            )
    return result


def parse(files: dict[str, Path], commit: str) -> ParseResult:
    """Parse the DLInfBench mirror (`files`: mirror-relative path -> resolved local path)."""
    result = ParseResult()
    for folder_name, md_name in RESULT_FILES.items():
        md = files.get(f"nicklhy-DLInfBench/{md_name}")
        if md is None:
            raise FileNotFoundError(f"nicklhy-DLInfBench/{md_name} is not in the manifest")
        env = environment(md.read_text(encoding="utf-8"))
        folder_rel = f"nicklhy-DLInfBench/results/{folder_name}"
        items = [(rel, p) for rel, p in files.items() if rel.startswith(folder_rel + "/") and rel.endswith(".txt")]
        result.extend(parse_folder(items, folder_rel, commit, env))
    return result
