"""The rows a model was trained and tested on, rebuilt from its metadata (feature set, excluded families).

Why rebuild instead of storing: the dataset build and the seeded configuration-grouped 70/30 split are
deterministic (src.features.dataset + src.train.random_split), so the calibration part (inside the training part)
and the test split of a logged model can be reproduced from the config it names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from src.config import REPO_ROOT, compose
from src.features.dataset import build_dataset
from src.train import family_labels, random_split


@dataclass
class SplitData:
    df: pd.DataFrame
    cols: list[str]
    train: np.ndarray
    test: np.ndarray
    excluded: pd.DataFrame  # rows of excluded families (the honest "unseen CNN" check), same columns as df
    config: dict

    def fingerprint(self) -> str:
        """md5 of the train and test measurement ids: detects a dataset that changed since a model was fitted."""
        ids = self.df["measurement_id"].astype(str).to_numpy()
        text = "|".join(sorted(ids[self.train])) + "#" + "|".join(sorted(ids[self.test]))
        return hashlib.md5(text.encode()).hexdigest()


def config_for(features: str, overrides: list[str] | None = None) -> dict:
    from omegaconf import OmegaConf

    cfg = compose([f"features={features}", *(overrides or [])])
    return OmegaConf.to_container(cfg, resolve=True)


def load_split(features: str = "physics_ptx", exclude_families: list[str] | None = None,
               overrides: list[str] | None = None, max_rows: int | None = None) -> SplitData:
    """Dataset of a feature set, minus excluded families, split 70/30 exactly as `python -m src.train` does."""
    c = config_for(features, overrides)
    df, _, ptx = build_dataset(REPO_ROOT, c["data"], c["features"], c["target"], seed=int(c["seed"]))
    from src.features.engineer import input_columns

    cols = input_columns(c["features"], ptx)
    fam = family_labels(df).str.lower()
    excl = {f.lower() for f in (exclude_families or [])}
    unknown = sorted(excl - set(fam))
    if unknown:
        raise ValueError(f"--exclude-family {unknown}: no such family in the dataset; known: {sorted(set(fam))}")
    mask = fam.isin(excl).to_numpy()
    excluded = df.loc[mask].reset_index(drop=True)
    df = df.loc[~mask].reset_index(drop=True)
    if max_rows and len(df) > max_rows:
        df = df.sample(n=int(max_rows), random_state=int(c["seed"])).reset_index(drop=True)
    fold = random_split(df, float(c["split"]["random"]["test_size"]), int(c["seed"]))
    return SplitData(df, cols, fold.train, fold.test, excluded, c)
