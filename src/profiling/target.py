"""The profiled process: build one configuration, warm it up, run one marked step (and optionally trace it).

`python -m src.profiling _target ...` is what ncu launches (and what `run --keep-ptx` launches for Triton PTX).
The step that counts is wrapped in the NVTX push/pop range `cnnperf_step`, so `ncu --nvtx-include
cnnperf_step/` profiles exactly one inference (or training) step after warm-up and compilation.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from src.profiling.environment import describe_device
from src.profiling.harness import RunConfig, prepare
from src.profiling.models import resolve_model
from src.profiling.ncu import NVTX_RANGE


def run_target(cfg: RunConfig, device: str, warmup: int, info_out: Path | None = None,
               trace_out: Path | None = None, compile_backend: str = "inductor",
               nvtx_range: str = NVTX_RANGE) -> dict[str, Any]:
    """Run warm-up steps then one step inside the NVTX range; return (and write) what ran where."""
    t0 = time.perf_counter()
    info = describe_device(device)
    resolved = resolve_model(cfg.model)
    prepared = prepare(resolved, cfg, info.device, compile_backend=compile_backend)
    is_cuda = not info.is_cpu
    sync = torch.cuda.synchronize if is_cuda else (lambda: None)
    t1 = time.perf_counter()
    for _ in range(warmup):
        prepared.step()
    sync()
    t2 = time.perf_counter()
    if is_cuda:
        torch.cuda.nvtx.range_push(nvtx_range)
    prepared.step()
    sync()
    if is_cuda:
        torch.cuda.nvtx.range_pop()
    t3 = time.perf_counter()
    if trace_out is not None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda else [])
        with profile(activities=activities) as prof:
            prepared.step()
            sync()
        trace_out.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_out))
    result = {
        "device": dataclasses.asdict(info),
        "model": {"name": resolved.name, "model_source": resolved.model_source, "family": resolved.family,
                  "model_key": resolved.key, "img_size": prepared.img_size,
                  "memory_layout": prepared.memory_layout, "param_count_m": prepared.param_count_m},
        "config": dataclasses.asdict(cfg),
        "warmup_iters": warmup,
        "build_s": t1 - t0, "warmup_s": t2 - t1, "step_s": t3 - t2,
    }
    if info_out is not None:
        info_out.parent.mkdir(parents=True, exist_ok=True)
        info_out.write_text(json.dumps(result, indent=2, default=str))
    return result
