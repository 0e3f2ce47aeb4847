"""Command line: `python -m src.profiling {run,ncu,parse-ncu,models}` (see docs/profiling.md).

Exit status: 0 all configurations measured, 3 some failed (listed in the failures file; the rest is written),
2 bad arguments or an unusable device/tool (message on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from src.profiling.environment import DeviceUnavailableError
from src.profiling.harness import HARNESS_COMPILE_MODES, RunConfig
from src.profiling.models import default_models
from src.profiling.ncu import NCU_METRICS, NcuReportError, NcuRunError, kernels_table, read_ncu_csv
from src.profiling.ncu import summarize_network as summarize_ncu
from src.profiling.schema import LAYOUTS, MODES, PRECISIONS, OwnSchemaError

_COMPILE_ALIASES = {"eager": "eager", "compile": "torch_compile", "torch_compile": "torch_compile",
                    "torch.compile": "torch_compile", "cuda_graphs": "cuda_graphs", "graphs": "cuda_graphs"}


def _csv_list(allowed: tuple[str, ...] | None = None, aliases: dict[str, str] | None = None):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if aliases:
            unknown = [t for t in items if t not in aliases]
            if unknown:
                raise argparse.ArgumentTypeError(f"unknown value(s) {unknown}; choose from {sorted(aliases)}")
            items = [aliases[t] for t in items]
        if allowed:
            unknown = [t for t in items if t not in allowed]
            if unknown:
                raise argparse.ArgumentTypeError(f"unknown value(s) {unknown}; choose from {list(allowed)}")
        return list(dict.fromkeys(items))

    return parse


def _int_list(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be integers >= 1, got {text!r}")
    return list(dict.fromkeys(values))


def _models(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if items == ["default"]:
        return default_models()
    return items


def _add_config_args(p: argparse.ArgumentParser, default_device: str) -> None:
    p.add_argument("--models", type=_models, default=None,
                   help="comma-separated model names ([torchvision:|timm:|keras:]name) or 'default'")
    p.add_argument("--batch-sizes", type=_int_list, default=[1, 8], help="e.g. 1,8,32 (default 1,8)")
    p.add_argument("--precisions", type=_csv_list(PRECISIONS), default=["fp32"],
                   help=f"comma-separated, from {list(PRECISIONS)} (default fp32)")
    p.add_argument("--layout", type=_csv_list(LAYOUTS), default=["nchw"], help="nchw, nhwc or nchw,nhwc")
    p.add_argument("--compile", type=_csv_list(aliases=_COMPILE_ALIASES), default=["eager"],
                   help="eager, torch_compile (alias: compile), cuda_graphs (inference: the eager forward "
                   "replayed from a CUDA graph), comma-separated")
    p.add_argument("--mode", type=_csv_list(MODES), default=["inference"], help="inference, training or both")
    p.add_argument("--img-size", type=int, default=None, help="input resolution (default: the model's own)")
    p.add_argument("--device", default=default_device, help="cpu, cuda or cuda:N")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failing configuration")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m src.profiling", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="time configurations and write own measurement rows (CSV)")
    _add_config_args(run, default_device="cuda")
    run.add_argument("--warmup", type=int, default=10, help="untimed iterations first (default 10)")
    run.add_argument("--iters", type=int, default=50, help="timed iterations (default 50)")
    run.add_argument("--out", type=Path, required=True, help="output CSV, e.g. data/own/h100_default.csv")
    run.add_argument("--keep-ptx", action="store_true",
                     help="torch_compile configs: keep Triton PTX + launch grids under <out stem>/ptx/")
    run.add_argument("--no-gmacs", action="store_true", help="skip the GMAC count (FlopCounterMode, CPU)")
    run.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    run.add_argument("--time-budget-s", type=float, default=None,
                     help="start no configuration after this many seconds; the rest are listed as not_run")

    ncu = sub.add_parser("ncu", help="profile one step per configuration under Nsight Compute")
    _add_config_args(ncu, default_device="cuda")
    ncu.add_argument("--warmup", type=int, default=3, help="untimed steps before the profiled one (default 3)")
    ncu.add_argument("--out-dir", type=Path, required=True, help="e.g. data/own/ncu/h100_default")
    ncu.add_argument("--ncu", default=None, help="path of the ncu binary (default: PATH, /usr/local/cuda/bin)")
    ncu.add_argument("--timeout", type=float, default=540, help="seconds per configuration (default 540)")
    ncu.add_argument("--keep-ptx", action="store_true",
                     help="torch_compile configs: keep Triton PTX and compare with the PTX analyzer")
    ncu.add_argument("--print-command", action="store_true", help="print the ncu command lines and exit")

    parse = sub.add_parser("parse-ncu", help="parse an existing `ncu --csv` report (long or wide layout)")
    parse.add_argument("report", type=Path)
    parse.add_argument("--kernels-out", type=Path, default=None, help="write the per-launch table here")
    parse.add_argument("--any-metrics", action="store_true",
                       help="do not require the profiler's metric list, only consistency across launches")

    traces = sub.add_parser("traces", help="kernel counts of `_target --trace-out` traces in a folder (CSV)")
    traces.add_argument("folder", type=Path, help="folder of <slug>.json traces with <slug>.info.json beside")
    traces.add_argument("--out", type=Path, required=True, help="output CSV")

    sub.add_parser("models", help="print the default model list")

    target = sub.add_parser("_target", help=argparse.SUPPRESS)
    target.add_argument("--model", required=True)
    target.add_argument("--batch-size", type=int, required=True)
    target.add_argument("--precision", choices=PRECISIONS, default="fp32")
    target.add_argument("--layout", choices=LAYOUTS, default="nchw")
    target.add_argument("--compile", choices=HARNESS_COMPILE_MODES, default="eager")
    target.add_argument("--mode", choices=MODES, default="inference")
    target.add_argument("--img-size", type=int, default=None)
    target.add_argument("--device", default="cuda")
    target.add_argument("--warmup", type=int, default=3)
    target.add_argument("--compile-backend", default="inductor")
    target.add_argument("--info-out", type=Path, default=None)
    target.add_argument("--trace-out", type=Path, default=None)
    return parser


def _configs(args: argparse.Namespace):
    from src.profiling.runner import expand_configs

    models = args.models if args.models is not None else default_models()
    return expand_configs(models, args.batch_sizes, args.precisions, args.layout, args.compile, args.mode,
                          img_size=args.img_size)


def _report(rows: int, failures: list[dict], where: Path) -> int:
    print(f"{rows} configuration(s) measured -> {where}")
    if failures:
        print(f"{len(failures)} configuration(s) FAILED (details in the failures file):", file=sys.stderr)
        for f in failures[:20]:
            print(f"  {f['model']} bs{f['batch_size']} {f['precision']} {f['memory_layout']} {f['compile_mode']}"
                  f" {f['mode']} [{f['stage']}]: {f['error'][:300]}", file=sys.stderr)
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "models":
            print("\n".join(default_models()))
            return 0
        if args.command == "parse-ncu":
            report = read_ncu_csv(args.report, required=None if args.any_metrics else NCU_METRICS)
            table = kernels_table(report)
            if args.kernels_out:
                args.kernels_out.parent.mkdir(parents=True, exist_ok=True)
                table.to_csv(args.kernels_out, index=False)
            print(f"{args.report}: {len(table)} kernel launch(es), {report.layout} layout")
            if not args.any_metrics:
                for key, value in summarize_ncu(report.kernels).items():
                    print(f"  {key:26s} {value:.6g}")
            return 0
        if args.command == "traces":
            from src.profiling.trace import summarize_traces

            table = summarize_traces(args.folder)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            table.to_csv(args.out, index=False)
            print(f"{len(table)} trace(s) summarised -> {args.out}")
            return 0
        if args.command == "_target":
            from src.profiling.target import run_target

            cfg = RunConfig(model=args.model, batch_size=args.batch_size, precision=args.precision,
                            memory_layout=args.layout, compile_mode=args.compile, mode=args.mode,
                            img_size=args.img_size)
            run_target(cfg, args.device, args.warmup, info_out=args.info_out, trace_out=args.trace_out,
                       compile_backend=args.compile_backend)
            return 0
        if args.command == "run":
            from src.profiling.runner import run_timing

            if args.warmup < 0 or args.iters < 1:
                raise ValueError("--warmup must be >= 0 and --iters >= 1")
            result = run_timing(_configs(args), args.device, args.out, warmup=args.warmup, iters=args.iters,
                                compile_backend=args.compile_backend, with_gmacs=not args.no_gmacs,
                                keep_ptx=args.keep_ptx, fail_fast=args.fail_fast, progress=not args.no_progress,
                                overwrite=args.overwrite, time_budget_s=args.time_budget_s)
            return _report(len(result.rows), result.failures, args.out)
        if args.command == "ncu":
            from src.profiling.ncu import import_command, ncu_command
            from src.profiling.runner import find_ncu, run_ncu, slug, target_argv

            configs = _configs(args)
            if args.print_command:
                exe = args.ncu or "ncu"
                for cfg in configs:
                    rep = args.out_dir / "reports" / slug(cfg)
                    info = args.out_dir / "reports" / f"{slug(cfg)}.target.json"
                    print(" ".join(ncu_command(exe, rep, target_argv(cfg, args.device, args.warmup, info,
                                                                     args.compile_backend))))
                    print(" ".join(import_command(exe, rep.with_name(rep.name + ".ncu-rep"))))
                return 0
            ncu = find_ncu(args.ncu)
            frame, failures = run_ncu(configs, args.out_dir, ncu=ncu, device=args.device, warmup=args.warmup,
                                      timeout_s=args.timeout, keep_ptx=args.keep_ptx,
                                      compile_backend=args.compile_backend, fail_fast=args.fail_fast,
                                      progress=not args.no_progress)
            return _report(len(frame), failures, args.out_dir / "networks.csv")
    except (DeviceUnavailableError, NcuRunError, NcuReportError, OwnSchemaError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
