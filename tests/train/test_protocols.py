"""Protocols keep held-out groups out of training and tuning."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from src.config import compose
from src.features.dataset import build_dataset
from src.train.protocols import (
    PROTOCOLS,
    architecture_labels,
    config_ids,
    cv_splits,
    grouped_folds,
    outer_folds,
    random_row_split,
    random_split,
    setting_support,
    twins_across,
)
from tests.train.tiny import write_tables


def dataset(tmp):
    data = write_tables(tmp)
    c = OmegaConf.to_container(compose([f"{k}={v}" for k, v in data.items()]), resolve=True)
    df, _, _ = build_dataset(tmp, c["data"], c["features"], c["target"])
    return df, c


def test_random_rows_is_70_30_and_disjoint(tmp_path):
    df, c = dataset(tmp_path)
    f = random_row_split(df, 0.3, 42)
    assert len(f.test) == round(0.3 * len(df)) or abs(len(f.test) - 0.3 * len(df)) < 1
    assert not set(f.train) & set(f.test) and len(f.train) + len(f.test) == len(df)


def test_random_holds_out_30_percent_of_configurations_whole(tmp_path):
    df, c = dataset(tmp_path)
    # Twins: the same configuration measured under a second framework release.
    twin = df.iloc[:200].copy()
    twin["framework_version"] = "9.9"
    twin["measurement_id"] = twin["measurement_id"] + ":twin"
    df = __import__("pandas").concat([df, twin], ignore_index=True)
    ids = config_ids(df)
    assert len(set(ids)) < len(df)
    f = random_split(df, 0.3, 42)
    assert not set(f.train) & set(f.test) and len(f.train) + len(f.test) == len(df)
    assert abs(len(set(ids[f.test])) - 0.3 * len(set(ids))) <= 1
    assert twins_across(df, f.train, f.test) == 0
    rows = random_row_split(df, 0.3, 42)
    assert twins_across(df, rows.train, rows.test) > 0  # the old split does put twins on both sides


def test_no_protocol_but_random_rows_splits_a_configuration(tmp_path):
    df, c = dataset(tmp_path)
    for protocol in PROTOCOLS:
        if protocol == "random_rows":
            continue
        folds, _ = outer_folds(df, protocol, c["split"], 42)
        for f in folds:
            assert twins_across(df, f.train, f.test) == 0, (protocol, f.name)


def test_setting_support_labels_rows_whose_measurement_setup_only_the_held_out_gpu_has(tmp_path):
    df, c = dataset(tmp_path)
    # The RTX 3090's training steps ran under a release no other GPU has (as timm's PyTorch 1.10-2.1 rows do), and
    # the V100's fp32 inference under a layout no other GPU has.
    release = df["gpu"].eq("GeForce RTX 3090") & df["mode"].eq("training")
    df.loc[release, "framework_version"] = "1.10.0"
    layout = df["gpu"].eq("Tesla V100 PCIe 16 GB") & df["precision"].eq("fp32") & df["mode"].eq("inference")
    df.loc[layout, "memory_layout"] = "nhwc"
    # the tiny table's few `lambda` rows are all on the RTX 3090 too: a source no other GPU has
    assert set(df.loc[df["source"].eq("lambda"), "gpu"]) == {"GeForce RTX 3090"}
    expected = np.where(df["source"].eq("lambda") | layout, "unseen", np.where(release, "other_release", "seen"))
    folds, _ = grouped_folds(df, "leave_gpu_out", c["split"], 42)
    for f in folds:
        support = setting_support(df, f.train, f.test)
        assert support.shape == f.test.shape
        assert support.tolist() == expected[f.test].tolist(), f.name
    assert (expected == "other_release").sum() > 100 and (expected == "unseen").sum() > 50
    # a row-level split leaves almost every setting on both sides
    rows = random_row_split(df, 0.3, 42)
    support = setting_support(df, rows.train, rows.test)
    assert (support == "seen").mean() > 0.99
    with pytest.raises(KeyError, match=r"setting columns \['source'\] missing"):
        setting_support(df.drop(columns="source"), rows.train, rows.test)


def test_leave_model_out_holds_each_architecture_out_once(tmp_path):
    df, c = dataset(tmp_path)
    folds, _ = grouped_folds(df, "leave_model_out", c["split"], 42)
    assert len(folds) == c["split"]["leave_model_out"]["n_groups"]
    seen = set()
    for f in folds:
        held = set(df["model_key"].iloc[f.test])
        assert held == set(f.held_out) and not held & set(df["model_key"].iloc[f.train]) and not held & seen
        seen |= held
    assert seen == set(df["model_key"])


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


def test_leave_arch_out_trains_only_on_older_architectures(tmp_path):
    df, c = dataset(tmp_path)
    folds, skipped = grouped_folds(df, "leave_arch_out", c["split"], 42)
    arch = architecture_labels(df)
    by_name = {f.name: f for f in folds}
    assert set(by_name) == {"ada_hopper_blackwell", "ampere"} and skipped == []
    newest = by_name["ada_hopper_blackwell"]
    assert set(arch[newest.test]) == {"Ada", "Blackwell"} and set(arch[newest.train]) == {"Volta", "Ampere"}
    assert newest.held_out == ["GeForce RTX 4090", "GeForce RTX 5090"]
    ampere = by_name["ampere"]
    assert set(arch[ampere.test]) == {"Ampere"} and set(arch[ampere.train]) == {"Volta"}
    for f in folds:
        assert not set(df["gpu"].iloc[f.train]) & set(df["gpu"].iloc[f.test])


def test_architecture_of_an_unmapped_capability_is_an_error(tmp_path):
    df, _ = dataset(tmp_path)
    df.loc[0, "compute_capability"] = 2.0
    with pytest.raises(ValueError, match=r"compute capability \[2.0\]"):
        architecture_labels(df)


def test_leave_runtime_out_holds_each_runtime_group_out_whole(tmp_path):
    df, c = dataset(tmp_path)
    mode = np.where(df["model_key"].isin(["resnet18", "resnet50"]) & df["precision"].eq("amp_fp16"), "tensorrt",
                    np.where(df["model_key"].eq("vgg11"), "xla_tensorrt",
                             np.where(df["model_key"].eq("convnext_tiny"), "torch_compile", "eager")))
    df = df.assign(compile_mode=mode)
    cfg = {**c["split"], "leave_runtime_out": {"groups": {"tensorrt": ["tensorrt", "xla_tensorrt"],
                                                          "torch_compile": ["torch_compile"], "xla": ["xla"]},
                                               "min_test_rows": 10}}
    folds, skipped = grouped_folds(df, "leave_runtime_out", cfg, 42)
    assert [f.name for f in folds] == ["tensorrt", "torch_compile"] and skipped == ["xla"]  # no xla row here
    trt = folds[0]
    assert set(df["compile_mode"].iloc[trt.test]) == {"tensorrt", "xla_tensorrt"}
    assert not {"tensorrt", "xla_tensorrt"} & set(df["compile_mode"].iloc[trt.train])
    assert len(trt.train) + len(trt.test) == len(df) and trt.held_out == ["tensorrt", "xla_tensorrt"]
    assert twins_across(df, trt.train, trt.test) == 0
    bad = {**cfg, "leave_runtime_out": {"groups": {"trt": ["tensorrtt"]}}}
    with pytest.raises(ValueError, match=r"unknown compile_mode value\(s\) \['tensorrtt'\]; the measurement schema"):
        grouped_folds(df, "leave_runtime_out", bad, 42)


def _membership(folds, labels):
    return {g: f.name for f in folds for g in set(labels[f.test])}


def test_grouped_folds_stay_put_when_rows_and_groups_are_added():
    """Adding a GPU's rows (our own H200 rows did) must not move any family or CNN to another fold."""
    from src.train.protocols import _stable_group_folds

    rng = np.random.default_rng(0)
    labels = np.array([f"family{i}" for i in rng.integers(0, 60, 3000)])
    before = _stable_group_folds(labels, 5, 42, "families")
    assert len(before) == 5 and all(len(f.test) for f in before)
    assert np.array_equal(np.sort(np.concatenate([f.test for f in before])), np.arange(len(labels)))
    # more rows of existing groups (skewing the row counts) and two new groups
    grown = np.concatenate([labels, np.repeat(["family3", "family7"], 2000), ["brand_new", "another_one"]])
    after = _stable_group_folds(grown, 5, 42, "families")
    old, new = _membership(before, labels), _membership(after, grown)
    assert all(new[g] == old[g] for g in old)
    for f in after:  # still: each group held out once, never in its own fold's training part
        assert not set(grown[f.test]) & set(grown[f.train])
    # the balanced GroupKFold this replaced does move groups here (why the hash is used)
    from sklearn.model_selection import GroupKFold

    def kfold(lab):
        return {g: k for k, (_, te) in enumerate(GroupKFold(5).split(lab, groups=lab)) for g in set(lab[te])}
    moved_before, moved_after = kfold(labels), kfold(grown)
    assert any(moved_after[g] != moved_before[g] for g in moved_before)


def test_too_few_groups_for_the_hash_still_gives_every_fold_a_group():
    from src.train.protocols import _stable_group_folds

    labels = np.array(["a", "b", "c", "a", "b", "c", "d"])
    folds = _stable_group_folds(labels, 4, 42, "x")
    assert len(folds) == 4 and all(len(f.test) for f in folds)
    assert sorted(g for f in folds for g in f.held_out) == ["a", "b", "c", "d"]
