"""Shared settings at the bottom of the flow: the repo root, the `${repo:}` resolver and config composition.

Imports nothing of ours, so every layer (ingest to serve) may use it without reaching up into `src.train`.
"""

from __future__ import annotations

import threading
from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"
# Hydra's compose API keeps one process-wide GlobalHydra: two threads composing at once (concurrent protocols, each
# distilled tree composing its teacher's config) would initialise it twice, or clear it under the other's feet.
_COMPOSE_LOCK = threading.RLock()


def register_resolvers() -> None:
    """`${repo:}` -> absolute repo root, so MLflow/Optuna URIs are absolute whatever the working directory."""
    if not OmegaConf.has_resolver("repo"):
        OmegaConf.register_new_resolver("repo", lambda: str(REPO_ROOT))


def compose(overrides: list[str] | None = None):
    """Compose the training config outside @hydra.main (tests, register, benchmarks)."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    with _COMPOSE_LOCK:
        if GlobalHydra.instance().is_initialized():  # inside a @hydra.main app: same conf/
            return hcompose(config_name="config", overrides=list(overrides or []))
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hcompose(config_name="config", overrides=list(overrides or []))
