"""Time one (model, batch, precision, layout, compile, mode) configuration and turn it into an own row.

The random input batch is created on the device once, before timing (host-to-device copies are not timed).
Inference steps run under torch.inference_mode(); training steps are zero_grad + forward + cross-entropy +
backward + SGD step. Precisions: fp32, fp16 / bf16 / fp64 (model and input cast), amp_fp16 / amp_bf16
(torch.autocast around the forward). Layout nhwc = channels_last for model and input.
Compile modes: eager; torch_compile (Inductor, compiled during warm-up); cuda_graphs (inference only: the eager
forward captured once into a CUDA graph after cuDNN picked its algorithms, and each timed step replays it, so the
same kernels run without the framework's per-operator dispatch: the launch cost that batch-1 deployments shed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from src.ingest.models import is_cnn
from src.profiling.environment import ClockSampler, DeviceInfo
from src.profiling.models import ResolvedModel
from src.profiling.schema import COMPILE_MODES, LAYOUTS, MODES, PRECISIONS
from src.profiling.timing import CudaEventTimer, PerfCounterTimer, Timer, measure, summarize

# Precisions this harness can run (fp64 is in the schema for other sources; it is valid here too).
_CAST = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}
_AUTOCAST = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}
HARNESS_COMPILE_MODES = ("eager", "torch_compile", "cuda_graphs")


@dataclass(frozen=True)
class RunConfig:
    """One configuration to measure; `img_size=None` takes the model's default resolution."""

    model: str
    batch_size: int
    precision: str = "fp32"
    memory_layout: str = "nchw"
    compile_mode: str = "eager"
    mode: str = "inference"
    img_size: int | None = None

    def __post_init__(self) -> None:
        checks = [("precision", self.precision, PRECISIONS), ("memory_layout", self.memory_layout, LAYOUTS),
                  ("compile_mode", self.compile_mode, HARNESS_COMPILE_MODES), ("mode", self.mode, MODES)]
        for field_name, value, allowed in checks:
            if value not in allowed:
                raise ValueError(f"{field_name}={value!r} is not one of {list(allowed)}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.img_size is not None and self.img_size < 1:
            raise ValueError(f"img_size must be >= 1, got {self.img_size}")
        if self.compile_mode == "cuda_graphs" and self.mode != "inference":
            raise ValueError("compile_mode='cuda_graphs' times inference only (mode=training asked)")
        assert set(HARNESS_COMPILE_MODES) <= set(COMPILE_MODES)

    def key(self, img_size: int, model: str | None = None) -> str:
        return (f"{model or self.model}|{self.precision}|{self.memory_layout}|{self.compile_mode}|{self.mode}"
                f"|bs{self.batch_size}|img{img_size}")


@dataclass
class Prepared:
    """A ready-to-time step and what it is made of."""

    step: Callable[[], Any]
    module: torch.nn.Module
    img_size: int
    memory_layout: str
    param_count_m: float
    build_s: float


def _first_tensor(out: Any) -> torch.Tensor:
    """Models return a tensor, a tuple (inception aux logits) or a namedtuple: the logits come first."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise TypeError(f"model output of type {type(out).__name__} has no logits tensor")


def make_input(resolved: ResolvedModel, batch: int, img: int, device: str, layout: str,
               dtype: torch.dtype) -> torch.Tensor:
    shape = (batch, img, img, 3) if resolved.channels_last_input else (batch, 3, img, img)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    if layout == "nhwc" and not resolved.channels_last_input:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def prepare(resolved: ResolvedModel, cfg: RunConfig, device: str,
            compile_backend: str | Callable[..., Any] = "inductor") -> Prepared:
    """Build the model on `device` in the configured precision/layout/compile mode and return its step
    (`compile_backend`: torch.compile's backend, a name or a callable, for torch_compile)."""
    if cfg.mode == "training" and not resolved.supports_training:
        raise ValueError(f"{resolved.model_source}:{resolved.name} can only run inference (mode=training asked)")
    if cfg.compile_mode == "cuda_graphs" and torch.device(device).type != "cuda":
        raise ValueError(f"compile_mode='cuda_graphs' needs a CUDA device, got {device!r}")
    t0 = time.perf_counter()
    if torch.device(device).type == "cuda":
        torch.backends.cudnn.benchmark = True  # like timm and ryujaehun: cuDNN picks algorithms during warm-up
    img = cfg.img_size or resolved.img_size
    # Keras models take NHWC input whatever we ask for: record the layout actually used.
    layout = "nhwc" if resolved.channels_last_input else cfg.memory_layout
    module: torch.nn.Module = resolved.build()
    param_count_m = sum(p.numel() for p in module.parameters()) / 1e6
    module = module.to(device)
    dtype = _CAST.get(cfg.precision, torch.float32)
    if cfg.precision in _CAST:
        module = module.to(dtype)
    if layout == "nhwc" and not resolved.channels_last_input:
        module = module.to(memory_format=torch.channels_last)
    module.train(cfg.mode == "training")
    x = make_input(resolved, cfg.batch_size, img, device, layout, dtype)
    runner: Callable[[torch.Tensor], Any] = module
    if cfg.compile_mode == "torch_compile":
        runner = torch.compile(module, backend=compile_backend)
    device_type = torch.device(device).type
    amp_dtype = _AUTOCAST.get(cfg.precision)

    def autocast(cache_enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=amp_dtype, cache_enabled=cache_enabled)

    if cfg.compile_mode == "cuda_graphs":
        step = _graph_step(module, x, autocast)
    elif cfg.mode == "inference":

        def step() -> Any:
            with torch.inference_mode(), autocast():
                return runner(x)

    else:
        gen = torch.Generator(device="cpu").manual_seed(1)
        with torch.no_grad(), autocast():  # eager module: no compilation under no_grad
            n_classes = _first_tensor(module(x)).shape[-1]
        target = torch.randint(0, n_classes, (cfg.batch_size,), generator=gen).to(device)
        optimizer = torch.optim.SGD(module.parameters(), lr=1e-4, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                logits = _first_tensor(runner(x))
            loss = loss_fn(logits.float(), target)
            loss.backward()
            optimizer.step()
            return loss

    return Prepared(step=step, module=module, img_size=img, memory_layout=layout,
                    param_count_m=param_count_m, build_s=time.perf_counter() - t0)


def _graph_step(module: torch.nn.Module, x: torch.Tensor,
                autocast: Callable[[bool], contextlib.AbstractContextManager[Any]],
                warmup: int = 3) -> Callable[[], Any]:
    """Capture one inference forward into a CUDA graph; the step replays it on the same static input.

    Warm-up runs on a side stream first (PyTorch's capture recipe), so cuDNN's benchmark mode has chosen its
    algorithms before capture; autocast's weight cache is off inside capture, as PyTorch requires.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode(), autocast(False):
        for _ in range(warmup):
            module(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), autocast(False), torch.cuda.graph(graph):
        out = module(x)

    def step() -> Any:
        graph.replay()
        return out

    step.graph = graph  # type: ignore[attr-defined]  # keeps the graph (and its memory pool) alive with the step
    return step


def count_gmacs(resolved: ResolvedModel, img: int) -> float:
    """GMACs per image (conv/linear/matmul FLOPs / 2) from torch's FlopCounterMode, batch 1, fp32, on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    module = resolved.build().eval()
    x = make_input(resolved, 1, img, "cpu", "nchw", torch.float32)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        module(x)
    return counter.get_total_flops() / 2 / 1e9


def make_timer(info: DeviceInfo) -> Timer:
    if info.is_cpu:
        return PerfCounterTimer()
    return CudaEventTimer()


def _release(info: DeviceInfo, compiled: bool) -> None:
    if compiled:
        torch._dynamo.reset()
    if not info.is_cpu:
        torch.cuda.empty_cache()


def run_config(resolved: ResolvedModel, cfg: RunConfig, info: DeviceInfo, *, warmup: int, iters: int,
               run_id: str, source_file: str, upstream_commit: str = "", compile_backend: str = "inductor",
               with_gmacs: bool = True, timer: Timer | None = None) -> dict[str, Any]:
    """Measure one configuration and return its row (OWN_COLUMNS); profiling_wall_s excludes the GMAC count."""
    t_start = time.perf_counter()
    prepared = prepare(resolved, cfg, info.device, compile_backend=compile_backend)
    img, layout = prepared.img_size, prepared.memory_layout
    param_count_m, build_s = prepared.param_count_m, prepared.build_s
    timer = timer or make_timer(info)
    try:
        t_warm = time.perf_counter()
        for _ in range(warmup):
            prepared.step()
        timer.sync()
        warmup_s = time.perf_counter() - t_warm
        with ClockSampler(info) as clocks:
            result = measure(prepared.step, timer, warmup=0, iters=iters)
        stats = summarize(result.samples_ms)
    finally:
        del prepared  # drop model, input and optimizer before releasing device memory
        _release(info, cfg.compile_mode == "torch_compile")
    wall_s = time.perf_counter() - t_start
    gmacs = count_gmacs(resolved, img) if with_gmacs else float("nan")
    clock = clocks.stats()
    actual = RunConfig(model=cfg.model, batch_size=cfg.batch_size, precision=cfg.precision,
                       memory_layout=layout, compile_mode=cfg.compile_mode, mode=cfg.mode, img_size=img)
    return {
        "measurement_id": f"own:{source_file}:{actual.key(img, f'{resolved.model_source}:{resolved.name}')}",
        "source": "own",
        "source_file": source_file,
        "upstream_commit": upstream_commit,
        "gpu": info.gpu,
        "device_raw": info.device_raw,
        "is_cpu": info.is_cpu,
        "num_gpus": 1,
        "framework": "pytorch",
        "framework_version": info.framework_version,
        "cuda_version": info.cuda_version,
        "precision": cfg.precision,
        "memory_layout": layout,
        "compile_mode": cfg.compile_mode,
        "data_mode": "synthetic",
        "variant": "" if cfg.compile_mode == "eager" or compile_backend == "inductor" else f"backend={compile_backend}",
        "model": resolved.name,
        "model_key": resolved.key,
        "model_source": resolved.model_source,
        "family": resolved.family,
        "is_cnn": is_cnn(resolved.family),
        "img_size": img,
        "batch_size": cfg.batch_size,
        "mode": cfg.mode,
        "latency_ms": stats.median_ms,
        "throughput": cfg.batch_size / (stats.median_ms / 1000.0),
        "latency_stat": "median",
        "latency_spread_ms": stats.iqr_ms,
        "n_samples": stats.n,
        "param_count_m": param_count_m,
        "gmacs": gmacs,
        "activations_m": float("nan"),
        "scenario": "",
        "source_rows": 1,
        "run_id": run_id,
        "measured_at_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "driver_version": info.driver_version,
        "cudnn_version": info.cudnn_version,
        "compute_capability": info.compute_capability,
        "gpu_memory_gb": info.gpu_memory_gb,
        "sm_clock_mhz_min": clock.sm_min,
        "sm_clock_mhz_median": clock.sm_median,
        "sm_clock_mhz_max": clock.sm_max,
        "mem_clock_mhz_median": clock.mem_median,
        "clock_samples": clock.samples,
        "clock_source": clock.source,
        "timer": timer.name,
        "warmup_iters": warmup,
        "latency_mean_ms": stats.mean_ms,
        "latency_min_ms": stats.min_ms,
        "latency_max_ms": stats.max_ms,
        "build_s": build_s,
        "warmup_s": warmup_s,
        "timed_s": result.timed_s,
        "profiling_wall_s": wall_s,
    }
