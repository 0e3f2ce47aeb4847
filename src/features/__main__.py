"""DVC stage `features`: build data/processed/dataset.parquet and reports/train/dataset.json.

Usage: python -m src.features [hydra overrides, e.g. features=static data.max_rows=5000]
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from src.features.dataset import build_dataset
from src.train.config import REPO_ROOT, register_resolvers

register_resolvers()
log = logging.getLogger("cnnperf.features")


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    c = OmegaConf.to_container(cfg, resolve=True)
    df, report, ptx = build_dataset(REPO_ROOT, c["data"], c["features"], c["target"], seed=c["seed"])
    out = REPO_ROOT / c["data"]["dataset"]
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    rep_dir = REPO_ROOT / c["reports_dir"]
    rep_dir.mkdir(parents=True, exist_ok=True)
    summary = {"features": c["features"]["name"], "target": c["target"]["name"], "ptx_features": ptx,
               **report.as_dict()}
    Path(rep_dir / "dataset.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("dataset: %d of %d rows -> %s", report.rows_out, report.rows_in, out)
    for step in report.steps:
        log.info("  dropped %6d: %s %s", step["dropped"], step["reason"], step["dropped_by_source"])


if __name__ == "__main__":
    main()
