"""On the REAL measurement table: no protocol puts rows of one configuration on both sides of a split.

Twins (the same CNN, GPU and settings measured under another framework release, or a repeated run) are about half
the table; a split that separates them tests memory, not prediction. `random_rows` (the old row split) is checked
to do exactly that, so this test can fail.
"""

import numpy as np
import pytest
from omegaconf import OmegaConf

from src.config import REPO_ROOT, compose
from src.features.dataset import build_dataset
from src.train.protocols import PROTOCOLS, config_ids, cv_splits, group_labels, outer_folds, subsample
from tests.predict.realdata import overrides, processed_dir


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("twins")
    c = OmegaConf.to_container(compose(overrides(processed_dir(tmp), tmp)), resolve=True)
    df, _, _ = build_dataset(REPO_ROOT, c["data"], c["features"], c["target"], seed=int(c["seed"]))
    return df, c


def test_the_real_table_has_twins(real):
    df, _ = real
    ids = config_ids(df)
    sizes = np.bincount(ids)
    assert (sizes[ids] > 1).sum() > 10_000  # about half the rows have a twin


@pytest.mark.parametrize("protocol", [p for p in PROTOCOLS if p != "random_rows"])
def test_no_configuration_on_both_sides(real, protocol):
    df, c = real
    ids = config_ids(df)
    folds, _ = outer_folds(df, protocol, c["split"], int(c["seed"]))
    held = np.concatenate([f.test for f in folds])
    assert len(held) == len(np.unique(held))  # every row held out at most once
    labels = group_labels(df, protocol)
    for f in folds:
        both = set(ids[f.train]) & set(ids[f.test])
        assert not both, f"{protocol}/{f.name}: {len(both)} configurations on both sides"
        # Tuning's cross-validation inside the training part keeps them together too.
        tune = subsample(f.train, int(c["sweep"]["tune_max_rows"]), int(c["seed"]))
        for tr, va in cv_splits(len(tune), labels[tune], int(c["sweep"]["cv_folds"]), int(c["seed"])):
            assert not set(ids[tune[tr]]) & set(ids[tune[va]]), f"{protocol}/{f.name}: tuning CV splits twins"


def test_the_old_row_split_does_split_twins(real):
    df, c = real
    ids = config_ids(df)
    (f,), _ = outer_folds(df, "random_rows", c["split"], int(c["seed"]))
    assert len(set(ids[f.train]) & set(ids[f.test])) > 1000


def test_grouped_leave_gpu_out_holds_every_gpu_out_once_and_unseen(real):
    """The quick main job's variant (split.leave_gpu_out.n_groups): same held-out rows as one fold per GPU."""
    df, c = real
    per_gpu, skipped = outer_folds(df, "leave_gpu_out", c["split"], int(c["seed"]))
    cfg = {**c["split"], "leave_gpu_out": {**c["split"]["leave_gpu_out"], "n_groups": 8}}
    grouped, skipped_grouped = outer_folds(df, "leave_gpu_out", cfg, int(c["seed"]))
    assert len(grouped) == 8 and skipped_grouped == skipped
    gpus = df["gpu"].astype(str).to_numpy()
    held = np.concatenate([f.test for f in grouped])
    assert np.array_equal(np.sort(held), np.sort(np.concatenate([f.test for f in per_gpu])))
    assert sorted(g for f in grouped for g in f.held_out) == sorted(f.name for f in per_gpu)
    for f in grouped:
        assert not set(gpus[f.train]) & set(gpus[f.test]), f"{f.name}: a held-out GPU is in training"
        assert set(gpus[f.test]) == set(f.held_out)
