"""`python -m src.ingest`: the DVC `ingest` stage (parameters from params.yaml's `ingest` section)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from .gpus import UnknownGPUError
from .manifest import ManifestError
from .pipeline import rows_per_source_gpu, run, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.ingest", description=__doc__)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--mirror", type=Path, help="override params.yaml ingest.mirror")
    parser.add_argument("--cache", type=Path, default=Path("data/raw"), help="where downloads go")
    parser.add_argument("--own-dir", type=Path, default=Path("data/own"), help="our profiler's CSV files")
    parser.add_argument("--data-dir", type=Path, default=Path("data/processed"))
    parser.add_argument("--reports-dir", type=Path, default=Path("reports/ingest"))
    args = parser.parse_args(argv)
    params = yaml.safe_load(args.params.read_text())["ingest"] if args.params.exists() else {}
    mirror = args.mirror or Path(params.get("mirror", "../shared/data/raw"))
    console = Console()
    start = time.perf_counter()
    try:
        out = run(mirror, args.cache, bool(params.get("download_missing", True)),
                  int(params.get("warmup_iterations", 1)), args.own_dir)
    except (UnknownGPUError, ManifestError) as exc:
        console.print(f"[bold red]ingest failed:[/] {exc}")
        return 2
    info = write(out, args.data_dir, args.reports_dir)
    _print(console, info, out)
    console.print(f"ingest took {time.perf_counter() - start:.1f} s")
    return 0


def _print(console: Console, info: dict, out) -> None:
    table = Table(title="Rows per source (read = ingested + quarantined)")
    for col in ("source", "read", "ingested", "quarantined", "GPUs", "models", "quarantine reasons"):
        table.add_column(col)
    for source, s in info["per_source"].items():
        reasons = ", ".join(f"{k}: {v}" for k, v in s["quarantine_reasons"].items())
        table.add_row(source, str(s["read"]), str(s["ingested"]), str(s["quarantined"]), str(s["gpus"]),
                      str(s["models"]), reasons)
    console.print(table)
    grid = Table(title="Rows per source x GPU x mode")
    for col in ("source", "gpu", "mode", "rows", "models"):
        grid.add_column(col)
    for row in rows_per_source_gpu(out.measurements).itertuples(index=False):
        grid.add_row(row.source, row.gpu, row.mode, str(row.rows), str(row.models))
    console.print(grid)
    console.print(f"{info['rows']} rows, {info['distinct_gpus']} distinct GPUs, "
                  f"{info['distinct_models']} models ({info['distinct_cnn_models']} CNNs), "
                  f"{info['quarantined']} quarantined")


if __name__ == "__main__":
    sys.exit(main())
