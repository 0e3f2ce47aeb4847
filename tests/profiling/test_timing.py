"""Timing protocol on the CPU timer: warm-up excluded, one sample per timed step, sync around each step."""

from __future__ import annotations

import math
import time

import pytest
import torch

from src.profiling.timing import CudaEventTimer, PerfCounterTimer, measure, summarize


def test_measure_times_only_the_timed_steps_and_syncs_around_each():
    calls: list[str] = []
    timer = PerfCounterTimer(sync=lambda: calls.append("sync"))

    def step() -> None:
        calls.append("step")
        time.sleep(0.002)

    result = measure(step, timer, warmup=3, iters=5)
    # warm-up steps back to back, one sync, then per timed step: sync, step, sync (inside stop)
    assert calls == ["step"] * 3 + ["sync"] + ["sync", "step", "sync"] * 5
    assert len(result.samples_ms) == 5 and result.warmup_iters == 3
    assert all(2.0 <= s < 200.0 for s in result.samples_ms)  # each sample covers one 2 ms step
    assert result.warmup_s >= 0.006 and result.timed_s >= 0.010


def test_measure_rejects_bad_counts():
    timer = PerfCounterTimer()
    with pytest.raises(ValueError, match="iters must be >= 1"):
        measure(lambda: None, timer, warmup=0, iters=0)
    with pytest.raises(ValueError, match="warmup must be >= 0"):
        measure(lambda: None, timer, warmup=-1, iters=1)


def test_stop_before_start_is_an_error():
    with pytest.raises(RuntimeError, match="before start"):
        PerfCounterTimer().stop()


def test_summarize_median_iqr_and_extremes():
    s = summarize([4.0, 1.0, 100.0, 3.0, 2.0])
    assert s.median_ms == 3.0
    assert s.iqr_ms == pytest.approx(2.0)  # q75 = 4, q25 = 2 (linear interpolation, numpy's default)
    assert s.mean_ms == pytest.approx(22.0)
    assert (s.min_ms, s.max_ms, s.n) == (1.0, 100.0, 5)
    even = summarize([1.0, 2.0, 3.0, 4.0])
    assert even.median_ms == 2.5 and even.iqr_ms == pytest.approx(1.5)


def test_summarize_rejects_empty_and_invalid_samples():
    with pytest.raises(ValueError, match="no timing samples"):
        summarize([])
    with pytest.raises(ValueError, match="invalid timing samples"):
        summarize([1.0, math.nan])
    with pytest.raises(ValueError, match="invalid timing samples"):
        summarize([1.0, -0.5])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error path on machines without a GPU")
def test_cuda_event_timer_needs_a_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        CudaEventTimer()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_event_timer_on_a_gpu():
    x = torch.randn(1024, 1024, device="cuda")
    result = measure(lambda: x @ x, CudaEventTimer(), warmup=2, iters=5)
    assert len(result.samples_ms) == 5 and all(s > 0 for s in result.samples_ms)
