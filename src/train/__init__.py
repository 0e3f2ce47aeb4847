"""Training: Optuna-tuned regressors under every protocol, logged to MLflow (`python -m src.train model=<name>`).

The public entry other layers use (predict's hold-out fits, the e2e comparison, benchmarks), so that there is
one way to fit a model: `train` (a whole run from a resolved config), `fit_model` / `make_model` (one fit from a
config), `log_served_model` and `served_metadata` (the served pyfunc), `pip_requirements`, and the protocol
splits `random_split`, `outer_folds`, `family_labels`, `config_ids`, `fingerprint` (a run's `split_fingerprint`
tag), `architecture_labels`, `ARCH_FOLDS`, `GROUP_TABLE` (the column each protocol reports by)
and `SUPPORT_LEVELS` (how well training knew a held-out row's measurement setting). Everything else
in the package is internal.
"""

from src.train.fit import fit_model, gpu_table, log_served_model, make_model, pip_requirements, served_metadata
from src.train.protocols import (
    ARCH_FOLDS,
    GROUP_TABLE,
    PROTOCOLS,
    SUPPORT_LEVELS,
    architecture_labels,
    config_ids,
    family_labels,
    fingerprint,
    outer_folds,
    random_split,
)


def train(c: dict) -> dict:
    """A full training run (every configured protocol) of the model in a resolved config; returns its summary."""
    from src.train.run import train as run_train

    return run_train(c)


__all__ = [
    "ARCH_FOLDS",
    "GROUP_TABLE",
    "PROTOCOLS",
    "SUPPORT_LEVELS",
    "architecture_labels",
    "config_ids",
    "family_labels",
    "fingerprint",
    "fit_model",
    "gpu_table",
    "log_served_model",
    "make_model",
    "outer_folds",
    "pip_requirements",
    "random_split",
    "served_metadata",
    "train",
]
