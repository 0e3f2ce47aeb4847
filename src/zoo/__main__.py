"""CLI: `python -m src.zoo {static,ptx,table,list}` (see docs/zoo.md).

Examples:
  python -m src.zoo static --source keras --model EfficientNetB0 --json
  python -m src.zoo ptx --source keras --model ResNet50 --arch sm_86 --batch 1 --json
  python -m src.zoo table            # the DVC stage `ptx` (paths and options from params.yaml `ptx:`)
  python -m src.zoo layers --source torchvision --model resnet18 --batch 8 --json   # per-operator table
  python -m src.zoo layers-table     # the DVC stage `layers` (params.yaml `layers:`)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from src.zoo.names import KERAS_JAX_ONLY, UnknownModelError, check_source, keras_name
from src.zoo.resolve import MissingFrameworkError, UnsupportedModelError


def _print(obj: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, indent=None if as_json else 1, default=str))
        return
    for k, v in obj.items():
        print(f"{k:>24}: {v}")


def _needs_jax(source: str, model: str) -> bool:
    if source != "keras":
        return False
    try:
        return keras_name(model) in KERAS_JAX_ONLY
    except UnknownModelError:
        return False


def cmd_static(args: argparse.Namespace) -> int:
    source = check_source(args.source)
    if _needs_jax(source, args.model) and os.environ.get("KERAS_BACKEND", "torch") != "jax":
        # Keras' backend is fixed per process: NASNet builds only on JAX, so rerun in a JAX process.
        env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
        return subprocess.call([sys.executable, "-m", "src.zoo", *sys.argv[1:]], env=env)
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    t0 = time.perf_counter()
    feats = static_features(build(source, args.model, args.input_size))
    feats["seconds"] = round(time.perf_counter() - t0, 3)
    _print(feats, args.json)
    return 0


def cmd_layers(args: argparse.Namespace) -> int:
    """Per-operator table of one model (src/zoo/layers.py) priced at a batch size and precision, plus sums
    (src/zoo/layer_pricing.py)."""
    from src.zoo.layer_pricing import bytes_per_element, price, sums
    from src.zoo.layers import PASSES, layer_table

    source = check_source(args.source)
    bytes_per_element(args.precision)  # an unknown precision stops before building anything
    if _needs_jax(source, args.model):
        raise SystemExit(f"error: {args.model} builds only on Keras' JAX backend; per-layer tables record torch "
                         "operators (Keras' torch backend), so it is not supported")
    which = args.passes or ("forward" if source == "onnx" else "all")  # an ONNX file is an inference graph
    passes = PASSES if which == "all" else tuple(dict.fromkeys(
        ["forward"] if which == "forward" else ["train_forward", "backward"]))
    df = layer_table(source, args.model, args.input_size, passes=passes)
    priced = price(df, args.batch, args.precision)
    totals = sums(df, args.batch, args.precision)
    meta = {"source": df.attrs["source"], "model": df.attrs["model"], "img_size": df.attrs["img_size"],
            "batch_size": args.batch, "precision": args.precision, "framework": df.attrs["framework"],
            "build": df.attrs["build"], "fitted_batches": {k: list(v) for k, v in df.attrs["batches"].items()},
            "seconds": round(df.attrs["seconds"], 3)}
    if df.attrs.get("unclassified_ops"):
        meta["unclassified_ops"] = df.attrs["unclassified_ops"]
        print(f"warning: ONNX op types priced by their bytes only (no FLOP rule): {df.attrs['unclassified_ops']}",
              file=sys.stderr)
    if args.json:
        cols = [c for c in priced.columns if c not in ("zoo_source", "zoo_model", "img_size")]
        rows = [{k: v for k, v in r.items() if v is not None and v == v}
                for r in priced[cols].astype(object).to_dict(orient="records")]
        print(json.dumps({**meta, "sums": totals, "layers": rows}, default=str))
        return 0
    show = priced if args.all_ops else priced.loc[priced["launches_kernel"]]
    cols = ["pass", "op_index", "op", "kind", "out_shape", "macs", "flops", "bytes_read_inputs",
            "bytes_read_weights", "bytes_written"]
    with_conv = show["c_in"].notna()
    text = show[cols].copy()
    text["conv"] = ""
    text.loc[with_conv, "conv"] = [
        f"{int(r.c_in)}->{int(r.c_out)} {int(r.kernel_r)}x{int(r.kernel_s)}/s{int(r.stride_h)} p{int(r.pad_h)} "
        f"g{int(r.groups)} @{int(r.in_h)}x{int(r.in_w)}" for r in show.loc[with_conv].itertuples()]
    print(text.to_string(index=False, max_rows=args.max_rows))
    for k, v in meta.items():
        print(f"{k:>24}: {v}")
    for p, t in totals.items():
        print(f"{'sums ' + p:>24}: " + ", ".join(f"{k} {v:.6g}" for k, v in t.items()))
    return 0


def cmd_layers_table(args: argparse.Namespace) -> int:
    from src.zoo.layers_stage import run_layers_stage

    root = Path.cwd()
    p = _params(root, "layers")
    summary = run_layers_stage(
        measurements=root / p.get("measurements", "data/processed/measurements.parquet"),
        gpus_path=root / p.get("gpus", "data/processed/gpus.parquet"),
        static_path=root / p.get("static", "data/processed/static_features.parquet"),
        out_table=root / p.get("table", "data/processed/layers.parquet"),
        out_failures=root / p.get("failures", "data/processed/layers_failures.csv"),
        out_summary=root / p.get("summary", "reports/zoo/layers_summary.json"),
        workers=int(args.workers if args.workers is not None else p.get("workers", 2)),
        model_timeout_s=p.get("model_timeout_s", 300),
        sources=args.sources or p.get("sources"),
        limit=args.limit if args.limit is not None else p.get("limit"),
        retry_failed=args.retry_failed,
        time_budget_s=args.time_budget if args.time_budget is not None else p.get("time_budget_s"),
        offline_only=args.offline_only,
    )
    print(json.dumps({k: summary[k] for k in ("coverage", "failures", "failures_by_reason", "seconds_per_cnn",
                                              "table_rows", "table_bytes", "pairs_built_now", "reused_pairs",
                                              "skipped_missing_extra", "stage_seconds")}, indent=1, default=str))
    return 0


def cmd_ptx(args: argparse.Namespace) -> int:
    from src.zoo.pipeline import ptx_features

    source = check_source(args.source)
    if _needs_jax(source, args.model):
        raise SystemExit(f"error: {args.model} builds only on Keras' JAX backend, which TVM cannot import "
                         "(TVM reads torch.export or ONNX): no PTX for it")
    workdir = Path(args.workdir) if args.workdir else None
    r = ptx_features(source, args.model, args.input_size, args.batch, [args.arch], workdir=workdir,
                     kernel_cache=Path(args.kernel_cache) if args.kernel_cache else None,
                     materialise_gates=args.materialise_gates)
    c = r["by_arch"][args.arch]
    out = {
        "source": r["source"], "model": r["model"], "img_size": r["img_size"], "batch_size": r["batch_size"],
        "arch": args.arch, "nvcc_arch": c["ptx_arch"],
        "thread_instructions": c["thread_instructions"], "warp_instructions": c["warp_instructions"],
        "predicated_off": c["predicated_off"], "by_class": c["by_class"], "bytes_by_space": c["bytes_by_space"],
        "kernels": c["kernels"], "launches": c["launches"], "estimate": c["estimate"],
        "seconds": round(r["seconds"], 3), "stage_seconds": r["stage_seconds"],
    }
    if args.materialise_gates:
        out["gates_materialised"] = r["gates_materialised"]
    if args.per_kernel:
        out["per_kernel"] = c["per_kernel"]
    _print(out, args.json)
    return 0


def _params(root: Path, section: str = "ptx") -> dict[str, Any]:
    import yaml

    path = root / "params.yaml"
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    return dict((data or {}).get(section) or {})


def _shard(text: str | None) -> tuple[int, int]:
    if not text:
        return (0, 1)
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError as exc:
        raise SystemExit(f"error: --shard {text!r}: expected I/N, e.g. 0/2") from exc
    if not 0 <= i < n:
        raise SystemExit(f"error: --shard {text!r}: need 0 <= I < N")
    return (i, n)


# Paths of the `ptx` stage (params.yaml `ptx:`), relative to the repository root.
STAGE_PATHS = {"measurements": "data/processed/measurements.parquet", "gpus": "data/processed/gpus.parquet",
               "cache": "data/interim/ptx", "counts": "data/processed/ptx_counts.parquet",
               "kernels": "data/processed/ptx_kernels.parquet", "failures": "data/processed/ptx_failures.csv",
               "static": "data/processed/static_features.parquet",
               "batch_failures": "data/processed/ptx_batch_failures.csv", "summary": "reports/zoo/ptx_summary.json"}


def _stage(root: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """The `ptx` params and the stage's paths under `root`."""
    p = _params(root)
    return p, {k: root / p.get(k, default) for k, default in STAGE_PATHS.items()}


def cmd_table(args: argparse.Namespace) -> int:
    from src.zoo.table import run_table, write_stage_reports

    p, path = _stage(Path.cwd())
    summary = run_table(
        measurements=path["measurements"], gpus_path=path["gpus"], cache=path["cache"],
        out_counts=path["counts"], out_failures=path["failures"], out_static=path["static"],
        out_kernels=path["kernels"], prev_batch_failures=path["batch_failures"],
        extra_batches=[int(b) for b in (p.get("extra_batches") or [])],
        batch=int(args.batch or p.get("batch", 1)),
        sources=args.sources or p.get("sources"),
        limit=args.limit if args.limit is not None else p.get("limit"),
        retry_failed=args.retry_failed,
        time_budget_s=args.time_budget if args.time_budget is not None else p.get("time_budget_s"),
        offline_only=args.offline_only,
        nvcc_archs=p.get("nvcc_archs"),
        shard=_shard(args.shard),
        recount=args.recount,
        model_timeout_s=p.get("model_timeout_s", 900),
    )
    print(json.dumps(summary, indent=1, default=str))
    write_stage_reports(summary, path["batch_failures"], path["summary"])
    return 0


def cmd_warm(args: argparse.Namespace) -> int:
    from src.zoo.warm import warm

    p, path = _stage(Path.cwd())
    summary = warm(
        measurements=path["measurements"], gpus_path=path["gpus"], cache=path["cache"], counts=path["counts"],
        kernels=path["kernels"], failures_path=path["failures"], batch_failures_path=path["batch_failures"],
        batch=int(args.batch if args.batch is not None else p.get("batch", 1)),
        base_batch=int(p.get("batch", 1)),
        extra_batches=[int(b) for b in (p.get("extra_batches") or [])],
        nvcc_archs=p.get("nvcc_archs"),
        shard=_shard(args.shard),
        time_budget_s=args.time_budget,
        model_timeout_s=p.get("model_timeout_s", 900),
        limit=args.limit,
        models=args.models,
    )
    print(json.dumps(summary, indent=1, default=str))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from src.zoo.names import DLINFBENCH, KERAS_APPLICATIONS, TF_CNN_BENCHMARKS, TORCHVISION_MODELS

    src = check_source(args.source) if args.source not in ("tf_cnn_benchmarks", "dlinfbench") else args.source
    if src == "keras":
        names = [f"{k} ({v}px)" for k, v in KERAS_APPLICATIONS.items()]
    elif src == "torchvision":
        names = sorted(TORCHVISION_MODELS)
    elif src == "tf_cnn_benchmarks":
        names = [f"{k} -> {s}:{m}" for k, (s, m) in TF_CNN_BENCHMARKS.items()]
    elif src == "dlinfbench":
        names = [f"{k} -> {s}:{m}" for k, (s, m) in DLINFBENCH.items()]
    elif src == "timm":
        import timm

        from src.zoo.definitions import DEFINITIONS

        # plus the architectures written down from their sources (src/zoo/definitions.py)
        names = timm.list_models() + [f"{k} (definition: {d.reference})" for k, d in sorted(DEFINITIONS.items())]
    else:
        names = ["(any .onnx file path)"]
    print("\n".join(names))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m src.zoo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("static", "ptx"):
        sp = sub.add_parser(name, help=f"{name} features of one model")
        sp.add_argument("--source", required=True, help="keras | torchvision | timm | onnx")
        sp.add_argument("--model", required=True, help="model name (or ONNX file path with --source onnx)")
        sp.add_argument("--input-size", type=int, default=None, help="square input size (default: model's)")
        sp.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "ptx":
            sp.add_argument("--arch", default="sm_86", help="CUDA arch, e.g. sm_86 (default)")
            sp.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
            sp.add_argument("--workdir", default=None, help="keep CUDA C, PTX and launch list here")
            sp.add_argument("--per-kernel", action="store_true",
                            help="include one row per kernel launch site (operators, grid, block, calls, counts)")
            sp.add_argument("--kernel-cache", default=None,
                            help="reuse/extend this kernel cache (e.g. data/interim/ptx/kernels): kernels already "
                                 "there are neither compiled nor counted again")
            sp.add_argument("--materialise-gates", action="store_true",
                            help="compile the variant that does not fuse squeeze-excite gate convolutions into "
                                 "the full-size multiply (src/zoo/gates.py; the `table` stage uses it for a CNN "
                                 "whose default schedule recomputes them)")
    tp = sub.add_parser("table", help="the DVC stage: counts for every measured CNN (params.yaml ptx:)")
    tp.add_argument("--batch", type=int, default=None, help="compiled batch size (default params ptx.batch)")
    tp.add_argument("--sources", nargs="*", default=None, help="model_source filter (timm, torchvision, ...)")
    tp.add_argument("--limit", type=int, default=None, help="only the first N targets (most GPUs first)")
    tp.add_argument("--time-budget", type=float, default=None, help="stop compiling new models after S s")
    tp.add_argument("--shard", default=None, help="I/N: only every N-th target from the I-th (parallel runs)")
    tp.add_argument("--recount", action="store_true",
                    help="recount cached models from their PTX + launch lists (after a PTX-analyzer change)")
    tp.add_argument("--retry-failed", action="store_true", help="retry cached failures")
    tp.add_argument("--offline-only", action="store_true",
                    help="never compile: write the tables from the cache / committed tables only")
    wp = sub.add_parser("warm", help="fill the ptx stage's cache ahead of it, one process per shard (src/zoo/warm.py)")
    wp.add_argument("--batch", type=int, default=None,
                    help="compiled batch: params ptx.batch (CNNs not counted yet) or one of ptx.extra_batches")
    wp.add_argument("--shard", default=None, help="I/N: every N-th target from the I-th (one process per core)")
    wp.add_argument("--time-budget", type=float, default=None, help="start no new CNN after S s")
    wp.add_argument("--limit", type=int, default=None, help="only the first N targets of this shard")
    wp.add_argument("--models", nargs="+", default=None, metavar="PATTERN",
                    help="only model keys matching these shell patterns, computed even if the tables hold them "
                         "(e.g. after a change in how they compile); cached failures are retried")
    yp = sub.add_parser("layers", help="per-operator table of one model (meta device; src/zoo/layers.py)")
    yp.add_argument("--source", required=True, help="keras | torchvision | timm | onnx")
    yp.add_argument("--model", required=True, help="model name (or ONNX file path with --source onnx)")
    yp.add_argument("--input-size", type=int, default=None, help="square input size (default: model's)")
    yp.add_argument("--batch", type=int, default=1, help="batch size the table is priced at (default 1)")
    yp.add_argument("--precision", default="fp32", help="element size for bytes: fp32 (default), fp16, bf16, "
                                                         "amp_fp16, int8, fp64, ...")
    yp.add_argument("--passes", choices=("forward", "training", "all"), default=None,
                    help="forward (inference), training (train_forward + backward) or all (default; an ONNX file "
                         "has the forward pass only)")
    yp.add_argument("--all-ops", action="store_true", help="text output: also ops that launch no kernel")
    yp.add_argument("--max-rows", type=int, default=None, help="text output: at most this many rows")
    yp.add_argument("--json", action="store_true", help="print one JSON object (every op, and the sums)")
    ltp = sub.add_parser("layers-table", help="the DVC stage `layers`: per-layer tables of every measured CNN")
    ltp.add_argument("--workers", type=int, default=None, help="worker processes (default params layers.workers; "
                                                               "0 = in this process)")
    ltp.add_argument("--sources", nargs="*", default=None, help="model_source filter (timm, torchvision, ...)")
    ltp.add_argument("--limit", type=int, default=None, help="only the first N targets")
    ltp.add_argument("--time-budget", type=float, default=None, help="stop starting new models after S s")
    ltp.add_argument("--retry-failed", action="store_true", help="retry pairs in the failure table")
    ltp.add_argument("--offline-only", action="store_true", help="never build: reuse the committed rows only")
    lp = sub.add_parser("list", help="known model names of a source")
    lp.add_argument("source", help="keras | torchvision | timm | tf_cnn_benchmarks | dlinfbench")
    args = ap.parse_args(argv)
    try:
        return {"static": cmd_static, "ptx": cmd_ptx, "table": cmd_table, "warm": cmd_warm, "list": cmd_list,
                "layers": cmd_layers, "layers-table": cmd_layers_table}[args.cmd](args)
    except UnknownModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (UnsupportedModelError, MissingFrameworkError, ValueError) as exc:
        if args.cmd != "layers":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
