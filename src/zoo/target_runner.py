"""One target's static features and PTX counts at one compiled batch, cached; run in a worker under a time limit.

Why a cache: each (definition, input size, compiled batch) keeps its result under the cache folder
(`<cache>/<source>__<model>__<size>__b<batch>/result.json` or `failure.json`), so the `ptx` stage and `warm`
compute a CNN once. Why a worker: a stuck compile must not stall the stage.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

from src.zoo.failure_table import MISSING_EXTRA
from src.zoo.plausibility import module_fallback, recomputes_gates
from src.zoo.resolve import MissingFrameworkError
from src.zoo.targets import Target

# Shared by all models (and all stage shards): each distinct kernel's PTX and launch counts.
KERNELS_DIR = "kernels"


def work_dir(cache: Path, target: Target, batch: int) -> Path:
    """The cache folder of one target at one compiled batch (its result.json or failure.json)."""
    return cache / f"{target.slug}__b{batch}"


def has_cached_result(cache: Path, target: Target, batch: int) -> bool:
    """Whether the cache holds a result (of any zoo version) of this target at this compiled batch."""
    return (work_dir(cache, target, batch) / "result.json").exists()


def _cached(path: Path, version: str, archs: list[str]) -> dict | None:
    """A cached result (with its per-kernel counts) or failure of this zoo version covering `archs`."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("zoo_version") != version:
        return None
    if "by_arch" in data and not all(a in data["by_arch"] for a in archs):
        return None
    per_kernel = path.parent / "per_kernel.json"
    if "by_arch" in data and per_kernel.exists():
        for arch, launches in json.loads(per_kernel.read_text()).items():
            if arch in data["by_arch"]:
                data["by_arch"][arch]["per_kernel"] = launches
    return data


def run_target(target: Target, batch: int, archs: list[str], cache: Path, version: str,
               retry_failed: bool = False, nvcc_archs: list[str] | None = None, recount: bool = False,
               gates_first: bool = False) -> tuple[dict | None, dict | None, dict | None]:
    """(ptx result, static features, failure) for one target at one compiled batch size, cached.

    recount: recount cached models from their stored PTX and launch lists (after a PTX-analyzer change).
    A result of the default schedule that recomputes (`recomputes_gates`) is compiled again with channel-gate
    broadcasts materialised; gates_first: compile that variant straight away (a CNN the committed failure table
    lists as recomputing: `recomputing_pairs`).
    """
    from src.zoo.pipeline import ptx_features
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    assert target.spec is not None
    work = work_dir(cache, target, batch)
    done = _cached(work / "result.json", version, archs)
    static_path = cache / f"{target.slug}__static.json"
    static = json.loads(static_path.read_text()) if static_path.exists() else None
    if done is not None:
        from src.zoo.pipeline import recount_artifacts, repick_archs, write_result

        done, changed = repick_archs(work, done, archs, nvcc_archs, cache / KERNELS_DIR)
        if recount:
            done = recount_artifacts(work, done, cache / KERNELS_DIR)
        if changed or recount:
            write_result(work, done)
    outdated = None
    if done is not None and module_fallback(done):
        # Scheduled under the earlier module-wide fallback: recompute (each function alone); kept if this
        # environment cannot.
        outdated, done = done, None
    variant = done is not None and recomputes_gates(done, static)
    if variant:
        # Counted with the default schedule, which recomputes its gates: compiled again as the variant that
        # does not (src/zoo/gates.py); kept (and judged implausible later) if this environment cannot.
        outdated, done = done, None
    variant = variant or gates_first
    if done is not None and static is not None:
        return done, static, None
    failed = _cached(work / "failure.json", version, archs)
    if failed is not None and not retry_failed:
        return None, static, failed
    t0 = time.perf_counter()
    stage = "build"
    try:
        built = build(target.spec.source, target.spec.name, target.spec.input_size)
        build_s = time.perf_counter() - t0
        if static is None:
            stage = "static"
            static = static_features(built)
            static_path.parent.mkdir(parents=True, exist_ok=True)
            static_path.write_text(json.dumps(static, indent=1))
        if done is None:
            stage = "ptx"
            done = ptx_features(target.spec.source, target.spec.name, target.img_size, batch, archs,
                                workdir=work, built=built, nvcc_archs=nvcc_archs, build_seconds=build_s,
                                kernel_cache=cache / KERNELS_DIR, materialise_gates=variant)
            if not variant and recomputes_gates(done, static):
                done = ptx_features(target.spec.source, target.spec.name, target.img_size, batch, archs,
                                    workdir=work, built=built, nvcc_archs=nvcc_archs, build_seconds=build_s,
                                    kernel_cache=cache / KERNELS_DIR, materialise_gates=True)
        return done, static, None
    except MissingFrameworkError as exc:
        if outdated is not None:
            return outdated, static, None
        # Not the model's fault: this environment lacks the zoo extra. Reported as skipped, never cached.
        return None, static, {"zoo_version": version, "stage": MISSING_EXTRA, "error": type(exc).__name__,
                              "reason": str(exc)[:400], "seconds": time.perf_counter() - t0}
    except Exception as exc:  # every failure is recorded with its stage and reason, never dropped
        stage_name = getattr(exc, "stage", stage)
        msg = str(exc).strip().splitlines()
        failure = {
            "zoo_version": version, "stage": stage_name, "error": type(exc).__name__,
            "reason": (msg[0] if msg else type(exc).__name__)[:400], "seconds": time.perf_counter() - t0,
            "traceback_tail": traceback.format_exc()[-1500:],
        }
        work.mkdir(parents=True, exist_ok=True)
        (work / "failure.json").write_text(json.dumps(failure, indent=1))
        return None, static, failure


class TargetRunner:
    """Runs targets in a worker process with a per-model time limit (a stuck compile cannot stall the stage).

    The worker keeps torch/TVM imported between models and is replaced after a timeout or every 25 models.
    """

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.pool = None

    def _pool(self):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                            max_tasks_per_child=25)
        return self.pool

    def run(self, target: Target, batch: int, archs: list[str], cache: Path, version: str,
            retry_failed: bool, nvcc_archs: list[str] | None, recount: bool = False, gates_first: bool = False
            ) -> tuple[dict | None, dict | None, dict | None]:
        from concurrent.futures import TimeoutError as FutureTimeout
        from concurrent.futures.process import BrokenProcessPool

        if self.timeout_s is None:
            return run_target(target, batch, archs, cache, version, retry_failed, nvcc_archs, recount, gates_first)
        t0 = time.perf_counter()
        fut = self._pool().submit(run_target, target, batch, archs, cache, version, retry_failed, nvcc_archs,
                                  recount, gates_first)
        try:
            return fut.result(timeout=self.timeout_s)
        except (FutureTimeout, BrokenProcessPool) as exc:
            self.kill()
            why = (f"model -> PTX -> counts took longer than {self.timeout_s:.0f} s"
                   if isinstance(exc, FutureTimeout) else "worker process died (out of memory?)")
            failure = {"zoo_version": version, "stage": "timeout" if isinstance(exc, FutureTimeout) else "crash",
                       "error": type(exc).__name__, "reason": why, "seconds": time.perf_counter() - t0}
            work = work_dir(cache, target, batch)
            work.mkdir(parents=True, exist_ok=True)
            (work / "failure.json").write_text(json.dumps(failure, indent=1))
            return None, None, failure

    def kill(self) -> None:
        if self.pool is not None:
            for proc in list(getattr(self.pool, "_processes", {}).values()):
                proc.kill()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
