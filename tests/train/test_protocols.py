"""Protocols keep held-out groups out of training and tuning."""

import numpy as np
from omegaconf import OmegaConf

from src.features.dataset import build_dataset
from src.train.config import compose
from src.train.protocols import cv_splits, grouped_folds, random_split
from tests.train.tiny import write_tables


def dataset(tmp):
    data = write_tables(tmp)
    c = OmegaConf.to_container(compose([f"{k}={v}" for k, v in data.items()]), resolve=True)
    df, _, _ = build_dataset(tmp, c["data"], c["features"], c["target"])
    return df, c


def test_random_is_70_30_and_disjoint(tmp_path):
    df, c = dataset(tmp_path)
    f = random_split(df, 0.3, 42)
    assert len(f.test) == round(0.3 * len(df)) or abs(len(f.test) - 0.3 * len(df)) < 1
    assert not set(f.train) & set(f.test) and len(f.train) + len(f.test) == len(df)


def test_leave_gpu_out_never_trains_or_tunes_on_held_out_gpu(tmp_path):
    df, c = dataset(tmp_path)
    folds, skipped = grouped_folds(df, "leave_gpu_out", c["split"], 42)
    assert len(folds) == df["gpu"].nunique() and skipped == []
    for f in folds:
        assert set(df["gpu"].iloc[f.test]) == {f.name}
        assert f.name not in set(df["gpu"].iloc[f.train])
        groups = df["gpu"].to_numpy()[f.train]
        for tr, va in cv_splits(len(f.train), groups, 3, 42):
            assert not set(groups[tr]) & set(groups[va])


def test_leave_family_out_groups_are_disjoint(tmp_path):
    df, c = dataset(tmp_path)
    folds, _ = grouped_folds(df, "leave_family_out", c["split"], 42)
    assert len(folds) == 5
    seen = set()
    for f in folds:
        test_fams = set(df["family"].iloc[f.test])
        assert test_fams == set(f.held_out)
        assert not test_fams & set(df["family"].iloc[f.train])
        assert not test_fams & seen
        seen |= test_fams
    assert seen == set(df["family"])
    assert np.array_equal(np.sort(np.concatenate([f.test for f in folds])), np.arange(len(df)))
