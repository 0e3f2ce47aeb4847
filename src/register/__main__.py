"""DVC stage `register`: best DT -> `cnnperf-dt@champion`, best of all five -> `cnnperf-best@champion`.

"Best" = lowest validation (cross-validated, training-part) MAPE of the random protocol's study, among runs on
the current data version; the test split plays no part in the choice. Writes reports/train/registry.json.
"""

from __future__ import annotations

import json
import logging

import hydra
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from src.register.registry import best_run, register
from src.tracking import file_md5, setup
from src.train.config import REPO_ROOT, register_resolvers

register_resolvers()
log = logging.getLogger("cnnperf.register")


def run_register(c: dict) -> dict:
    exp_id = setup(c["mlflow"]["tracking_uri"], c["mlflow"]["experiment"], c["mlflow"]["artifact_root"])
    client = MlflowClient(c["mlflow"]["tracking_uri"])
    data_version = file_md5(REPO_ROOT / c["data"]["measurements"])
    target = c["target"]["name"]
    alias = c["mlflow"]["alias"]
    out = {
        "dt": register(client, best_run(client, exp_id, data_version, target, "dt"), c["mlflow"]["dt_model_name"],
                       alias),
        "best": register(client, best_run(client, exp_id, data_version, target), c["mlflow"]["best_model_name"],
                         alias),
        "data_version": data_version,
        "tracking_uri": c["mlflow"]["tracking_uri"],
    }
    return out


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    c = OmegaConf.to_container(cfg, resolve=True)
    out = run_register(c)
    path = REPO_ROOT / c["reports_dir"] / "registry.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    for k in ("dt", "best"):
        r = out[k]
        log.info("%s v%d (%s, cv MAPE %.2f %%) -> %s", r["name"], r["version"], r["estimator"],
                 r["validation_cv_mape"], r["uri"])


if __name__ == "__main__":
    main()
