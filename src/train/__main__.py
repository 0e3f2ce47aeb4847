"""`python -m src.train model=<lr|knn|rf|dt|xgb> [overrides]`; `-m model=lr,knn,rf,dt,xgb` sweeps all five.

(The end-to-end batch/iterations time model sits above training in the flow: `python -m src.e2e`.)"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from src.config import register_resolvers

register_resolvers()
log = logging.getLogger("cnnperf.train")


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    c = OmegaConf.to_container(cfg, resolve=True)
    from src.train.run import train

    summary = train(c)
    for protocol, res in summary["protocols"].items():
        log.info("%s %-16s MAPE %6.2f %%  R2 %.4f  adjR2 %.4f", summary["model"], protocol, res["mape"],
                 res["r2"], res["adj_r2"])
    log.info("%s done in %.1f s", summary["model"], summary["wall_seconds"])
    # the value a Hydra sweep over models compares: the selection CV (same rows and folds for every model)
    return float(summary["selection_cv_mape"] or summary["validation_cv_mape"] or 0.0)


if __name__ == "__main__":
    main()
