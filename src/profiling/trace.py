"""What a torch.profiler Chrome trace of one step says about the kernels a runtime launched.

`python -m src.profiling _target ... --trace-out T.json --info-out T.info.json` writes, for one configuration,
the trace of one step after warm-up (and compilation). The fusion rules of `src.features.kernels` predict how
many kernels each runtime runs per step (eager: about one per operator; torch.compile: pointwise chains fused
into the producer's epilogue or into one Triton kernel); this module reads the count that really ran.

A trace that is not a torch.profiler Chrome trace, or an info file that does not name its configuration, is a
TraceError naming the file: nothing is counted as zero silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

# Library kernels whose names say they are convolution or matrix work (cuDNN, cuBLAS incl. Hopper's nvjet,
# CUTLASS). Triton kernels are named by Inductor after the operators they fuse ("triton_poi_fused_convolution_2"
# is a pointwise kernel), so only its templates (`triton_tem_`) count as matrix work.
_MAC_KERNEL = re.compile(r"conv|gemm|gemv|xmma|cutlass|nvjet|winograd|fft|wgrad|dgrad|bmm", re.IGNORECASE)
_NOT_MAC = re.compile(r"init_device_workspace|ToNhwc|ToNchw", re.IGNORECASE)
# cuDNN's layout transforms around an NHWC convolution engine fed NCHW tensors: launches no fusion rule predicts.
_LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)
_LAUNCH_CALL = re.compile(r"LaunchKernel|cuLaunch|GraphLaunch", re.IGNORECASE)
TRACE_COLUMNS = ["trace", "model", "model_key", "family", "precision", "memory_layout", "compile_mode", "mode",
                 "batch_size", "img_size", "gpu", "kernels", "mac_kernels", "triton_kernels", "layout_kernels",
                 "other_kernels",
                 "kernel_us", "mac_kernel_us", "span_us", "launch_calls", "graph_launches", "memcpy", "memset",
                 "compile_warmup_s"]


class TraceError(ValueError):
    """A trace or info file that cannot be read as one profiled step."""


def read_events(path: Path) -> list[dict[str, Any]]:
    """The `traceEvents` of a Chrome trace file, checked to be a list of event objects."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a readable JSON trace ({exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceError(f"{path}: no 'traceEvents' list of objects (not a torch.profiler Chrome trace)")
    return events


def kernel_kind(name: str) -> str:
    """mac (library convolution / GEMM or a Triton matmul template), layout (cuDNN NCHW<->NHWC transform),
    triton (an Inductor-generated pointwise or reduction kernel) or other (ATen and cuDNN elementwise, norm,
    pooling, reduction kernels)."""
    if name.startswith("triton_"):
        return "mac" if name.startswith("triton_tem_") else "triton"
    if _LAYOUT_KERNEL.search(name):
        return "layout"
    if _MAC_KERNEL.search(name) and not _NOT_MAC.search(name):
        return "mac"
    return "other"


def summarize_events(events: Iterable[dict[str, Any]], where: str = "trace") -> dict[str, float]:
    """Kernel and launch counts of one step: device kernels by class, their summed and spanned time (us)."""
    kernels: list[tuple[str, float, float]] = []
    launches = graph_launches = memcpy = memset = 0
    for i, ev in enumerate(events):
        cat = str(ev.get("cat", ""))
        if ev.get("ph") != "X":
            continue
        name = str(ev.get("name", ""))
        if cat == "kernel":
            try:
                ts, dur = float(ev["ts"]), float(ev["dur"])
            except (KeyError, TypeError, ValueError):
                raise TraceError(f"{where}: kernel event {i} ({name[:60]!r}) has no numeric ts/dur") from None
            if dur < 0:
                raise TraceError(f"{where}: kernel event {i} ({name[:60]!r}) has negative duration {dur}")
            kernels.append((name, ts, dur))
        elif cat == "gpu_memcpy":
            memcpy += 1
        elif cat == "gpu_memset":
            memset += 1
        elif cat in ("cuda_runtime", "cuda_driver") and _LAUNCH_CALL.search(name):
            launches += 1
            graph_launches += "GraphLaunch" in name
    kind = [kernel_kind(name) for name, _, _ in kernels]
    mac = [k for k, c in zip(kernels, kind, strict=True) if c == "mac"]
    span = (max(ts + dur for _, ts, dur in kernels) - min(ts for _, ts, _ in kernels)) if kernels else 0.0
    return {"kernels": len(kernels), "mac_kernels": len(mac), "triton_kernels": kind.count("triton"),
            "layout_kernels": kind.count("layout"), "other_kernels": kind.count("other"),
            "kernel_us": sum(d for _, _, d in kernels), "mac_kernel_us": sum(d for _, _, d in mac),
            "span_us": span, "launch_calls": launches, "graph_launches": graph_launches,
            "memcpy": memcpy, "memset": memset}


def _info(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text())
        model, cfg = info["model"], info["config"]
        return {"model": model["name"], "model_key": model["model_key"], "family": model["family"],
                "precision": cfg["precision"], "memory_layout": model["memory_layout"],
                "compile_mode": cfg["compile_mode"], "mode": cfg["mode"], "batch_size": int(cfg["batch_size"]),
                "img_size": int(model["img_size"]), "gpu": info["device"]["gpu"],
                "compile_warmup_s": float(info["warmup_s"])}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{path}: not a `_target --info-out` file ({type(exc).__name__}: {exc})") from None


def summarize_traces(folder: Path) -> pd.DataFrame:
    """One row per `<slug>.json` trace in `folder` that has its `<slug>.info.json` beside it.

    A trace without its info file (or the reverse) is a TraceError: a step we cannot name is not counted.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError(f"{folder}: no such folder of traces")
    traces = sorted(p for p in folder.glob("*.json") if not p.name.endswith(".info.json"))
    infos = {p.name[: -len(".info.json")] for p in folder.glob("*.info.json")}
    unpaired = sorted({p.stem for p in traces} ^ infos)
    if unpaired:
        raise TraceError(f"{folder}: trace and info files do not pair up for {unpaired[:5]}")
    if not traces:
        raise TraceError(f"{folder}: no <slug>.json traces")
    rows = []
    for trace in traces:
        row = {"trace": trace.name, **_info(trace.with_name(trace.stem + ".info.json"))}
        row.update(summarize_events(read_events(trace), where=str(trace)))
        rows.append(row)
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)
