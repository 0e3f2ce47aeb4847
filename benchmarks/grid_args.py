"""Command line shared by the warm-start grid benchmarks (loss_weight_bench, point_shift_bench): a model, a list
of protocols, the variants each compares, where the result goes, and Hydra overrides."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT  # noqa: E402
from src.train import PROTOCOLS  # noqa: E402

GRID_PROTOCOLS = ("random", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out")
# The pipeline's quick job holds GPUs out in 8 groups (params.yaml train.leave_gpu_out_groups).
DEFAULT_OVERRIDES = ("split.leave_gpu_out.n_groups=8",)


def grid_parser(doc: str, out_name: str) -> argparse.ArgumentParser:
    """--model, --protocols, --no-mlflow, --out (reports/bench/<out_name>) and the Hydra overrides."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--protocols", default=",".join(GRID_PROTOCOLS))
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / out_name))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (default: the pipeline's 8 leave_gpu_out groups)")
    return ap


def listed(text: str, known: Sequence[str] | None, what: str) -> list[str]:
    """A comma-separated list; with `known`, a name outside it stops the run, naming it and the choices."""
    names = [n for n in text.split(",") if n]
    unknown = sorted(set(names) - set(known)) if known is not None else []
    if unknown:
        raise SystemExit(f"unknown {what}(s) {unknown}; one of {list(known)}")
    return names


def protocols_and_overrides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    return listed(args.protocols, PROTOCOLS, "protocol"), list(args.overrides or DEFAULT_OVERRIDES)
