"""Nsight Compute: the command we launch, the metrics we ask for, and a strict parser for `ncu --csv` output.

The parser reads both CSV layouts ncu writes:
- long (`--page details`, the default): one row per (kernel launch, metric), columns
  "ID","Process ID","Process Name","Host Name","Kernel Name",["Kernel Time"],"Context","Stream",
  ["Block Size","Grid Size","Device","CC"],"Section Name","Metric Name","Metric Unit","Metric Value"[,rule columns];
- wide (`--page raw`): one row per kernel launch, one column per metric, the second row holding the units.
Lines before the header that ncu itself prints (`==PROF==`, `==WARNING==`) are skipped; `==ERROR==` anywhere, a
row with the wrong number of fields, a value that is not a number, a duplicated (launch, metric) pair, or a
launch that lacks a required metric is an NcuReportError naming the file and line. Nothing becomes a silent 0.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# Metrics collected per kernel launch (name -> what we use it for). All are standard ncu metric names valid
# on Volta and newer (sm_70+), Hopper included.
NCU_METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "kernel duration under ncu (ns); serialised replay, not a latency",
    "gpc__cycles_elapsed.max": "elapsed GPU cycles of the launch (ncu's 'Elapsed Cycles')",
    "sm__cycles_active.sum": "SM cycles with at least one warp resident, summed over SMs",
    "sm__cycles_active.avg": "SM active cycles, mean over SMs",
    "sm__inst_executed.sum": "executed warp-level SASS instructions, all SMs",
    "smsp__thread_inst_executed.sum": "executed SASS instructions counted per active thread",
    "sm__inst_executed.avg.per_cycle_active": "IPC: warp instructions per active SM cycle, mean over SMs",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (% of max warps per SM)",
    "dram__bytes_read.sum": "DRAM bytes read",
    "dram__bytes_write.sum": "DRAM bytes written",
    "launch__grid_size": "blocks in the grid",
    "launch__block_size": "threads per block",
    "launch__registers_per_thread": "registers per thread",
}

NVTX_RANGE = "cnnperf_step"

# Columns that describe a launch in the long layout (present ones are kept; older ncu lacks Block/Grid/CC).
_LAUNCH_COLUMNS = {
    "ID": "launch_id", "Process ID": "process_id", "Kernel Name": "kernel_name", "Context": "context",
    "Stream": "stream", "Block Size": "block_size", "Grid Size": "grid_size", "Device": "device", "CC": "cc",
}
# Unit -> (base unit, factor). `--print-units base` makes ncu print base units; scaled ones are converted.
_UNIT_SCALE: dict[str, tuple[str, float]] = {
    "byte": ("byte", 1.0), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6), "Gbyte": ("byte", 1e9),
    "Tbyte": ("byte", 1e12), "KB": ("byte", 1e3), "MB": ("byte", 1e6), "GB": ("byte", 1e9),
    "nsecond": ("nsecond", 1.0), "usecond": ("nsecond", 1e3), "msecond": ("nsecond", 1e6),
    "second": ("nsecond", 1e9), "ns": ("nsecond", 1.0), "us": ("nsecond", 1e3), "ms": ("nsecond", 1e6),
    "cycle": ("cycle", 1.0), "Kcycle": ("cycle", 1e3), "Mcycle": ("cycle", 1e6), "Gcycle": ("cycle", 1e9),
    "inst": ("inst", 1.0), "Kinst": ("inst", 1e3), "Minst": ("inst", 1e6), "Ginst": ("inst", 1e9),
}
_NUMBER = re.compile(r"^[+-]?(\d+|\d{1,3}(,\d{3})+)(\.\d*)?([eE][+-]?\d+)?$")


class NcuReportError(ValueError):
    """A malformed, truncated or incomplete ncu CSV report; the message names file and line."""


class NcuRunError(RuntimeError):
    """ncu could not be run or exited with an error; the message carries the tail of its output."""


@dataclass
class NcuReport:
    """Parsed report: one row per kernel launch (`kernels`), base units per metric, ncu's own notes."""

    kernels: pd.DataFrame
    units: dict[str, str]
    notes: list[str] = field(default_factory=list)
    layout: str = "long"


def ncu_command(ncu: str, report: Path, target: list[str], metrics: Iterable[str] = NCU_METRICS,
                nvtx_range: str = NVTX_RANGE) -> list[str]:
    """The profiling command: every kernel launched inside the NVTX push/pop range, clocks left alone."""
    return [
        ncu,
        "--clock-control", "none",          # measure at the clocks the GPU really runs (default locks to base)
        "--target-processes", "all",        # torch.compile may launch kernels from worker processes
        "--replay-mode", "kernel",
        "--cache-control", "all",           # flush caches before each replay pass (ncu default, made explicit)
        "--nvtx", "--nvtx-include", f"{nvtx_range}/",  # only kernels inside the timed step's push/pop range
        "--metrics", ",".join(metrics),
        "--export", str(report), "--force-overwrite",
        *target,
    ]


def import_command(ncu: str, report: Path) -> list[str]:
    """Turn a saved .ncu-rep into the long CSV layout in base units."""
    return [ncu, "--import", str(report), "--csv", "--page", "details", "--print-units", "base"]


def parse_number(text: str, where: str) -> float:
    """ncu value -> float; 'n/a' -> NaN; en-US thousands separators allowed; anything else is an error."""
    value = text.strip()
    if value in ("n/a", "N/A"):
        return math.nan
    if not _NUMBER.match(value):
        raise NcuReportError(f"{where}: not a number: {text!r} (ncu prints en-US numbers; run it with LC_ALL=C)")
    return float(value.replace(",", ""))


def _to_base(value: float, unit: str) -> tuple[float, str]:
    base, factor = _UNIT_SCALE.get(unit, (unit, 1.0))
    return value * factor, base


def _find_header(lines: list[str], path: str) -> tuple[int, list[str]]:
    notes: list[str] = []
    for number, line in enumerate(lines, start=1):
        if line.startswith("==ERROR=="):
            raise NcuReportError(f"{path}:{number}: ncu reported an error: {line.strip()}")
        if line.startswith('"ID"') or line.startswith("ID,"):
            return number, notes
        if line.startswith("==") or not line.strip():
            notes.append(line.strip())
            continue
    raise NcuReportError(f"{path}: no ncu CSV header (a line starting with \"ID\") found in {len(lines)} lines")


def parse_ncu_csv(text: str, path: str = "<string>", required: Iterable[str] | None = None) -> NcuReport:
    """Parse `ncu --csv` output (long or wide layout); see the module docstring for what is an error."""
    lines = text.splitlines(keepends=True)
    header_line, notes = _find_header(lines, path)
    for number, line in enumerate(lines[header_line:], start=header_line + 1):
        if line.startswith("==ERROR=="):
            raise NcuReportError(f"{path}:{number}: ncu reported an error: {line.strip()}")
    # ncu's own messages after the header become blank lines, so CSV line numbers stay file line numbers.
    body = "".join("\n" if line.startswith(("==PROF==", "==WARNING==")) else line
                   for line in lines[header_line - 1:])
    reader = csv.reader(io.StringIO(body), strict=True)
    try:
        header = next(reader)
        rows = [(header_line + reader.line_num - 1, r) for r in reader if r and any(f.strip() for f in r)]
    except csv.Error as exc:
        raise NcuReportError(f"{path}:{header_line + reader.line_num - 1}: malformed CSV ({exc})") from None
    if "Metric Name" in header and "Metric Value" in header:
        kernels, units = _parse_long(header, rows, path)
        layout = "long"
    else:
        kernels, units = _parse_wide(header, rows, path)
        layout = "wide"
    if kernels.empty:
        raise NcuReportError(f"{path}: the report holds no kernel launches")
    _check_complete(kernels, units, required, path)
    return NcuReport(kernels=kernels, units=units, notes=notes, layout=layout)


def _parse_long(header: list[str], rows: list[tuple[int, list[str]]], path: str
                ) -> tuple[pd.DataFrame, dict[str, str]]:
    col = {name: i for i, name in enumerate(header)}
    for needed in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if needed not in col:
            raise NcuReportError(f"{path}: header lacks column {needed!r}")
    launches: dict[int, dict[str, Any]] = {}
    seen_at: dict[tuple[int, str], int] = {}
    units: dict[str, str] = {}
    for line, fields in rows:
        if len(fields) != len(header):
            raise NcuReportError(f"{path}:{line}: expected {len(header)} fields, got {len(fields)} "
                                 "(truncated or malformed row)")
        metric = fields[col["Metric Name"]].strip()
        if not metric:
            if "Rule Name" in col and fields[col["Rule Name"]].strip():
                continue  # a rule's advice row (sections with rules), no metric
            raise NcuReportError(f"{path}:{line}: empty Metric Name")
        try:
            launch_id = int(fields[col["ID"]])
        except ValueError:
            raise NcuReportError(f"{path}:{line}: ID {fields[col['ID']]!r} is not an integer") from None
        key = (launch_id, metric)
        if key in seen_at:
            raise NcuReportError(f"{path}:{line}: metric {metric!r} of launch {launch_id} already given on line "
                                 f"{seen_at[key]}")
        seen_at[key] = line
        value, unit = _to_base(parse_number(fields[col["Metric Value"]], f"{path}:{line}: {metric}"),
                               fields[col["Metric Unit"]].strip())
        if metric in units and units[metric] != unit and not math.isnan(value):
            raise NcuReportError(f"{path}:{line}: {metric} in unit {unit!r}, earlier rows use {units[metric]!r}")
        if not math.isnan(value) or metric not in units:
            units[metric] = unit
        launch = launches.get(launch_id)
        if launch is None:
            launch = {out: fields[col[name]] for name, out in _LAUNCH_COLUMNS.items() if name in col}
            launch["launch_id"] = launch_id
            launch["_line"] = line
            launches[launch_id] = launch
        elif launch["kernel_name"] != fields[col["Kernel Name"]]:
            raise NcuReportError(f"{path}:{line}: launch {launch_id} is {launch['kernel_name']!r} on line "
                                 f"{launch['_line']} but {fields[col['Kernel Name']]!r} here")
        launch[metric] = value
    frame = pd.DataFrame(list(launches.values()))
    if frame.empty:
        return frame, units
    return frame.sort_values("launch_id", kind="stable").reset_index(drop=True), units


def _parse_wide(header: list[str], rows: list[tuple[int, list[str]]], path: str
                ) -> tuple[pd.DataFrame, dict[str, str]]:
    if "Kernel Name" not in header:
        raise NcuReportError(f"{path}: header has neither Metric Name/Metric Value (long layout) nor Kernel Name "
                             "(wide layout)")
    metrics = [(i, name) for i, name in enumerate(header) if "__" in name]
    if not metrics:
        raise NcuReportError(f"{path}: wide layout without metric columns")
    raw_units: dict[str, str] = {}
    if rows and rows[0][1] and rows[0][1][0].strip() == "":
        line, fields = rows.pop(0)
        if len(fields) != len(header):
            raise NcuReportError(f"{path}:{line}: units row has {len(fields)} fields, header {len(header)}")
        raw_units = {name: fields[i].strip() for i, name in metrics}
    out: list[dict[str, Any]] = []
    units: dict[str, str] = {}
    col = {name: i for i, name in enumerate(header)}
    seen: dict[int, int] = {}
    for line, fields in rows:
        if len(fields) != len(header):
            raise NcuReportError(f"{path}:{line}: expected {len(header)} fields, got {len(fields)} "
                                 "(truncated or malformed row)")
        try:
            launch_id = int(fields[col["ID"]])
        except (KeyError, ValueError):
            raise NcuReportError(f"{path}:{line}: missing or non-integer ID") from None
        if launch_id in seen:
            raise NcuReportError(f"{path}:{line}: launch {launch_id} already given on line {seen[launch_id]}")
        seen[launch_id] = line
        launch: dict[str, Any] = {out_name: fields[col[name]] for name, out_name in _LAUNCH_COLUMNS.items()
                                  if name in col}
        launch["launch_id"] = launch_id
        launch["_line"] = line
        for i, name in metrics:
            value, unit = _to_base(parse_number(fields[i], f"{path}:{line}: {name}"), raw_units.get(name, ""))
            launch[name] = value
            units[name] = unit
        out.append(launch)
    return pd.DataFrame(out), units


def _check_complete(kernels: pd.DataFrame, units: Mapping[str, str], required: Iterable[str] | None,
                    path: str) -> None:
    """Every launch must carry every required metric (default: every metric any launch carries)."""
    wanted = list(required) if required is not None else [m for m in units]
    for metric in wanted:
        if metric not in kernels.columns:
            raise NcuReportError(f"{path}: metric {metric!r} is absent from the report")
        bad = kernels[kernels[metric].isna()]
        if not bad.empty:
            first = bad.iloc[0]
            raise NcuReportError(
                f"{path}:{first['_line']}: launch {first['launch_id']} ({first['kernel_name']}) has no value for "
                f"{metric!r} (n/a or missing row: unsupported metric, or a truncated report); "
                f"{len(bad)} launch(es) affected"
            )


def read_ncu_csv(path: Path, required: Iterable[str] | None = None) -> NcuReport:
    return parse_ncu_csv(Path(path).read_text(encoding="utf-8", errors="strict"), str(path), required)


# Per-network aggregate columns (see summarize_network).
NETWORK_METRIC_COLUMNS = [
    "kernel_launches", "distinct_kernels", "gpu_time_ms_sum", "elapsed_cycles_sum", "sm_active_cycles_sum",
    "warp_inst_executed_sum", "thread_inst_executed_sum", "ipc_active", "ipc_kernel_mean", "dram_bytes_read_sum",
    "dram_bytes_write_sum", "dram_bytes_sum", "achieved_occupancy_pct",
]


def summarize_network(kernels: pd.DataFrame) -> dict[str, float]:
    """Sum one inference step's launches into per-network numbers.

    ipc_active = sum(sm__inst_executed.sum) / sum(sm__cycles_active.sum): the per-SM IPC of the whole step,
    i.e. the active-cycle-weighted mean of the kernels' sm__inst_executed.avg.per_cycle_active.
    achieved_occupancy_pct is weighted the same way.
    """
    missing = [m for m in NCU_METRICS if m not in kernels.columns]
    if missing:
        raise NcuReportError(f"cannot summarise: metrics {missing} absent")
    active = float(kernels["sm__cycles_active.sum"].sum())
    inst = float(kernels["sm__inst_executed.sum"].sum())
    if active <= 0:
        raise NcuReportError("cannot summarise: total SM active cycles is 0")
    read = float(kernels["dram__bytes_read.sum"].sum())
    write = float(kernels["dram__bytes_write.sum"].sum())
    occupancy = kernels["sm__warps_active.avg.pct_of_peak_sustained_active"] * kernels["sm__cycles_active.sum"]
    return {
        "kernel_launches": int(len(kernels)),
        "distinct_kernels": int(kernels["kernel_name"].nunique()),
        "gpu_time_ms_sum": float(kernels["gpu__time_duration.sum"].sum()) / 1e6,
        "elapsed_cycles_sum": float(kernels["gpc__cycles_elapsed.max"].sum()),
        "sm_active_cycles_sum": active,
        "warp_inst_executed_sum": inst,
        "thread_inst_executed_sum": float(kernels["smsp__thread_inst_executed.sum"].sum()),
        "ipc_active": inst / active,
        "ipc_kernel_mean": float(kernels["sm__inst_executed.avg.per_cycle_active"].mean()),
        "dram_bytes_read_sum": read,
        "dram_bytes_write_sum": write,
        "dram_bytes_sum": read + write,
        "achieved_occupancy_pct": float(occupancy.sum()) / active,
    }


KERNEL_COLUMNS = ["launch_id", "kernel_name", "block_size", "grid_size", "device", "cc", "context", "stream"]


def kernels_table(report: NcuReport) -> pd.DataFrame:
    """Per-launch table to write: launch columns then metrics, without the internal line numbers."""
    frame = report.kernels.drop(columns=["_line"], errors="ignore")
    lead = [c for c in KERNEL_COLUMNS if c in frame.columns]
    rest = [c for c in frame.columns if c not in lead and c != "process_id"]
    return frame[lead + rest]
