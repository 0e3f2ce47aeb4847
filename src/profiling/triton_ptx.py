"""Keep the PTX of the Triton kernels torch.compile generates, with their launch grids.

The profiled process gets a fresh TORCHINDUCTOR_CACHE_DIR, so every Triton kernel compiled for the model lands
in `<cache>/triton/<device>/<hash>/<kernel>.ptx` next to `<kernel>.json` (num_warps, shared memory). When
autotuning compiled several variants of one kernel, the variant Inductor chose is the one whose Triton cache
hash its `.best_config` file names; a kernel whose choice cannot be told apart is marked `ambiguous`.
Launch grids come from the launches themselves: ncu's Grid/Block Size (ncu mode) or the CUDA kernel events of
a torch.profiler trace (run mode). Inductor's generated wrapper modules (the Python that calls `.run(...)` with
the scalar arguments, e.g. xnumel) are copied too: the PTX analyzer (`src.ptx.count_launch`) needs them to
evaluate a launch.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][\w$]*)\s*\(", re.MULTILINE)

PTX_MANIFEST_COLUMNS = ["kernel_name", "ptx_file", "triton_hash", "num_warps", "threads_per_block",
                        "shared_bytes", "status"]
LAUNCH_COLUMNS = ["kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "launches"]


class PtxCaptureError(RuntimeError):
    """The cache or trace does not hold what a torch.compile run must produce."""


def ptx_entries(text: str) -> list[str]:
    """Names of the kernels (.entry) a PTX module defines."""
    return _ENTRY.findall(text)


def chosen_hashes(cache_dir: Path) -> set[str]:
    """Triton cache hashes of the autotuning winners recorded in Inductor's *.best_config files."""
    chosen: set[str] = set()
    for path in cache_dir.rglob("*.best_config"):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PtxCaptureError(f"{path}: unreadable best_config ({exc})") from None
        value = data.get("triton_cache_hash") if isinstance(data, dict) else None
        if value:
            chosen.add(str(value))
    return chosen


def collect_triton_ptx(cache_dir: Path, dest: Path) -> pd.DataFrame:
    """Copy every Triton PTX under `cache_dir` to `dest/ptx/` and return the manifest (PTX_MANIFEST_COLUMNS)."""
    cache_dir, dest = Path(cache_dir), Path(dest)
    ptx_files = sorted(cache_dir.rglob("*.ptx"))
    if not ptx_files:
        raise PtxCaptureError(f"{cache_dir}: no .ptx files: torch.compile generated no Triton kernels here "
                              "(CPU inductor emits C++; Triton runs need a CUDA device)")
    winners = chosen_hashes(cache_dir)
    (dest / "ptx").mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for ptx in ptx_files:
        text = ptx.read_text()
        names = ptx_entries(text)
        if len(names) != 1:
            raise PtxCaptureError(f"{ptx}: expected one .entry in a Triton PTX file, found {names}")
        meta_path = ptx.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        triton_hash = ptx.parent.name
        num_warps = meta.get("num_warps")
        target = dest / "ptx" / f"{names[0]}__{triton_hash[:12]}.ptx"
        shutil.copyfile(ptx, target)
        rows.append({
            "kernel_name": names[0], "ptx_file": str(target.relative_to(dest)), "triton_hash": triton_hash,
            "num_warps": num_warps, "threads_per_block": num_warps * 32 if isinstance(num_warps, int) else None,
            "shared_bytes": meta.get("shared"), "status": "",
        })
    manifest = pd.DataFrame(rows, columns=PTX_MANIFEST_COLUMNS)
    for _name, group in manifest.groupby("kernel_name"):
        if len(group) == 1:
            manifest.loc[group.index, "status"] = "only_variant"
            continue
        won = group["triton_hash"].isin(winners)
        manifest.loc[group.index, "status"] = "autotune_loser"
        if won.sum() == 1:
            manifest.loc[group.index[won.to_numpy()], "status"] = "autotune_winner"
        else:
            manifest.loc[group.index, "status"] = "ambiguous"
    for wrapper in cache_dir.rglob("*.py"):
        if ".run(" in wrapper.read_text(errors="replace"):
            (dest / "wrappers").mkdir(exist_ok=True)
            shutil.copyfile(wrapper, dest / "wrappers" / wrapper.name)
    return manifest


def launches_from_trace(trace: dict[str, Any] | Path) -> pd.DataFrame:
    """Kernel launches of a torch.profiler chrome trace: name, grid, block and how often (LAUNCH_COLUMNS)."""
    where = str(trace) if isinstance(trace, Path) else "<trace>"
    data = json.loads(Path(trace).read_text()) if isinstance(trace, Path) else trace
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise PtxCaptureError(f"{where}: not a chrome trace (no traceEvents list)")
    rows = []
    for event in events:
        if not isinstance(event, dict) or str(event.get("cat", "")).lower() != "kernel":
            continue
        args = event.get("args", {})
        grid, block = args.get("grid"), args.get("block")
        if not (isinstance(grid, list) and isinstance(block, list) and len(grid) == 3 and len(block) == 3):
            raise PtxCaptureError(f"{where}: kernel event {event.get('name')!r} lacks 3-d grid/block args")
        rows.append((event["name"], *map(int, grid), *map(int, block)))
    if not rows:
        raise PtxCaptureError(f"{where}: no CUDA kernel events (was the step traced with ProfilerActivity.CUDA?)")
    frame = pd.DataFrame(rows, columns=LAUNCH_COLUMNS[:-1])
    return frame.groupby(LAUNCH_COLUMNS[:-1], as_index=False, sort=False).size().rename(
        columns={"size": "launches"})


def launches_from_ncu(kernels: pd.DataFrame) -> pd.DataFrame:
    """Launch grids as ncu saw them ("(x, y, z)" Grid/Block Size columns), counted per distinct launch shape."""
    def dims(text: str, what: str, name: str) -> list[int]:
        found = re.findall(r"\d+", str(text))
        if len(found) != 3:
            raise PtxCaptureError(f"ncu {what} {text!r} of {name!r} is not an (x, y, z) triple")
        return [int(v) for v in found]

    rows = [(k["kernel_name"], *dims(k["grid_size"], "Grid Size", k["kernel_name"]),
             *dims(k["block_size"], "Block Size", k["kernel_name"])) for k in kernels.to_dict("records")]
    frame = pd.DataFrame(rows, columns=LAUNCH_COLUMNS[:-1])
    return frame.groupby(LAUNCH_COLUMNS[:-1], as_index=False, sort=False).size().rename(
        columns={"size": "launches"})


def _split_args(text: str) -> list[str]:
    """Top-level comma split of a call's argument text (parentheses and brackets nest)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


_RUN_CALL = re.compile(r"\b(triton_[A-Za-z0-9_]+)\.run\(")


def wrapper_calls(wrapper_dir: Path) -> dict[str, list[list[str]]]:
    """Positional arguments of every `<kernel>.run(...)` call in Inductor's wrapper modules, in file order."""
    calls: dict[str, list[list[str]]] = {}
    for path in sorted(Path(wrapper_dir).glob("*.py")) if Path(wrapper_dir).is_dir() else []:
        text = path.read_text(errors="replace")
        for match in _RUN_CALL.finditer(text):
            depth, i = 1, match.end()
            while i < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            args = [a for a in _split_args(text[match.end():i - 1]) if not re.match(r"^[A-Za-z_]\w*\s*=", a)]
            calls.setdefault(match.group(1), []).append(args)
    return calls


def launch_params(args: list[str], n_ptx_params: int) -> dict[int, int] | None:
    """Integer literals of a `.run(...)` call by PTX parameter index; None when positions cannot be trusted.

    Positional arguments map to PTX parameters in order. Newer Triton appends up to two scratch pointers to the
    PTX signature; older Triton drops arguments specialised to 1, which shifts positions: then we refuse.
    """
    if not 0 <= n_ptx_params - len(args) <= 2:
        return None
    return {i: int(a) for i, a in enumerate(args) if re.fullmatch(r"-?\d+", a)}


CMP_COLUMNS = ["launch_id", "kernel_name", "grid_size", "block_size", "ncu_warp_inst", "ptx_warp_inst",
               "ncu_thread_inst", "ptx_thread_inst", "rel_diff", "status"]


def compare_with_ncu(manifest: pd.DataFrame, dest: Path, ncu_kernels: pd.DataFrame) -> pd.DataFrame:
    """The PTX analyzer's warp-level executed-instruction counts next to ncu's SASS counts, per Triton launch.

    Uses `src.ptx.count_launch` (policy 'error'; 'bounds' when a branch depends on memory, status ok_estimate)
    with the scalar arguments from Inductor's wrapper. Every launch gets a row; `status` says why a count is
    missing (ptx_missing, ptx_ambiguous, params_ambiguous, params_unmapped, analyzer_error: ...).
    PTX instructions are not SASS instructions: rel_diff measures the analysis, it is not expected to be 0.
    """
    from src.ptx import UnresolvedBranchError, count_launch, parse_ptx

    usable = manifest[manifest["status"].isin(["only_variant", "autotune_winner"])]
    calls = wrapper_calls(dest / "wrappers")
    seen: dict[str, int] = {}
    n_launches = ncu_kernels["kernel_name"].value_counts().to_dict()
    modules: dict[str, Any] = {}
    rows = []
    for k in ncu_kernels.to_dict("records"):
        name = str(k["kernel_name"])
        if not name.startswith("triton_"):
            continue
        occurrence = seen.get(name, 0)
        seen[name] = occurrence + 1
        row = {"launch_id": k["launch_id"], "kernel_name": name, "grid_size": k["grid_size"],
               "block_size": k["block_size"], "ncu_warp_inst": k.get("sm__inst_executed.sum", float("nan")),
               "ptx_warp_inst": float("nan"), "ncu_thread_inst": k.get("smsp__thread_inst_executed.sum", float("nan")),
               "ptx_thread_inst": float("nan"), "rel_diff": float("nan"), "status": ""}
        rows.append(row)
        match = usable[usable["kernel_name"] == name]
        if match.empty:
            row["status"] = "ptx_ambiguous" if (manifest["kernel_name"] == name).any() else "ptx_missing"
            continue
        kernel_calls = calls.get(name, [])
        if len({tuple(c) for c in kernel_calls}) == 1:
            args = kernel_calls[0]
        elif kernel_calls and len(kernel_calls) == n_launches[name]:
            args = kernel_calls[occurrence]
        else:
            row["status"] = f"params_ambiguous ({len(kernel_calls)} wrapper calls, {n_launches[name]} launches)"
            continue
        ptx_file = str(match.iloc[0]["ptx_file"])
        try:
            if ptx_file not in modules:
                modules[ptx_file] = parse_ptx((dest / ptx_file).read_text(), source=ptx_file)
            module = modules[ptx_file]
            n_params = len(module.kernels[name].params)
            params = launch_params(args, n_params)
            if params is None:
                row["status"] = f"params_unmapped ({len(args)} call arguments, {n_params} PTX parameters)"
                continue
            grid = tuple(int(v) for v in re.findall(r"\d+", str(k["grid_size"])))
            block = tuple(int(v) for v in re.findall(r"\d+", str(k["block_size"])))
            try:
                counts = count_launch(module, name, grid, block, params=params, policy="error")
                row["status"] = "ok"
            except UnresolvedBranchError:
                counts = count_launch(module, name, grid, block, params=params, policy="bounds")
                row["status"] = "ok_estimate"
        except Exception as exc:  # noqa: BLE001 - recorded per launch, the comparison goes on
            row["status"] = f"analyzer_error: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        row["ptx_warp_inst"] = float(counts.warp_instructions)
        row["ptx_thread_inst"] = float(counts.thread_instructions)
        row["rel_diff"] = (row["ptx_warp_inst"] - row["ncu_warp_inst"]) / row["ncu_warp_inst"]
    return pd.DataFrame(rows, columns=CMP_COLUMNS)
