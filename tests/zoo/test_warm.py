"""Which targets `python -m src.zoo warm` computes at a batch, in which order; and that it stops clearly without the
zoo extra."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from src.zoo.targets import select_targets
from src.zoo.warm import warm, warm_targets


def _meas() -> pd.DataFrame:
    # resnet18 (1.8 GMACs): 3 rows at batch >= 32; vgg16 (15.5 GMACs): 4 rows at >= 32; alexnet: only batch 1.
    rows = [("resnet18", 1.8, b, g) for b, g in ((1, "A"), (64, "A"), (256, "B"), (256, "C"))]
    rows += [("vgg16", 15.5, b, g) for b, g in ((64, "A"), (128, "A"), (256, "B"), (512, "C"))]
    rows += [("alexnet", 0.7, 1, "A"), ("mobilenet_v2", 0.3, 1, "A"), ("mobilenet_v2", 0.3, 1, "cpu:x")]
    df = pd.DataFrame(rows, columns=["model", "gmacs", "batch_size", "gpu"])
    return df.assign(model_key=df["model"], model_source="torchvision", img_size=224, is_cnn=True,
                     is_cpu=df["gpu"].str.startswith("cpu:"))


def _gpus() -> pd.DataFrame:
    return pd.DataFrame({"gpu": ["A", "B", "C"], "compute_capability": [7.0, 8.6, 12.0]})


def test_extra_batch_targets_are_counted_cnns_measured_at_it_most_rows_per_gmac_first():
    meas = _meas()
    targets, keys = select_targets(meas, _gpus())
    counted = {("resnet18", 224), ("vgg16", 224), ("alexnet", 224)}
    todo = warm_targets(targets, keys, meas, 32, 1, [32], counted)
    # resnet18: 3 rows / 1.8 GMACs before vgg16: 4 rows / 15.5; alexnet has no batch >= 32; mobilenet_v2 uncounted
    assert [(t.model_key, rows) for t, rows in todo] == [("resnet18", 3), ("vgg16", 4)]


def test_extra_batch_targets_skip_pairs_held_or_failed_at_that_batch():
    meas = _meas()
    targets, keys = select_targets(meas, _gpus())
    counted = {("resnet18", 224), ("vgg16", 224)}
    todo = warm_targets(targets, keys, meas, 32, 1, [32], counted, failed={("resnet18", 224)})
    assert [t.model_key for t, _ in todo] == ["vgg16"]


def test_base_batch_targets_are_the_cnns_neither_counted_nor_failed():
    meas = _meas()
    targets, keys = select_targets(meas, _gpus())
    todo = warm_targets(targets, keys, meas, 1, 1, [32], {("resnet18", 224)}, failed={("vgg16", 224)})
    # without extra batches a measured batch of 64 is priced from batch 1: resnet18 would gain all its GPU rows
    assert [(t.model_key, rows) for t, rows in todo] == [("mobilenet_v2", 1), ("alexnet", 1)]
    assert [t.model_key for t, _ in warm_targets(targets, keys, meas, 1, 1, [], set())][0] == "mobilenet_v2"


def test_named_models_are_computed_even_if_counted_or_failed():
    meas = _meas()
    targets, keys = select_targets(meas, _gpus())
    counted = {("resnet18", 224), ("vgg16", 224), ("alexnet", 224)}
    todo = warm_targets(targets, keys, meas, 1, 1, [32], counted, failed={("vgg16", 224)}, models=["vgg*", "alexnet"])
    assert sorted(t.model_key for t, _ in todo) == ["alexnet", "vgg16"]
    # at an extra batch only those of them measured at it
    todo = warm_targets(targets, keys, meas, 32, 1, [32], counted, failed={("vgg16", 224)}, models=["vgg*", "alexnet"])
    assert [t.model_key for t, _ in todo] == ["vgg16"]


def test_a_batch_the_stage_does_not_compile_is_refused():
    meas = _meas()
    targets, keys = select_targets(meas, _gpus())
    with pytest.raises(ValueError, match="batch 8 is neither"):
        warm_targets(targets, keys, meas, 8, 1, [32], set())


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="needs an environment without the zoo")
def test_without_the_zoo_extra_it_stops_at_once_and_says_why(tmp_path):
    _meas().to_parquet(tmp_path / "m.parquet")
    _gpus().to_parquet(tmp_path / "g.parquet")
    lines: list[str] = []
    s = warm(tmp_path / "m.parquet", tmp_path / "g.parquet", tmp_path / "cache", tmp_path / "c.parquet",
             tmp_path / "k.parquet", tmp_path / "f.csv", tmp_path / "bf.csv", batch=1, base_batch=1, extra_batches=[],
             nvcc_archs=["sm_75"], model_timeout_s=None, log=lines.append)
    assert s["results"] == 0 and s["failures"] == [] and "torchvision" in s["missing_extra"]
    assert len(lines) == 1 and lines[0].startswith("[zoo warm] stopped")
    assert not list((tmp_path / "cache").rglob("failure.json"))
