"""The two user commands: `run` (timing rows in the measurement schema) and `ncu` (Nsight Compute counters).

File layout, per output stem S (e.g. data/own/h100_default.csv):
- data/own/S.csv                 own measurement rows (OWN_COLUMNS); the only file the ingest reads
- data/own/S/failures.csv        configurations that failed, with the error (never silently dropped)
- data/own/S/ptx/<config>/       `run --keep-ptx`: Triton PTX, manifest.csv, launches.csv, trace.json
For `ncu --out-dir D`:
- D/networks.csv                 one row per configuration: summed counters, IPC, profiling wall time
- D/kernels/<config>.csv         one row per kernel launch with every metric
- D/reports/<config>.csv         ncu's own CSV export (what was parsed); .ncu-rep next to it (not committed)
- D/ptx/<config>/                Triton PTX + manifest.csv + ptx_vs_ncu.csv (torch_compile with --keep-ptx)
- D/failures.csv
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from src.profiling.environment import REPO_ROOT, DeviceInfo, describe_device, git_commit
from src.profiling.harness import RunConfig, run_config
from src.profiling.models import ModelResolutionError, ResolvedModel, resolve_model
from src.profiling.ncu import (
    NCU_METRICS,
    NETWORK_METRIC_COLUMNS,
    NcuReportError,
    NcuRunError,
    import_command,
    kernels_table,
    ncu_command,
    parse_ncu_csv,
    summarize_network,
)
from src.profiling.schema import write_own_csv
from src.profiling.triton_ptx import (
    PtxCaptureError,
    collect_triton_ptx,
    compare_with_ncu,
    launches_from_ncu,
    launches_from_trace,
)

FAILURE_COLUMNS = ["model", "batch_size", "precision", "memory_layout", "compile_mode", "mode", "img_size",
                   "stage", "error"]
NCU_NETWORK_COLUMNS = [
    "config_key", "run_id", "measured_at_utc", "gpu", "device_raw", "driver_version", "cuda_version",
    "framework_version", "compute_capability", "model", "model_key", "model_source", "family", "precision",
    "memory_layout", "compile_mode", "mode", "batch_size", "img_size", *NETWORK_METRIC_COLUMNS,
    "ncu_version", "ncu_metrics", "ncu_wall_s", "ncu_import_s", "report_csv", "kernels_csv",
    "triton_launches", "ptx_compared", "ptx_rel_diff_median",
]


def expand_configs(models: Iterable[str], batch_sizes: Iterable[int], precisions: Iterable[str],
                   layouts: Iterable[str], compiles: Iterable[str], modes: Iterable[str],
                   img_size: int | None = None) -> list[RunConfig]:
    """Cartesian product of the options, model-major (one model's configurations run back to back)."""
    return [RunConfig(model=m, batch_size=b, precision=p, memory_layout=lay, compile_mode=c, mode=mo,
                      img_size=img_size)
            for m, mo, c, lay, p, b in itertools.product(models, modes, compiles, layouts, precisions, batch_sizes)]


def slug(cfg: RunConfig) -> str:
    """File-name-safe configuration name."""
    text = (f"{cfg.model}_{cfg.mode}_{cfg.compile_mode}_{cfg.memory_layout}_{cfg.precision}_bs{cfg.batch_size}"
            + (f"_img{cfg.img_size}" if cfg.img_size else ""))
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def source_file_of(out: Path) -> str:
    """Output path as recorded in `source_file`: relative to the repository when inside it."""
    resolved = out.resolve()
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return resolved.as_posix()


class TimeBudgetSpent(RuntimeError):
    """The run's time budget ran out before this configuration could start."""


def _failure(cfg: RunConfig, stage: str, exc: BaseException) -> dict[str, Any]:
    row = {k: getattr(cfg, k) for k in FAILURE_COLUMNS[:7]}
    row.update(stage=stage, error=f"{type(exc).__name__}: {exc}"[:2000])
    return row


def release_device_memory(info: DeviceInfo) -> None:
    """After a failed configuration (e.g. out of memory): free what the failed attempt left on the GPU."""
    if not info.is_cpu:
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()


def _write_failures(failures: list[dict[str, Any]], path: Path) -> None:
    if failures:
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(failures, columns=FAILURE_COLUMNS).to_csv(path, index=False)
    elif path.exists():
        path.unlink()


@dataclass
class RunResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    out: Path | None = None


def run_timing(configs: list[RunConfig], device: str, out: Path, *, warmup: int, iters: int,
               compile_backend: str = "inductor", with_gmacs: bool = True, keep_ptx: bool = False,
               fail_fast: bool = False, resolver: Any = resolve_model, progress: bool = True,
               overwrite: bool = False, time_budget_s: float | None = None) -> RunResult:
    """Measure every configuration on `device`, rewriting `out` after each one (a crash loses nothing).

    `time_budget_s`: start no configuration once this many seconds have passed (a lent GPU is time-boxed); the
    configurations not started are listed in the failures file with stage `not_run`, never dropped silently.
    """
    if time_budget_s is not None and time_budget_s <= 0:
        raise ValueError(f"time_budget_s must be > 0, got {time_budget_s}")
    t_start = time.monotonic()
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists: each run writes its own file (choose another --out or --overwrite)")
    info = describe_device(device)
    if keep_ptx and info.is_cpu:
        raise ValueError("--keep-ptx needs --device cuda: torch.compile emits Triton PTX only for CUDA devices")
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    commit = git_commit()
    source_file = source_file_of(out)
    side = out.with_suffix("")
    result = RunResult(out=out)
    resolved: dict[str, ResolvedModel | BaseException] = {}
    bar = tqdm(configs, desc=f"profiling on {info.gpu}", unit="cfg", disable=not progress)
    for position, cfg in enumerate(bar):
        if time_budget_s is not None and time.monotonic() - t_start > time_budget_s:
            spent = TimeBudgetSpent(f"time budget of {time_budget_s:g} s spent after {position} of "
                                    f"{len(configs)} configuration(s)")
            result.failures.extend(_failure(c, "not_run", spent) for c in configs[position:])
            bar.close()
            break
        bar.set_postfix_str(slug(cfg)[:60])
        if cfg.model not in resolved:
            try:
                resolved[cfg.model] = resolver(cfg.model)
            except ModelResolutionError as exc:
                resolved[cfg.model] = exc
        model = resolved[cfg.model]
        if isinstance(model, BaseException):
            result.failures.append(_failure(cfg, "resolve", model))
            if fail_fast:
                raise model
            continue
        try:
            row = run_config(model, cfg, info, warmup=warmup, iters=iters, run_id=run_id,
                             source_file=source_file, upstream_commit=commit, compile_backend=compile_backend,
                             with_gmacs=with_gmacs)
        except Exception as exc:  # noqa: BLE001 - recorded in failures.csv; --fail-fast re-raises
            release_device_memory(info)
            result.failures.append(_failure(cfg, "measure", exc))
            if fail_fast:
                raise
            continue
        result.rows.append(row)
        write_own_csv(result.rows, out)
        if keep_ptx and cfg.compile_mode == "torch_compile":
            try:
                capture_ptx_run(cfg, info, side / "ptx" / slug(cfg), warmup=min(warmup, 3),
                                compile_backend=compile_backend)
            except Exception as exc:  # noqa: BLE001
                result.failures.append(_failure(cfg, "keep_ptx", exc))
                if fail_fast:
                    raise
        _write_failures(result.failures, side / "failures.csv")
    _write_failures(result.failures, side / "failures.csv")
    return result


def target_argv(cfg: RunConfig, device: str, warmup: int, info_out: Path, compile_backend: str,
                trace_out: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "src.profiling", "_target", "--model", cfg.model,
            "--batch-size", str(cfg.batch_size), "--precision", cfg.precision, "--layout", cfg.memory_layout,
            "--compile", cfg.compile_mode, "--mode", cfg.mode, "--device", device, "--warmup", str(warmup),
            "--compile-backend", compile_backend, "--info-out", str(info_out)]
    if cfg.img_size:
        argv += ["--img-size", str(cfg.img_size)]
    if trace_out is not None:
        argv += ["--trace-out", str(trace_out)]
    return argv


def _child_env(inductor_cache: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # en-US number formatting in ncu output
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if inductor_cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
        env.pop("TRITON_CACHE_DIR", None)
    return env


def _run(cmd: list[str], env: dict[str, str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NcuRunError(f"{what} exceeded {timeout_s:.0f} s: {' '.join(cmd[:6])} ...") from None
    except OSError as exc:
        raise NcuRunError(f"{what} could not start ({exc}): {cmd[0]}") from None
    if proc.returncode != 0:
        tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-2500:]).strip()
        hint = ""
        if "ERR_NVGPUCTRPERM" in tail:
            hint = (" (GPU performance counters are restricted: run as root or set the nvidia module option "
                    "NVreg_RestrictProfilingToAdminUsers=0)")
        raise NcuRunError(f"{what} exited with status {proc.returncode}{hint}:\n{tail}")
    return proc


def capture_ptx_run(cfg: RunConfig, info: DeviceInfo, dest: Path, *, warmup: int, compile_backend: str,
                    timeout_s: float = 540) -> pd.DataFrame:
    """Compile the configuration in a fresh process and cache; keep its Triton PTX and the traced launches."""
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cnnperf-inductor-") as cache:
        cmd = target_argv(cfg, info.device, warmup, dest / "target.json", compile_backend,
                          trace_out=dest / "trace.json")
        _run(cmd, _child_env(Path(cache)), timeout_s, "PTX capture")
        manifest = collect_triton_ptx(Path(cache), dest)
    manifest.to_csv(dest / "manifest.csv", index=False)
    launches_from_trace(dest / "trace.json").to_csv(dest / "launches.csv", index=False)
    return manifest


def find_ncu(explicit: str | None) -> str:
    """Path of the ncu binary; a clear error when it cannot be found."""
    candidates = [explicit] if explicit else [shutil.which("ncu"), "/usr/local/cuda/bin/ncu"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = explicit or "PATH and /usr/local/cuda/bin"
    raise NcuRunError(f"Nsight Compute (ncu) not found in {where}: install Nsight Compute or pass --ncu PATH")


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_ncu(configs: list[RunConfig], out_dir: Path, *, ncu: str, device: str = "cuda", warmup: int = 3,
            timeout_s: float = 540, keep_ptx: bool = False, compile_backend: str = "inductor",
            fail_fast: bool = False, progress: bool = True) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Profile each configuration's marked step under ncu; write per-launch and per-network tables."""
    describe_device(device)  # fail early and clearly without a GPU
    out_dir = out_dir.resolve()  # the profiled child runs from the repository root
    version = ncu_version(ncu)
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for sub in ("reports", "kernels"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    for cfg in tqdm(configs, desc="ncu", unit="cfg", disable=not progress):
        try:
            rows.append(ncu_one(cfg, out_dir, ncu=ncu, device=device, warmup=warmup, timeout_s=timeout_s,
                                keep_ptx=keep_ptx, compile_backend=compile_backend, run_id=run_id,
                                version=version))
        except (NcuRunError, NcuReportError, PtxCaptureError, OSError, ValueError, KeyError) as exc:
            failures.append(_failure(cfg, "ncu", exc))
            if fail_fast:
                raise
        frame = pd.DataFrame(rows, columns=NCU_NETWORK_COLUMNS)
        frame.to_csv(out_dir / "networks.csv", index=False)
        _write_failures(failures, out_dir / "failures.csv")
    return pd.DataFrame(rows, columns=NCU_NETWORK_COLUMNS), failures


def ncu_one(cfg: RunConfig, out_dir: Path, *, ncu: str, device: str, warmup: int, timeout_s: float,
            keep_ptx: bool, compile_backend: str, run_id: str, version: str) -> dict[str, Any]:
    name = slug(cfg)
    report = out_dir / "reports" / name
    info_json = out_dir / "reports" / f"{name}.target.json"
    capture = keep_ptx and cfg.compile_mode == "torch_compile"
    with tempfile.TemporaryDirectory(prefix="cnnperf-inductor-") as cache:
        env = _child_env(Path(cache) if capture else None)
        cmd = ncu_command(ncu, report, target_argv(cfg, device, warmup, info_json, compile_backend))
        t0 = time.perf_counter()
        _run(cmd, env, timeout_s, "ncu")
        ncu_wall_s = time.perf_counter() - t0
        manifest = collect_triton_ptx(Path(cache), out_dir / "ptx" / name) if capture else None
    rep_file = report.with_name(report.name + ".ncu-rep")
    t1 = time.perf_counter()
    imported = _run(import_command(ncu, rep_file), _child_env(None), timeout_s, "ncu --import")
    ncu_import_s = time.perf_counter() - t1
    csv_path = out_dir / "reports" / f"{name}.csv"
    csv_path.write_text(imported.stdout)
    parsed = parse_ncu_csv(imported.stdout, str(csv_path), required=NCU_METRICS)
    kernels = kernels_table(parsed)
    kernels_path = out_dir / "kernels" / f"{name}.csv"
    kernels.to_csv(kernels_path, index=False)
    target = json.loads(info_json.read_text())
    dev, model = target["device"], target["model"]
    row: dict[str, Any] = {
        "config_key": name, "run_id": run_id,
        "measured_at_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **{k: dev[k] for k in ("gpu", "device_raw", "driver_version", "cuda_version", "framework_version",
                               "compute_capability")},
        "model": model["name"], "model_key": model["model_key"], "model_source": model["model_source"],
        "family": model["family"], "precision": cfg.precision, "memory_layout": model["memory_layout"],
        "compile_mode": cfg.compile_mode, "mode": cfg.mode, "batch_size": cfg.batch_size,
        "img_size": model["img_size"], **summarize_network(parsed.kernels),
        "ncu_version": version, "ncu_metrics": ",".join(NCU_METRICS), "ncu_wall_s": ncu_wall_s,
        "ncu_import_s": ncu_import_s, "report_csv": source_file_of(csv_path),
        "kernels_csv": source_file_of(kernels_path),
        "triton_launches": float("nan"), "ptx_compared": float("nan"), "ptx_rel_diff_median": float("nan"),
    }
    if manifest is not None:
        dest = out_dir / "ptx" / name
        manifest.to_csv(dest / "manifest.csv", index=False)
        launches_from_ncu(parsed.kernels).to_csv(dest / "launches.csv", index=False)
        cmp = compare_with_ncu(manifest, dest, parsed.kernels)
        cmp.to_csv(dest / "ptx_vs_ncu.csv", index=False)
        ok = cmp[cmp["status"] == "ok"]
        row.update(triton_launches=len(cmp), ptx_compared=len(ok),
                   ptx_rel_diff_median=float(ok["rel_diff"].median()) if len(ok) else float("nan"))
    return row
