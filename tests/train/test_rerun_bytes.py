"""A rerun of train -> evaluate -> register on the same code and data writes the same bytes (issue 15 item 4).

What a fresh clone's `dvc repro` writes into git must not depend on the run: two complete runs of the same models
into two fresh MLflow and Optuna stores must give byte-identical reports (per-model metrics.json, every file of
the protocol folders DVC hashes into dvc.lock, the evaluate table, registry.json). Only the run logs
(reports/train/runs/, git-ignored) differ: they name each run's MLflow ids, commit and timings.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from src.config import compose
from src.evaluate.__main__ import collect
from src.register.__main__ import run_register
from src.register.registry import split_run_log
from src.tracking import RUN_LOG_DIR
from src.train.run import train
from tests.train.tiny import overrides

MODELS = ("dt", "knn")


def pipeline_run(base: Path, ov: list[str], name: str) -> Path:
    """Train MODELS, collect, register, into stores and a reports folder of their own; returns that folder."""
    work = base / name
    ov = [*ov, f"mlflow.tracking_uri=sqlite:///{work}/mlflow.db", f"mlflow.artifact_root=file://{work}/mlartifacts",
          f"sweep.storage=sqlite:///{work}/optuna.db", f"reports_dir={work}/reports"]
    for m in MODELS:
        train(OmegaConf.to_container(compose([*ov, f"model={m}"]), resolve=True))
    table, _ = collect(work / "reports", MODELS)
    (work / "metrics.json").write_text(json.dumps(table, indent=2) + "\n")
    c = OmegaConf.to_container(compose([*ov, f"register.metrics={work / 'metrics.json'}",
                                        "register.allow_dirty=true"]), resolve=True)
    stable, run_log = split_run_log(run_register(c))
    (work / "reports" / "registry.json").write_text(json.dumps(stable, indent=2) + "\n")
    (work / "registry_run_log.json").write_text(json.dumps(run_log, indent=2) + "\n")
    return work


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and RUN_LOG_DIR not in p.relative_to(folder).parts}


def test_second_run_writes_the_same_bytes(tmp_path):
    ov = overrides(tmp_path, n_trials=2, protocols="[random,leave_gpu_out]")
    first, second = pipeline_run(tmp_path, ov, "first"), pipeline_run(tmp_path, ov, "second")
    a, b = files(first / "reports"), files(second / "reports")
    assert set(a) == set(b)
    assert {"dt/metrics.json", "knn/random/trials.csv", "dt/leave_gpu_out/predictions.csv", "registry.json",
            "dt/random/importance_perm.png"} <= set(a)
    differ = sorted(k for k in a if a[k] != b[k] and k != "registry.json")
    assert not differ, f"rerun changed {differ}"
    # registry.json names the metrics file it registered from: here each run's own (absolute) path
    reg = [json.loads(x["registry.json"]) for x in (a, b)]
    assert [r.pop("metrics") for r in reg] == [str(first / "metrics.json"), str(second / "metrics.json")]
    assert reg[0] == reg[1]
    assert (first / "metrics.json").read_bytes() == (second / "metrics.json").read_bytes()
    # ... while each run has its own MLflow runs and registry versions, named only by the run logs
    runs = [json.loads((w / "reports" / RUN_LOG_DIR / "dt.json").read_text()) for w in (first, second)]
    assert runs[0]["protocols"]["random"]["run_id"] != runs[1]["protocols"]["random"]["run_id"]
    regs = [json.loads((w / "registry_run_log.json").read_text()) for w in (first, second)]
    assert regs[0]["dt"]["run_id"] == runs[0]["protocols"]["random"]["run_id"]
    assert regs[1]["dt"]["run_id"] == runs[1]["protocols"]["random"]["run_id"]
