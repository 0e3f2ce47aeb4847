"""The real training table and kernel profiles for equivalence tests (features, fast serving path).

Why a helper: the comparisons must run on real rows (every precision, mode, runtime, framework release, CNNs with
and without a kernel profile), and a fresh clone has neither data/processed/dataset.parquet nor
kernel_profiles.parquet (DVC outputs). Where they exist the whole table is used (26,794 rows); else the table is
rebuilt from the committed raw data (`tests.predict.realdata`, ~10 s) and sampled, and the profiles of the
sampled CNNs are compacted from the committed layer table, so CI stays within a minute.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

from src.config import REPO_ROOT

PROCESSED = REPO_ROOT / "data" / "processed"
CI_ROWS = 4000


def whole_table(tmp: str) -> tuple[pd.DataFrame, dict]:
    """(every dataset row, resolved config): the committed pipeline's table if built, else one built from the raw
    data exactly as the `features` stage builds it (a fresh clone, CI)."""
    from omegaconf import OmegaConf

    from src.config import compose
    from src.features.dataset import build_dataset
    from tests.predict.realdata import overrides, processed_dir

    if (PROCESSED / "dataset.parquet").exists():
        return pd.read_parquet(PROCESSED / "dataset.parquet"), OmegaConf.to_container(compose([]), resolve=True)
    folder = Path(tmp)
    c = OmegaConf.to_container(compose(overrides(processed_dir(folder), folder)), resolve=True)
    df, _, _ = build_dataset(REPO_ROOT, c["data"], c["features"], c["target"], seed=c["seed"])
    return df, c


@lru_cache(maxsize=2)
def real_table(tmp: str) -> tuple[pd.DataFrame, object, dict]:
    """(dataset rows, ProfileIndex covering them, resolved default config)."""
    from src.features.kernels import LAYER_COLUMNS, kernel_profiles
    from src.features.layer_physics import ProfileIndex, load_profile_index

    df, c = whole_table(tmp)
    if not (PROCESSED / "dataset.parquet").exists():
        df = df.sample(n=min(CI_ROWS, len(df)), random_state=0).reset_index(drop=True)
    if (PROCESSED / "kernel_profiles.parquet").exists():
        index = load_profile_index(str(PROCESSED / "kernel_profiles.parquet"))
    else:
        keys = sorted(df["model_key"].astype(str).unique())
        layers = pd.read_parquet(PROCESSED / "layers.parquet", columns=LAYER_COLUMNS,
                                 filters=[("model_key", "in", keys)])
        index = ProfileIndex(kernel_profiles(layers))
    return df, index, c
