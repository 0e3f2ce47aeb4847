"""The real processed tables for tests: the repo's data/processed if present, else a fresh ingest into a temp dir.

Why: the DSE and e2e tests fit small models on slices of the REAL measurement table (no synthetic data), and a
fresh clone has no DVC outputs; the ingest stage rebuilds them from ../shared/data/raw and the committed
data/own rows in about fifteen seconds, so CI's tables equal the pipeline's (without data/own, CI once saw 1,449
fewer rows than a developer's checkout and a test passed here and failed there).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def processed_dir(tmp: Path) -> Path:
    here = REPO / "data" / "processed"
    if (here / "measurements.parquet").exists() and (here / "gpus.parquet").exists():
        return here
    out = tmp / "processed"
    own = REPO / "data" / "own"
    proc = subprocess.run([sys.executable, "-m", "src.ingest", "--data-dir", str(out), "--reports-dir",
                           str(tmp / "reports"), "--cache", str(tmp / "cache"), "--own-dir", str(own)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"ingest for tests failed: {proc.stderr[-2000:]}")
    return out


def committed_table(processed: Path, name: str) -> Path:
    """A table the ingest does not write (static features, PTX counts: outputs of the `ptx` stage, committed to
    git): the one beside the ingested tables if present, else the repo's committed copy (a fresh clone)."""
    here = processed / name
    return here if here.exists() else REPO / "data" / "processed" / name


def overrides(processed: Path, tmp: Path) -> list[str]:
    """Hydra overrides: real tables, temp MLflow store and artifact root, temp dataset output."""
    return [f"data.measurements={processed / 'measurements.parquet'}", f"data.gpus={processed / 'gpus.parquet'}",
            f"data.static_features={committed_table(processed, 'static_features.parquet')}",
            f"data.ptx_counts={committed_table(processed, 'ptx_counts.parquet')}",
            f"data.dataset={tmp / 'dataset.parquet'}",
            f"data.kernel_profiles={tmp / 'kernel_profiles.parquet'}",
            f"mlflow.tracking_uri=sqlite:///{tmp}/mlflow.db", f"mlflow.artifact_root=file://{tmp}/mlartifacts"]
