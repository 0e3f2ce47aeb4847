"""The ptx stage writes the same bytes for the same rows, whatever order they were computed or carried in.

Measured before the fix: `dvc repro` on a fresh clone rewrote the committed static_features.parquet with the same
rows in another order, dirtying git and rerunning every later stage.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from src.zoo.pipeline import ZOO_VERSION
from src.zoo.table import canonical, run_table

MODELS = ["resnet50", "resnet18", "vgg11", "densenet121"]


def _inputs(folder) -> None:
    pd.DataFrame({"model": MODELS, "model_key": MODELS, "model_source": "torchvision", "img_size": 224,
                  "batch_size": 32, "gpu": "A", "is_cpu": False, "is_cnn": True, "gmacs": [4.1, 1.8, 7.6, 2.9]}
                 ).to_parquet(folder / "m.parquet")
    pd.DataFrame({"gpu": ["A"], "compute_capability": [8.6]}).to_parquet(folder / "g.parquet")
    # The committed tables of an earlier run: a fresh clone carries their rows and computes nothing.
    pd.DataFrame({"model_key": MODELS, "img_size": 224, "batch_size": 32, "compute_capability": 8.6,
                  "arch": "sm_86", "ptx_kernels": [10.0, 5.0, 8.0, 12.0], "zoo_version": ZOO_VERSION}
                 ).to_parquet(folder / "c.parquet", index=False)


def _static(order: list[int], columns_reversed: bool) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"model_key": MODELS, "static_img_size": 224, "zoo_source": "torchvision",
                       "zoo_model": MODELS, "gmacs": rng.uniform(1, 9, 4), "depth": [50, 18, 11, 121],
                       "activations_m": rng.uniform(1, 20, 4)}).iloc[order]
    return df[df.columns[::-1]] if columns_reversed else df


def _run(folder, static: pd.DataFrame) -> bytes:
    static.to_parquet(folder / "s.parquet", index=False)
    run_table(folder / "m.parquet", folder / "g.parquet", folder / "cache", folder / "c.parquet", folder / "f.csv",
              folder / "s.parquet", offline_only=True, model_timeout_s=None, log=lambda _m: None)
    return (folder / "s.parquet").read_bytes()


def test_static_table_bytes_do_not_depend_on_row_or_column_order(tmp_path):
    _inputs(tmp_path)
    first = _run(tmp_path, _static([2, 0, 3, 1], columns_reversed=False))
    again = _run(tmp_path, pd.read_parquet(tmp_path / "s.parquet"))  # rerun on its own output: a no-op
    shuffled = _run(tmp_path, _static([1, 3, 0, 2], columns_reversed=True))
    assert first == again == shuffled
    out = pd.read_parquet(tmp_path / "s.parquet")
    assert list(out["model_key"]) == sorted(MODELS)
    keys = ["model_key", "static_img_size"]
    assert list(out.columns) == [*keys, *sorted(c for c in out.columns if c not in keys)]


def test_canonical_breaks_key_ties_by_the_other_columns():
    df = pd.DataFrame({"k": ["b", "a", "a"], "v": [1.0, np.nan, 0.5], "w": ["x", "y", "z"]})
    a = canonical(df, ["k"])
    b = canonical(df.iloc[::-1], ["k"])
    pd.testing.assert_frame_equal(a, b)
    assert list(a["v"].fillna(-1)) == [0.5, -1, 1.0]
