"""DVC stage `register`: the reported DT -> `cnnperf-dt@champion`, the reported best -> `cnnperf-best@champion`.

The champion is the reported run: exactly the runs behind the `random` rows of reports/metrics.json (this
pipeline run's `evaluate` output; each run named by its training job's run log reports/train/runs/<model>.json)
are registered, never a search of the store. "Best" = lowest `selection_cv_mape` among those rows: a CV on the
training part with the same folds over the same rows for every model (each model's own tuning `cv_mape` may be
on a sample of its choice); the test split plays no part in the choice.
Refuses (exit code 1, registry unchanged) a stale or inconsistent metrics file and, unless
`register.allow_dirty=true`, a dirty working tree or a run trained from one. Writes reports/train/registry.json
(names, aliases, metrics: the same bytes when the same runs are reported) and the run log
reports/train/runs/registry.json (versions, run ids, commit).

Usage: python -m src.register [register.allow_dirty=true] [register.metrics=reports/metrics.json]
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from src.config import REPO_ROOT, register_resolvers
from src.register.registry import RegistrationRefused, register_reported, split_run_log
from src.tracking import write_run_log

register_resolvers()
log = logging.getLogger("cnnperf.register")


def run_register(c: dict, root: Path = REPO_ROOT) -> dict:
    """Check and register (see src.register.registry.register_reported); returns the registry.json content."""
    return register_reported(c, root)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    c = OmegaConf.to_container(cfg, resolve=True)
    try:
        out = run_register(c)
    except RegistrationRefused as exc:
        raise SystemExit(f"register refused: {exc}") from None
    stable, run_log = split_run_log(out)
    (REPO_ROOT / c["reports_dir"] / "registry.json").write_text(json.dumps(stable, indent=2) + "\n")
    write_run_log(REPO_ROOT / c["reports_dir"], "registry", run_log)
    for k in ("dt", "best"):
        r = out[k]
        log.info("%s v%d (%s, run %s, selection cv MAPE %.2f %%, test MAPE %.2f %%) -> %s", r["name"], r["version"],
                 r["estimator"], r["run_id"], r["selection_cv_mape"], r["test_mape"], r["uri"])


if __name__ == "__main__":
    main()
