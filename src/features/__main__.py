"""DVC stage `features`: build data/processed/dataset.parquet and reports/train/dataset.json.

Usage: python -m src.features [hydra overrides, e.g. features=static data.max_rows=5000]
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from src.config import REPO_ROOT, register_resolvers
from src.features.dataset import write_dataset

register_resolvers()
log = logging.getLogger("cnnperf.features")


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    c = OmegaConf.to_container(cfg, resolve=True)
    report = write_dataset(c)
    log.info("dataset: %d of %d rows -> %s", report.rows_out, report.rows_in, REPO_ROOT / c["data"]["dataset"])
    for step in report.steps:
        log.info("  dropped %6d: %s %s", step["dropped"], step["reason"], step["dropped_by_source"])


if __name__ == "__main__":
    main()
