"""Command line: `python -m src.ptx count FILE.ptx --kernel NAME --grid X[,Y[,Z]] --block X[,Y[,Z]] ...`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from src.ptx.count import count_launch
from src.ptx.errors import AnalysisError, UnresolvedBranchError
from src.ptx.parser import parse_ptx
from src.ptx.syntax import PtxSyntaxError


def _dims(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected X[,Y[,Z]] positive integers, got {text!r}") from exc
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected 1 to 3 positive integers, got {text!r}")
    return dims


def _param(text: str) -> tuple[str, int | float]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=INT, got {text!r}")
    try:
        return name, int(value, 0)
    except ValueError:
        try:
            return name, float(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"parameter {name!r}: {value!r} is not a number") from exc


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m src.ptx", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("count", help="count the instructions one kernel launch executes (no GPU needed)")
    c.add_argument("file", type=Path, help="PTX file")
    c.add_argument("--kernel", help="kernel name; without it, list the kernels and their parameters")
    c.add_argument("--grid", type=_dims, help="grid dimensions X[,Y[,Z]]")
    c.add_argument("--block", type=_dims, help="block dimensions X[,Y[,Z]]")
    c.add_argument("--param", type=_param, action="append", default=[], metavar="NAME=INT",
                   help="scalar parameter by PTX name or 0-based index (repeatable); pointers may be omitted")
    c.add_argument("--policy", default="error",
                   help="data-dependent branches: error (default), bounds, taken, not_taken, probability:P")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        text = args.file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    try:
        module = parse_ptx(text, str(args.file))
    except PtxSyntaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.kernel:
        kernels = {name: [{"name": p, "type": t} for p, t in k.params] for name, k in module.kernels.items()}
        if args.json:
            print(json.dumps({"file": str(args.file), "kernels": kernels}, indent=1))
        else:
            for name, params in kernels.items():
                print(name + "(" + ", ".join(f"{i}:{p['name']} {p['type']}" for i, p in enumerate(params)) + ")")
        return 0
    if args.grid is None or args.block is None:
        print("error: --grid and --block are required with --kernel", file=sys.stderr)
        return 2
    params: dict[str, int | float] = {}
    for name, value in args.param:
        if name in params:
            print(f"error: --param {name} given twice ({name}={params[name]} and {name}={value})", file=sys.stderr)
            return 2
        params[name] = value
    try:
        res = count_launch(module, args.kernel, args.grid, args.block, params, policy=args.policy)
    except UnresolvedBranchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyError as exc:  # unknown kernel: the message, not the KeyError's quoted repr
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except (AnalysisError, PtxSyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res.to_dict()))
        return 0
    print(f"kernel {res.kernel} grid {res.grid} block {res.block}")
    print(f"  thread instructions {res.thread_instructions:,}")
    print(f"  warp instructions   {res.warp_instructions:,}")
    print(f"  predicated off      {res.predicated_off:,}")
    for k, v in res.by_class.items():
        print(f"    {k:<14} {v:,}")
    for k, v in res.bytes_by_space.items():
        print(f"  bytes {k:<14} {v:,}")
    if res.estimate:
        print(f"  ESTIMATE (policy {res.policy}); unresolved branches:")
        for b in res.unresolved_branches:
            print(f"    {b}")
    print(f"  {res.seconds:.4f} s")
    return 0
