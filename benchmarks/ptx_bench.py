"""Benchmark of the PTX dynamic analysis (src/ptx): fast analyzer vs the reference interpreter.

Three parts, all measured in this run:
  1. same launches: the test-corpus kernels (nvcc -O3, sm_86) and six TVM ResNet50 kernels (one or two
     blocks of their real grid) at launches the interpreter finishes in seconds; both engines run every
     launch, the counts must be equal, the speed-up is the ratio of times
     (analyzer: cold = first call incl. building the kernel's program, warm = median of 5 further calls;
     interpreter: one run incl. its compilation);
  2. CNN-sized launches: the same kernels at grids of 10^3-10^5 blocks (fast analyzer only);
  3. a whole network: the 44 kernels / 128 launches of one ResNet50 inference compiled by TVM (committed in
     tests/ptx/fixtures/tvm). The interpreter cannot run it in reasonable time: its time for the network is
     EXTRAPOLATED from its measured throughput (thread instructions per second) on one sampled block of each
     kernel whose blocks are small enough, and labelled as such.
Writes reports/ptx_bench.json.

    python benchmarks/ptx_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from tqdm import tqdm  # noqa: E402

from src.ptx import Interpreter, count_launch, parse_ptx  # noqa: E402

FIX = ROOT / "tests" / "ptx" / "fixtures"
CORPUS = FIX / "kernels_sm_86_O3.ptx"
TVM_PTX = FIX / "tvm" / "resnet50_sm_86.ptx"
TVM_LAUNCHES = FIX / "tvm" / "resnet50_launches.json"

# (kernel, grid, block, params by index)
SAME_LAUNCHES = [
    ("vector_add", (16,), (256,), {3: 16 * 256 - 100}),
    ("grid_stride", (8,), (256,), {2: 2.0, 3: 20000}),
    ("nested_param", (4,), (128,), {1: 12, 2: 10}),
    ("triangle", (8,), (128,), {1: 12}),
    ("stencil2d", (4, 4), (16, 16), {2: 60, 3: 60}),
    ("reduce_shared", (16,), (256,), {2: 16 * 256 - 7}),
    ("warp_reduce", (16,), (256,), {2: 16 * 256 - 7}),
    ("early_return", (16,), (256,), {2: 4000, 3: 60}),
    ("matmul_tiled", (2, 2), (16, 16), {3: 32, 4: 32, 5: 64}),
    ("conv2d_direct", (8,), (256,), {3: 4, 4: 16, 5: 16, 6: 8, 7: 3, 8: 1}),
]

# TVM ResNet50 kernels at launches the interpreter can finish (a block or two of the real grid)
TVM_SAME_LAUNCHES = [
    ("conv2d2_kernel", (1, 1, 1), (8, 16, 1)),
    ("conv2d6_kernel", (1, 2, 1), (8, 16, 1)),
    ("conv2d1_kernel", (2, 1, 1), (8, 16, 1)),
    ("fused_transpose2_add_subtract_multiply1_add_relu_pad1_transpose3_kernel", (2, 1, 1), (1024, 1, 1)),
    ("max_pool2d_kernel", (2, 1, 1), (1024, 1, 1)),
    ("fused_matmul_add19_kernel", (2, 1, 1), (10, 16, 1)),
]

CNN_LAUNCHES = [
    ("vector_add", (100_000,), (256,), {3: 100_000 * 256 - 77}),
    ("grid_stride", (40_000,), (256,), {2: 2.0, 3: 50_000_000}),
    ("nested_const", (100_000,), (256,), {}),
    ("nested_param", (10_000,), (256,), {1: 64, 2: 64}),
    ("triangle", (10_000,), (256,), {1: 100}),
    ("stencil2d", (256, 256), (16, 16), {2: 4090, 3: 4090}),
    ("reduce_shared", (100_000,), (256,), {2: 100_000 * 256 - 5}),
    ("warp_reduce", (100_000,), (256,), {2: 100_000 * 256 - 5}),
    ("early_return", (50_000,), (256,), {2: 50_000 * 256 - 9, 3: 300}),
    ("matmul_tiled", (128, 128), (16, 16), {3: 2048, 4: 2048, 5: 1024}),
    ("conv2d_direct", (784,), (256,), {3: 64, 4: 56, 5: 56, 6: 64, 7: 3, 8: 1}),
    ("conv2d_direct", (3136,), (256,), {3: 128, 4: 28, 5: 28, 6: 1024, 7: 1, 8: 0}),
]


def _named(module, kernel, values):
    names = [p[0] for p in module.kernels[kernel].params]
    return {names[i]: v for i, v in values.items()}


def same_launches(console: Console, quick: bool) -> dict:
    corpus = parse_ptx(CORPUS.read_text(), str(CORPUS))
    tvm = parse_ptx(TVM_PTX.read_text(), str(TVM_PTX))
    rows, t_fast, t_ref, instr = [], 0.0, 0.0, 0
    launches = [(corpus, k, g, b, v) for k, g, b, v in (SAME_LAUNCHES[:4] if quick else SAME_LAUNCHES)]
    for k, g, b in TVM_SAME_LAUNCHES[:2] if quick else TVM_SAME_LAUNCHES:
        launches.append((tvm, k, g, b, {}))
    t_cold = 0.0
    for module, kernel, grid, block, values in tqdm(launches, desc="interpreter vs analyzer", file=sys.stderr):
        params = _named(module, kernel, values)
        fast = count_launch(module, kernel, grid, block, params)
        cold = fast.seconds
        fast.seconds = statistics.median(count_launch(module, kernel, grid, block, params).seconds
                                         for _ in range(5))
        t_cold += cold
        t0 = time.perf_counter()
        ref = Interpreter(module, kernel).run(grid, block, params)
        tr = time.perf_counter() - t0
        same = (fast.thread_instructions, fast.warp_instructions, fast.predicated_off) == (
            ref.thread_instructions, ref.warp_instructions, ref.predicated_off)
        if not same:
            raise SystemExit(f"MISMATCH on {kernel}: analyzer {fast.thread_instructions} vs interpreter "
                             f"{ref.thread_instructions}")
        t_fast += fast.seconds
        t_ref += tr
        instr += ref.thread_instructions
        rows.append({"kernel": ("tvm:" if module is tvm else "") + kernel, "grid": list(grid),
                     "block": list(block),
                     "thread_instructions": ref.thread_instructions, "analyzer_s": fast.seconds,
                     "analyzer_cold_s": cold, "interpreter_s": tr, "speedup": tr / fast.seconds,
                     "speedup_cold": tr / cold, "equal": same})
    table = Table(title="1. same launches: analyzer == interpreter")
    for col in ("kernel", "grid", "block", "thread instr", "analyzer warm s", "analyzer cold s",
                "interpreter s", "speed-up warm", "speed-up cold"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["kernel"], str(r["grid"]), str(r["block"]), f"{r['thread_instructions']:,}",
                      f"{r['analyzer_s']:.4f}", f"{r['analyzer_cold_s']:.4f}", f"{r['interpreter_s']:.2f}",
                      f"{r['speedup']:.0f}x", f"{r['speedup_cold']:.0f}x")
    table.add_row("TOTAL", "", "", f"{instr:,}", f"{t_fast:.3f}", f"{t_cold:.3f}", f"{t_ref:.2f}",
                  f"{t_ref / t_fast:.0f}x", f"{t_ref / t_cold:.0f}x")
    console.print(table)
    return {"launches": rows, "analyzer_s": t_fast, "analyzer_cold_s": t_cold, "interpreter_s": t_ref,
            "speedup": t_ref / t_fast, "speedup_cold": t_ref / t_cold, "thread_instructions": instr,
            "interpreter_instr_per_s": instr / t_ref}


def cnn_launches(console: Console, quick: bool) -> dict:
    module = parse_ptx(CORPUS.read_text(), str(CORPUS))
    rows, total = [], 0.0
    launches = CNN_LAUNCHES[:3] if quick else CNN_LAUNCHES
    for kernel, grid, block, values in tqdm(launches, desc="CNN-sized launches", file=sys.stderr):
        r = count_launch(module, kernel, grid, block, _named(module, kernel, values))
        total += r.seconds
        rows.append({"kernel": kernel, "grid": list(grid), "block": list(block), "threads":
                     r.grid[0] * r.grid[1] * r.grid[2] * r.block[0] * r.block[1] * r.block[2],
                     "thread_instructions": r.thread_instructions, "warp_instructions": r.warp_instructions,
                     "analyzer_s": r.seconds})
    table = Table(title="2. CNN-sized launches (analyzer only)")
    for col in ("kernel", "grid", "block", "threads", "thread instr", "analyzer s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["kernel"], str(r["grid"]), str(r["block"]), f"{r['threads']:,}",
                      f"{r['thread_instructions']:,}", f"{r['analyzer_s']:.3f}")
    table.add_row("TOTAL", "", "", "", "", f"{total:.3f}")
    console.print(table)
    return {"launches": rows, "analyzer_s": total}


def whole_network(console: Console, quick: bool, sample_limit: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    module = parse_ptx(TVM_PTX.read_text(), str(TVM_PTX))
    t_parse, c_parse = time.perf_counter() - t0, time.process_time() - c0
    meta = json.loads(TVM_LAUNCHES.read_text())
    launches = meta["launches"]
    t1, c1 = time.perf_counter(), time.process_time()
    total_instr = total_warp = 0
    per = []
    for lw in tqdm(launches, desc="TVM ResNet50 launches", file=sys.stderr):
        r = count_launch(module, lw["kernel"], lw["grid"], lw["block"], lw["params"] or None)
        if r.estimate:
            raise SystemExit(f"{lw['kernel']}: unexpected unresolved branches {r.unresolved_branches}")
        total_instr += r.thread_instructions * lw["calls"]
        total_warp += r.warp_instructions * lw["calls"]
        nb = lw["grid"][0] * lw["grid"][1] * lw["grid"][2]
        per.append((lw, r.thread_instructions // nb, r.seconds))
    t_an, c_an = time.perf_counter() - t1, time.process_time() - c1
    # interpreter throughput on one sampled block per kernel (blocks up to sample_limit instructions)
    sampled, s_instr, s_time = [], 0, 0.0
    candidates = [(lw, per_block) for lw, per_block, _ in per if per_block <= sample_limit]
    for lw, _ in tqdm(candidates[: 4 if quick else len(candidates)], desc="interpreter sample", file=sys.stderr):
        interp = Interpreter(module, lw["kernel"])
        ta = time.perf_counter()
        res = interp.run(lw["grid"], lw["block"], lw["params"] or None, blocks=[0])
        dt = time.perf_counter() - ta
        sampled.append({"kernel": lw["kernel"], "block_instructions": res.thread_instructions, "seconds": dt})
        s_instr += res.thread_instructions
        s_time += dt
    rate = s_instr / s_time
    interp_est = total_instr / rate
    out = {
        "model": meta["model"], "kernels": len(module.kernels), "launches": len(launches),
        "calls": sum(x["calls"] for x in launches), "thread_instructions": total_instr,
        "warp_instructions": total_warp, "parse_s": t_parse, "analyzer_s": t_an,
        "analyzer_plus_parse_s": t_parse + t_an, "cpu_parse_s": c_parse, "cpu_analyzer_s": c_an,
        "interpreter_sample": sampled, "interpreter_instr_per_s": rate,
        "interpreter_s_EXTRAPOLATED": interp_est, "speedup_EXTRAPOLATED": interp_est / (t_parse + t_an),
        "slowest_launches": sorted(({"kernel": lw["kernel"], "grid": lw["grid"], "block": lw["block"],
                                     "analyzer_s": s} for lw, _, s in per), key=lambda d: -d["analyzer_s"])[:5],
    }
    table = Table(title="3. whole network: TVM ResNet50 (one inference)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("kernels / launches / calls", f"{out['kernels']} / {out['launches']} / {out['calls']}")
    table.add_row("thread instructions (exact, no unresolved branch)", f"{total_instr:,}")
    table.add_row("parse s", f"{t_parse:.3f}")
    table.add_row("analysis s (all 44 launches)", f"{t_an:.3f}")
    table.add_row("parse + analysis s", f"{t_parse + t_an:.3f}")
    table.add_row("  the same as process CPU time s (less sensitive to other load)", f"{c_parse + c_an:.3f}")
    table.add_row(f"interpreter rate, {len(sampled)} sampled blocks (instr/s)", f"{rate:,.0f}")
    table.add_row("interpreter s for the network (EXTRAPOLATED from the rate)", f"{interp_est:,.0f}")
    table.add_row("speed-up (EXTRAPOLATED)", f"{out['speedup_EXTRAPOLATED']:,.0f}x")
    console.print(table)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few launches per part (smoke run)")
    ap.add_argument("--sample-limit", type=int, default=2_000_000,
                    help="largest per-block instruction count the interpreter samples in part 3")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "ptx_bench.json")
    args = ap.parse_args(argv)
    console = Console(width=170)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    console.print(f"[bold]PTX analysis benchmark[/] python {platform.python_version()} on {platform.node()}, "
                  f"{os.cpu_count()} CPUs, load average {load}")
    report = {"protocol": __doc__, "machine": {"cpus": os.cpu_count(), "load_average_start": load,
                                               "python": platform.python_version()}}
    report["same_launches"] = same_launches(console, args.quick)
    report["cnn_sized"] = cnn_launches(console, args.quick)
    report["whole_network"] = whole_network(console, args.quick, args.sample_limit)
    report["machine"]["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
