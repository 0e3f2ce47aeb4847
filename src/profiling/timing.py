"""Step timing over an abstract timer: CUDA events on a GPU, perf_counter_ns on the CPU.

Protocol (same for both timers): `warmup` untimed steps, then `iters` timed steps. Before every timed step the
device is synchronised (no work of an earlier step can leak into the sample), the timer starts, the step is
issued, and the timer stops. CUDA-event samples are read after one final synchronisation. We report the median
and inter-quartile range of the kept samples, like the schema asks for per-iteration sources.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Timer(Protocol):
    """Times one step at a time; `samples_ms` is valid after the last `stop`."""

    name: str

    def sync(self) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def samples_ms(self) -> list[float]: ...


class PerfCounterTimer:
    """Host wall clock around each step; `sync` is whatever makes the device idle (a no-op on the CPU)."""

    name = "perf_counter"

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self._sync = sync or (lambda: None)
        self._t0: int | None = None
        self._samples: list[float] = []

    def sync(self) -> None:
        self._sync()

    def start(self) -> None:
        self._t0 = time.perf_counter_ns()

    def stop(self) -> None:
        self._sync()
        if self._t0 is None:
            raise RuntimeError("PerfCounterTimer.stop() called before start()")
        self._samples.append((time.perf_counter_ns() - self._t0) / 1e6)
        self._t0 = None

    def samples_ms(self) -> list[float]:
        return list(self._samples)


class CudaEventTimer:
    """CUDA events recorded on the current stream around each step: GPU-side time, no host clock involved."""

    name = "cuda_event"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("CudaEventTimer needs a CUDA device (torch.cuda.is_available() is False)")
        self._torch = torch
        self._pairs: list[tuple[object, object]] = []
        self._start: object | None = None

    def sync(self) -> None:
        self._torch.cuda.synchronize()

    def start(self) -> None:
        self._start = self._torch.cuda.Event(enable_timing=True)
        self._start.record()  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self._start is None:
            raise RuntimeError("CudaEventTimer.stop() called before start()")
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        self._pairs.append((self._start, end))
        self._start = None

    def samples_ms(self) -> list[float]:
        self._torch.cuda.synchronize()
        return [float(s.elapsed_time(e)) for s, e in self._pairs]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Measurement:
    """Samples of one configuration and the wall time its phases took."""

    samples_ms: list[float]
    warmup_iters: int
    warmup_s: float
    timed_s: float


@dataclass(frozen=True)
class Summary:
    median_ms: float
    iqr_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    n: int


def measure(step: Callable[[], object], timer: Timer, warmup: int, iters: int,
            on_iter: Callable[[], None] | None = None) -> Measurement:
    """Run `warmup` untimed then `iters` timed steps (see the module docstring for the protocol)."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
        if on_iter:
            on_iter()
    timer.sync()
    t1 = time.perf_counter()
    for _ in range(iters):
        timer.sync()
        timer.start()
        step()
        timer.stop()
        if on_iter:
            on_iter()
    samples = timer.samples_ms()
    t2 = time.perf_counter()
    if len(samples) != iters:
        raise RuntimeError(f"timer returned {len(samples)} samples for {iters} timed iterations")
    return Measurement(samples_ms=samples, warmup_iters=warmup, warmup_s=t1 - t0, timed_s=t2 - t1)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default 'linear' method)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ms: list[float]) -> Summary:
    """Median, IQR (q75 - q25, linear interpolation), mean, min, max; rejects empty or non-finite samples."""
    if not samples_ms:
        raise ValueError("no timing samples to summarise")
    bad = [s for s in samples_ms if not math.isfinite(s) or s < 0]
    if bad:
        raise ValueError(f"invalid timing samples (non-finite or negative): {bad[:5]}")
    ordered = sorted(samples_ms)
    return Summary(
        median_ms=statistics.median(ordered),
        iqr_ms=_quantile(ordered, 0.75) - _quantile(ordered, 0.25),
        mean_ms=statistics.fmean(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        n=len(ordered),
    )
